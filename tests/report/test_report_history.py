"""The append-only run ledger under ci/history/ (rocmlab.report.history)."""

import dataclasses
import json
from pathlib import Path

import pytest
from freshness_helpers import executed_notebook, make_run, write_result

from rocmlab.report import history
from rocmlab.schemas import schema


def test_append_adds_each_run_once_and_never_rewrites_a_line(tmp_path):
    first = [make_run(days_ago=3), make_run(lab="02-other", days_ago=3)]
    changed = history.append(tmp_path, first)
    ledger = tmp_path / "ci" / "history" / "cpu-current.jsonl"
    assert ledger in changed and len(ledger.read_text().splitlines()) == 2
    before = ledger.read_bytes()
    assert history.append(tmp_path, first) == []
    history.append(tmp_path, [*first, make_run(days_ago=1)])
    after = ledger.read_bytes()
    assert after.startswith(before) and len(after.splitlines()) == 3
    runs, problems = history.read_ledger(tmp_path)
    assert problems == [] and [r.started_at for r in runs] == sorted(r.started_at for r in runs)
    assert runs[0] == first[0]


def test_freezes_are_stored_once_by_hash_and_read_back(tmp_path):
    run = make_run()
    history.append(tmp_path, [run, make_run(days_ago=2)])
    stored = list((tmp_path / "ci" / "history" / "freeze").iterdir())
    assert [p.name for p in stored] == [f"{run.freeze_sha256}.txt"]
    line = json.loads((tmp_path / "ci" / "history" / "cpu-current.jsonl").read_text().splitlines()[0])
    assert "freeze" not in line and line["freeze_sha256"] == run.freeze_sha256
    reread = history.read_ledger(tmp_path)[0][0]
    assert reread.freeze is None
    assert history.FreezeStore(tmp_path).packages(reread)["transformers"] == "5.24.0"


def test_malformed_lines_are_named_by_file_and_line(tmp_path):
    history.append(tmp_path, [make_run()])
    ledger = tmp_path / "ci" / "history" / "cpu-current.jsonl"
    with ledger.open("a") as out:
        out.write("{not json\n" + json.dumps({"schema": 1, "lab": "x"}) + "\n")
    runs, problems = history.read_ledger(tmp_path)
    assert len(runs) == 1
    assert problems[0].startswith("ci/history/cpu-current.jsonl:2: not a JSON line")
    assert problems[1] == "ci/history/cpu-current.jsonl:3: missing field lab_version (a version string)"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpu": "gfx942"}, "unknown field gpu (allowed: cells, commit,"),
        ({"fingerprint": {"python": "3.11.7", "cpu": "x"}}, "unknown field fingerprint.cpu (allowed: cpu_model,"),
        ({"cells": [{"index": 0, "duration_s": "2s"}]}, "field cells.0.duration_s: expected a cell {index, label"),
        ({"figures": [{"png": "..."}]}, "field figures: expected an empty list"),
    ],
)
def test_a_line_the_schema_refuses_is_named_by_file_line_and_field(tmp_path, change, message):
    """Unknown keys are refused, not dropped: a line is read against schemas/ledger.schema.json."""
    line = {**json.loads(make_run().to_json()), **change}
    ledger = tmp_path / "ci" / "history" / "cpu-current.jsonl"
    ledger.parent.mkdir(parents=True)
    ledger.write_text(json.dumps(line) + "\n")
    runs, problems = history.read_ledger(tmp_path)
    assert runs == [] and len(problems) == 1
    assert problems[0].startswith("ci/history/cpu-current.jsonl:1: " + message)


def test_the_ledger_schema_describes_every_field_of_a_line_and_no_other():
    fields = {f.name for f in dataclasses.fields(history.Run)} - history._TRANSIENT
    assert set(schema("ledger")["properties"]) == fields | history._RETIRED
    assert schema("ledger")["properties"]["fingerprint"]["$ref"] == "fingerprint.schema.json"
    assert schema("record")["properties"]["fingerprint"]["$ref"] == "fingerprint.schema.json"


def test_the_committed_ledger_reads_whole_and_keeps_its_fingerprints_apart_from_the_freeze():
    runs, problems = history.read_ledger(Path(__file__).resolve().parents[2])
    assert problems == [] and runs
    line = json.loads(runs[-1].to_json())
    assert "freeze" not in line["fingerprint"] and "freeze_sha256" not in line["fingerprint"]


def test_a_run_takes_cell_durations_and_traceback_from_its_executed_notebook(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_SHA", "c0ffee" * 6 + "abcd")
    for name, value in {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "amd/rocmlab"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GITHUB_RUN_ID", "42")
    root = tmp_path / "course"
    (root / "solutions" / "01-demo").mkdir(parents=True)
    (root / "solutions" / "01-demo" / "lab.py").write_text("print(1)\n")
    results = tmp_path / "results"
    write_result(results, status="failed", failing_cell={"index": 2, "ename": "ValueError", "evalue": "boom"})
    error = {
        "ename": "ValueError",
        "evalue": "boom",
        "traceback": [
            "\x1b[0;31mValueError\x1b[0m  Traceback",
            f'File "{root}/solutions/01-demo/lab.py", line 3',
            "ValueError: boom",
        ],
    }
    executed_notebook(results / "cpu-current" / "01-demo.ipynb", [0.5, 1.25, 3.0], error=error)
    runs, problems = history.load_results([results], history.Context.detect(root))
    (run,) = runs
    assert problems == []
    assert [c["duration_s"] for c in run.cells] == [0.5, 1.25, 3.0] and run.cells[1]["label"] == "step_1()"
    assert run.traceback_tail.splitlines() == [
        "ValueError  Traceback",
        'File "solutions/01-demo/lab.py", line 3',
        "ValueError: boom",
    ]
    assert run.commit == "c0ffee" * 6 + "abcd" and run.run_url == "https://github.com/amd/rocmlab/actions/runs/42"
    assert run.lab_source_sha256 == history.source_hash(root / "solutions" / "01-demo")
    assert run.notebook == "cpu-current/01-demo.ipynb" and run.freeze and run.fingerprint.freeze is None


def test_merge_keeps_the_ledger_line_and_adds_what_is_known_only_now(tmp_path):
    ledger_run = make_run()
    ledger_run.freeze = None
    fresh = make_run()
    fresh.notebook_path = tmp_path / "x.ipynb"
    merged = history.merge([ledger_run], [fresh, make_run(days_ago=0.5)])
    assert len(merged) == 2 and merged[0] is ledger_run
    assert ledger_run.freeze == fresh.freeze and ledger_run.notebook_path == fresh.notebook_path


@pytest.mark.parametrize("attempt, suffix", [("1", ""), ("2", "/attempts/2")])
def test_ci_run_url(monkeypatch, attempt, suffix):
    for name, value in {
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "amd/rocmlab",
        "GITHUB_RUN_ID": "7",
        "GITHUB_RUN_ATTEMPT": attempt,
    }.items():
        monkeypatch.setenv(name, value)
    assert history.ci_run_url() == "https://github.com/amd/rocmlab/actions/runs/7" + suffix
    monkeypatch.delenv("GITHUB_RUN_ID")
    assert history.ci_run_url() is None


@pytest.mark.slow
def test_two_real_runs_of_a_lab_leave_one_history_with_both(fixture_course, tmp_path, capsys):
    """Papermill executes the fixture lab twice as cpu-current; each stamp appends its run."""
    import sys
    from importlib.metadata import version

    from freshness_helpers import write_matrix

    from rocmlab.cli import main
    from rocmlab.course.catalog import discover, select
    from rocmlab.execution.fingerprint import fingerprint
    from rocmlab.execution.run import Target, run_lab

    # The verdict compares the run's packages with the entry's pins: pin what this machine has,
    # or every new transformers on PyPI turns this run stale.
    installed = [f"{name}=={version(name)}" for name in ("torch", "transformers", "peft")]
    write_matrix(fixture_course, cpu_current_pins=installed)
    target = Target("cpu-current", sys.executable, fingerprint())
    lab = select(discover(fixture_course), ["01-pass"])[0]
    for attempt in (1, 2):
        out = tmp_path / f"results{attempt}"
        record, _ = run_lab(fixture_course, lab, "smoke", target, out)
        assert record.status == "passed", record.reason
        assert main(["--root", str(fixture_course), "report", "--results", str(out), "--stamp"]) == 0
    runs, problems = history.read_ledger(fixture_course)
    assert problems == [] and [(r.lab, r.env) for r in runs] == [("01-pass", "cpu-current")] * 2
    assert runs[0].started_at < runs[1].started_at
    for run in runs:
        assert run.cells and all(c["duration_s"] >= 0 for c in run.cells)  # papermill's own timings
        assert run.freeze_sha256 and run.lab_source_sha256 == history.source_hash(
            fixture_course / "solutions" / "01-pass"
        )
    assert "| 01-pass | 1.2.0 | never run | never run | ✅ verified" in capsys.readouterr().out
