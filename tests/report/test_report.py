"""The verdict per (lab, matrix entry) and whether a lab is fresh (rocmlab.report.verdict)."""

import pytest
from freshness_helpers import NOW, entries, make_run

from rocmlab.course.catalog import discover
from rocmlab.report.render import to_markdown
from rocmlab.report.verdict import Upstream, build


@pytest.fixture
def course(make_course):
    return make_course({"01-demo": (None, None), "02-other": (None, None)})


def report(course, runs, **kw):
    return build(discover(course), runs, entries(course), now=NOW, **kw)


def cell(rep, lab, env):
    return next(r for r in rep.rows if r.lab.id == lab).cells[env]


def row(rep, lab):
    return next(r for r in rep.rows if r.lab.id == lab)


def test_with_no_runs_every_current_entry_is_a_column_and_says_never_run(course):
    rep = report(course, [])
    assert [c.name for c in rep.columns] == ["rocm-10.0", "rocm-7.14", "cpu-current"]
    assert [c.name for c in rep.judged_on] == ["rocm-10.0", "cpu-current"]
    assert {cell(rep, "01-demo", c.name).verdict for c in rep.columns} == {"never run"}
    assert row(rep, "01-demo").verdict == "stale"
    md = to_markdown(rep)
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len({line.count(" | ") for line in table[:1] + table[2:]}) == 1
    assert table[1].count("---") == table[0].count(" | ") + 1
    assert "| 01-demo | 1.0.0 | never run | never run | never run | never | never | ⚠️ stale |" in md


def test_verified_only_on_the_exact_pins_within_the_window(course):
    runs = [
        make_run(env="cpu-current", days_ago=2),
        make_run(lab="02-other", env="cpu-current", days_ago=15),
        make_run(lab="02-other", env="rocm-10.0", freeze=["torch==2.11.0+rocm10.0.0", "rocm-sdk-core==10.0.1"]),
    ]
    rep = report(course, runs, window_days=14)
    verified = cell(rep, "01-demo", "cpu-current")
    assert verified.verdict == "verified" and "on the entry's pins" in verified.detail
    old = cell(rep, "02-other", "cpu-current")
    assert old.verdict == "stale" and "15 days old (window 14 days)" in old.detail
    other_rocm = cell(rep, "02-other", "rocm-10.0")
    assert other_rocm.verdict == "stale" and "ROCm 10.0.1 (pinned 10.0.0)" in other_rocm.detail


def test_a_bumped_pin_unverifies_the_last_pass_and_names_the_package(course):
    old_pins = ["torch==2.13.0+cpu", "transformers==5.23.0", "peft==0.21.2"]
    rep = report(course, [make_run(env="cpu-current", freeze=old_pins)])
    stale = cell(rep, "01-demo", "cpu-current")
    assert stale.verdict == "stale" and "transformers 5.23.0 (pinned 5.24.0)" in stale.detail


def test_a_pass_of_an_older_lab_version_does_not_count(course):
    rep = report(course, [make_run(env="cpu-current", lab_version="0.9.0")])
    assert cell(rep, "01-demo", "cpu-current").verdict == "stale"
    assert "only v0.9.0 ran" in cell(rep, "01-demo", "cpu-current").detail


def test_failing_names_the_cell_and_error_and_keeps_last_pass_apart_from_last_run(course):
    bumped = ["torch==2.13.0+cpu", "transformers==5.24.0", "peft==0.21.2", "numpy==2.5.0"]
    runs = [make_run(days_ago=3), make_run(status="failed", days_ago=1, freeze=bumped)]
    rep = report(course, runs)
    failing = cell(rep, "01-demo", "cpu-current")
    assert failing.verdict == "failing"
    assert failing.detail == "cell 7: RuntimeError: HIP error: invalid device function"
    assert failing.last_pass is runs[0] and failing.last_run is runs[1]
    assert failing.changed_since_pass == ["numpy 2.4.6 → 2.5.0"]
    assert row(rep, "01-demo").verdict == "failing"
    assert row(rep, "01-demo").last_pass is runs[0] and row(rep, "01-demo").last_run is runs[1]


def test_flaky_says_how_many_repeats_passed(course):
    repeats = [{"run": 1, "status": "passed"}, {"run": 2, "status": "failed"}, {"run": 3, "status": "passed"}]
    rep = report(course, [make_run(status="flaky", repeats=repeats)])
    flaky = cell(rep, "01-demo", "cpu-current")
    assert flaky.verdict == "flaky" and flaky.detail.startswith("2/3 runs passed")
    assert row(rep, "01-demo").verdict == "flaky"
    assert "🔁 flaky 2/3" in to_markdown(rep)


def test_skipped_keeps_its_reason_and_does_not_erase_a_recent_verification(course):
    skipped = make_run(env="rocm-10.0", status="skipped", reason="no runner picked the job up")
    rep = report(course, [skipped, make_run(env="cpu-current", days_ago=2), make_run(status="skipped", days_ago=1)])
    assert cell(rep, "01-demo", "rocm-10.0").verdict == "skipped"
    assert cell(rep, "01-demo", "rocm-10.0").detail == "no runner picked the job up"
    assert cell(rep, "01-demo", "cpu-current").verdict == "verified"


def test_fresh_only_when_verified_on_the_newest_entry_of_each_kind(course):
    cpu_only = report(course, [make_run(env="cpu-current")])
    assert row(cpu_only, "01-demo").verdict == "stale"
    older_rocm = report(course, [make_run(env="cpu-current"), make_run(env="rocm-7.14")])
    assert cell(older_rocm, "01-demo", "rocm-7.14").verdict == "verified"
    assert row(older_rocm, "01-demo").verdict == "stale"
    both = report(course, [make_run(env="cpu-current"), make_run(env="rocm-10.0")])
    assert row(both, "01-demo").verdict == "fresh"
    assert row(both, "02-other").verdict == "stale"


def test_outdated_when_upstream_released_something_the_matrix_lacks(course):
    findings = {
        "updates": ["rocm-7.14: ROCm 7.14.0 -> 7.14.1 (released 2026-11-20, https://example.org)"],
        "new_entries": [{"name": "rocm-10.1", "rocm": "10.1.0", "released": "2026-10-05"}],
    }
    upstream = Upstream.from_findings(findings, entries(course))
    rep = report(course, [make_run(env="rocm-7.14"), make_run(env="rocm-10.0"), make_run()], upstream=upstream)
    assert cell(rep, "01-demo", "rocm-7.14").verdict == "outdated"
    assert "7.14.0 -> 7.14.1" in cell(rep, "01-demo", "rocm-7.14").detail
    assert "ROCm 10.1.0 released 2026-10-05" in cell(rep, "01-demo", "rocm-10.0").detail
    assert cell(rep, "01-demo", "cpu-current").verdict == "verified"


def test_previous_entries_and_environments_outside_the_matrix_appear_only_with_runs(course):
    rep = report(course, [make_run(env="cpu-previous"), make_run(env="local", status="failed")])
    assert [c.label for c in rep.columns][-2:] == ["cpu-previous (previous)", "local (not in matrix)"]
    assert "rocm-7.2 (previous)" not in [c.label for c in rep.columns]
    assert cell(rep, "01-demo", "cpu-previous").verdict == "verified"
    assert cell(rep, "01-demo", "local").verdict == "failed"
    assert row(rep, "01-demo").verdict == "stale"  # neither counts for freshness


def test_without_a_matrix_the_first_environment_is_judged_and_an_empty_table_is_well_formed(make_course):
    labs = discover(make_course())
    empty = build(labs, [], [], now=NOW)
    table = [line for line in to_markdown(empty).splitlines() if line.startswith("|")]
    assert table[0] == "| lab | version | last pass | last run | freshness |"
    assert table[1] == "|---|---|---|---|---|"
    assert table[2].count(" | ") == table[0].count(" | ")
    local = build(labs, [make_run(env="local")], [], now=NOW)
    assert row(local, "01-demo").verdict == "fresh" and "| ✅ passed 4s |" in to_markdown(local)


def test_every_view_shows_the_fingerprint_and_committed_views_drop_the_machine_specific(course):
    """The README table and ci/results/freshness.json (committed) keep the facts two machines that
    run an entry's pins share; the local report, its JSON and the dashboard show them all."""
    import dataclasses
    import json

    from rocmlab.report.render import to_json

    run = make_run(env="rocm-10.0", freeze=["torch==2.11.0+rocm10.0.0", "rocm-sdk-core==10.0.1"])
    run.fingerprint = dataclasses.replace(run.fingerprint, cpu_model="AMD EPYC 9654", kernel="6.8.0-45-generic")
    rep = report(course, [run])
    local, committed = to_markdown(rep), to_markdown(rep, committed=True)
    line = next(x for x in local.splitlines() if x.startswith("- rocm-10.0 ran on: "))
    assert "CPU AMD EPYC 9654" in line and "GPUs AMD Instinct MI300X (gfx942)" in line and "ROCm 10.0.1" in line
    shared = next(x for x in committed.splitlines() if x.startswith("- rocm-10.0 ran on: "))
    assert "ROCm 10.0.1" in shared and "Python 3.12.3" in shared
    assert not any(word in shared for word in ("EPYC", "MI300X", "6.8.0", "Generated"))
    data = json.loads(to_json(rep, committed=True))
    environment = data["labs"][0]["last_run"]["environment"]
    assert environment["ROCm"] == "10.0.1" and "CPU" not in environment and "GPUs" not in environment
    assert data["generated_at"] is None and "links" not in data["labs"][0]["last_run"]
    assert json.loads(to_json(rep))["labs"][0]["last_run"]["environment"]["CPU"] == "AMD EPYC 9654"
