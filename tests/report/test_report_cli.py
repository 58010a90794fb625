"""`rocmlab report`: ledger plus new results, --stamp, --diff, --skip, --upstream, the dead-man check."""

import datetime as dt
import json

import pytest
from freshness_helpers import CPU_CURRENT, at, write_matrix, write_result

from rocmlab.cli import main
from rocmlab.course.course import Course
from rocmlab.report.stamp import README_END, README_START


@pytest.fixture
def course(make_course):
    root = make_course({"01-demo": (None, None), "02-other": (None, None)})
    write_matrix(root)
    (root / "README.md").write_text(f"# Course\n\n{README_START}\nold\n{README_END}\n\nMore.\n", encoding="utf-8")
    return root


def report(course, *args):
    return main(["--root", str(course), "report", *args])


def ledger_lines(course, env):
    path = course / "ci" / "history" / f"{env}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_a_fresh_clone_lists_every_current_entry_and_rocm_says_never_run(course, capsys):
    assert report(course) == 0
    out = capsys.readouterr().out
    assert (
        out.splitlines()[0]
        == "| lab | version | rocm-10.0 | rocm-7.14 | cpu-current | last pass | last run | freshness |"
    )
    assert "| 01-demo | 1.0.0 | never run | never run | never run | never | never | ⚠️ stale |" in out


def test_running_the_cpu_environments_twice_leaves_one_history_with_both_runs(course, tmp_path, capsys):
    now = dt.datetime.now(dt.UTC)
    for run_number, days_ago in ((1, 2.0), (2, 0.1)):
        results = tmp_path / f"results{run_number}"
        for env in ("cpu-current", "cpu-previous"):
            for lab in ("01-demo", "02-other"):
                write_result(results, lab=lab, env=env, started_at=at(days_ago, now))
        assert report(course, "--results", str(results), "--stamp") == 0
    for env in ("cpu-current", "cpu-previous"):
        lines = ledger_lines(course, env)
        assert len(lines) == 4 and sorted({line["lab"] for line in lines}) == ["01-demo", "02-other"]
        assert len({line["started_at"] for line in lines}) == 2
    assert report(course, "--results", str(tmp_path / "results2"), "--stamp") == 0  # stamping again adds nothing
    assert len(ledger_lines(course, "cpu-current")) == 4
    readme = (course / "README.md").read_text()
    assert (
        "old" not in readme
        and "More." in readme
        and "| 01-demo | 1.0.0 | never run | never run | ✅ verified 4s |" in readme
    )
    summary = (course / "ci" / "results" / "freshness.json").read_text()
    assert str(tmp_path) not in summary and json.loads(summary)["generated_at"] is None
    badges = {p.name: json.loads(p.read_text()) for p in (course / "ci" / "badges").iterdir()}
    assert set(badges) == {"rocm-10.0.json", "rocm-7.14.json", "cpu-current.json", "cpu-previous.json"}
    assert badges["cpu-current.json"] == {
        "schemaVersion": 1,
        "label": "rocmlab cpu-current",
        "message": "2/2 verified",
        "color": "brightgreen",
    }
    assert badges["rocm-10.0.json"]["message"] == "never run"


def test_the_report_reads_the_ledger_so_an_entry_not_rerun_keeps_its_column(course, tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    write_result(first, env="cpu-previous", days_ago=1)
    assert report(course, "--results", str(first), "--stamp") == 0
    write_result(
        second, env="cpu-current", status="failed", days_ago=0.5, failing_cell={"index": 3, "ename": "E", "evalue": "x"}
    )
    capsys.readouterr()
    assert report(course, "--results", str(second)) == 0
    out = capsys.readouterr().out
    assert "cpu-previous (previous)" in out.splitlines()[0]
    assert "| 01-demo | 1.0.0 | never run | never run | ❌ failing 4s | ✅ verified 4s |" in out


def test_diff_after_bumping_a_pin_names_the_changed_packages(course, tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    write_result(before, days_ago=1)
    assert report(course, "--results", str(before), "--stamp") == 0
    bumped = [p.replace("transformers==5.24.0", "transformers==5.25.0") for p in CPU_CURRENT] + ["safetensors==0.7.0"]
    write_result(after, days_ago=0.1, freeze=bumped)
    capsys.readouterr()
    assert report(course, "--results", str(after), "--diff") == 0
    out = capsys.readouterr().out
    assert "### 01-demo on cpu-current" in out
    assert "- package versions changed: transformers 5.24.0 → 5.25.0" in out
    assert "- package versions changed: safetensors (none) → 0.7.0" in out
    assert report(course, "--results", str(after), "--diff", "--format", "json") == 0
    (pair,) = json.loads(capsys.readouterr().out)
    assert pair["packages"] == ["safetensors (none) → 0.7.0", "transformers 5.24.0 → 5.25.0"]


def test_skip_records_every_lab_on_the_entry_with_its_reason(course, capsys):
    assert report(course, "--skip", "rocm-10.0=no runner picked the job up", "--stamp") == 0
    lines = ledger_lines(course, "rocm-10.0")
    assert [(line["lab"], line["status"], line["reason"]) for line in lines] == [
        ("01-demo", "skipped", "no runner picked the job up"),
        ("02-other", "skipped", "no runner picked the job up"),
    ]
    assert "| 01-demo | 1.0.0 | ⏭️ skipped | never run |" in (course / "README.md").read_text()
    assert report(course, "--skip", "rocm-99.0=x") == 2
    assert "'rocm-99.0' is not a matrix entry" in capsys.readouterr().err
    assert report(course, "--skip", "rocm-10.0") == 2


def test_upstream_findings_mark_verified_cells_outdated(course, tmp_path, capsys):
    results = tmp_path / "results"
    write_result(results, env="rocm-7.14")
    findings = tmp_path / "upstream.json"
    findings.write_text(json.dumps({"updates": ["rocm-7.14: PyTorch 2.12.0 -> 2.12.1 (wheel)"], "new_entries": []}))
    assert report(course, "--results", str(results), "--upstream", str(findings)) == 0
    assert "🆕 outdated" in capsys.readouterr().out
    findings.write_text("")
    assert report(course, "--results", str(results), "--upstream", str(findings)) == 0
    assert "no upstream findings read" in capsys.readouterr().out


def test_dead_man_fails_loudly_without_a_recent_gpu_verification(course, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert report(course, "--max-gpu-age", "14") == 1
    captured = capsys.readouterr()
    assert "::error title=No recent GPU verification::" in captured.out
    assert "no GPU verification has ever been recorded" in captured.err
    old, recent = tmp_path / "old", tmp_path / "recent"
    write_result(old, env="rocm-10.0", days_ago=20)
    assert report(course, "--results", str(old), "--max-gpu-age", "14") == 1
    assert "is 20 days old" in capsys.readouterr().err
    write_result(recent, env="rocm-7.14", days_ago=3)
    assert report(course, "--results", str(old), str(recent), "--max-gpu-age", "14") == 0


def test_github_summary_is_appended_to_the_step_summary(course, tmp_path, capsys, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    results = tmp_path / "results"
    write_result(results, status="failed", failing_cell={"index": 5, "ename": "ValueError", "evalue": "bad"})
    assert report(course, "--results", str(results), "--github-summary") == 0
    text = summary.read_text()
    assert text.startswith("earlier step\n## rocmlab freshness")
    assert "| cpu-current | 0 | 0 | 1 | 0 | 0 | 0 | 1 |" in text
    assert "❌ **01-demo** on cpu-current: cell 5: ValueError: bad" in text
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert report(course, "--github-summary") == 2


def test_stamp_shows_local_runs_but_commits_only_the_matrix(course, tmp_path, capsys):
    results = tmp_path / "results"
    write_result(results, env="cpu-current")
    write_result(results, env="local", status="failed", failing_cell={"index": 1, "ename": "OSError", "evalue": "x"})
    assert report(course, "--results", str(results), "--stamp") == 0
    assert "local (not in matrix)" in capsys.readouterr().out  # printed
    readme = (course / "README.md").read_text()
    summary = (course / "ci" / "results" / "freshness.json").read_text()
    assert "| 01-demo | 1.0.0 | never run | never run | ✅ verified 4s |" in readme
    for committed in (readme, summary):
        assert "local" not in committed and "OSError" not in committed
    assert not (course / "ci" / "history" / "local.jsonl").exists()


def test_stamp_refuses_a_readme_without_markers(course, capsys):
    (course / "README.md").write_text("# Course\n")
    assert report(course, "--stamp") == 2
    assert "add the markers" in capsys.readouterr().err


def test_the_python_api_takes_keywords(course, tmp_path):
    from rocmlab.errors import InputError
    from rocmlab.report import command

    output = tmp_path / "out" / "freshness.json"
    assert command.main(course=Course(course), format="json", output=output) == command.EXIT_OK
    assert [lab["id"] for lab in json.loads(output.read_text())["labs"]] == ["01-demo", "02-other"]
    with pytest.raises(InputError, match="--format 'xml': expected one of md, html, json"):
        command.main(course=Course(course), format="xml")
