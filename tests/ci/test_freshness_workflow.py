"""The freshness workflow's report side: the gate, issue routing, the dead-man check and the keepalive.

`gh` is replaced by a fake on PATH that records every call (argv, and the text of --body-file)
and answers `gh issue list` from a file, so the routing is tested on what it would send GitHub.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import gate  # ci/gate.py (ci/ is on pytest's pythonpath)
import pytest
import route_failures  # ci/route_failures.py
import yaml
from freshness_helpers import executed_notebook, write_matrix, write_result

from rocmlab.cli import main

ROOT = Path(__file__).resolve().parents[2]

FAKE_GH = """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
call = {"argv": args}
if "--body-file" in args:
    call["body"] = open(args[args.index("--body-file") + 1], encoding="utf-8").read()
with open(os.environ["FAKE_GH_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps(call) + "\\n")
if args[:2] == ["issue", "list"]:
    print(open(os.environ["FAKE_GH_ISSUES"], encoding="utf-8").read())
"""


@pytest.fixture
def fake_gh(tmp_path, monkeypatch):
    """PATH gets a `gh` that logs its calls; returns (read the calls, set the open issues)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(FAKE_GH, encoding="utf-8")
    gh.chmod(0o755)
    log, issues = tmp_path / "gh-calls.jsonl", tmp_path / "gh-issues.json"
    issues.write_text("[]")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin")
    monkeypatch.setenv("FAKE_GH_LOG", str(log))
    monkeypatch.setenv("FAKE_GH_ISSUES", str(issues))

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []

    def open_issues(*found):
        issues.write_text(
            json.dumps(
                [{"number": n, "body": f"<!-- rocmlab-freshness lab={lab} entry={env} -->"} for n, lab, env in found]
            )
        )

    return calls, open_issues


def load_workflow() -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / "freshness.yml").read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))
    return data


# ---------------------------------------------------------------- the workflow's wiring


def test_the_report_runs_only_behind_the_gate():
    jobs = load_workflow()["jobs"]
    assert set(jobs["gate"]["needs"]) == {"matrix", "gpu", "gpu-multi", "cpu"}  # the canary never blocks
    assert jobs["gate"]["if"] == "${{ !cancelled() }}"
    assert "ci/gate.py --needs" in json.dumps(jobs["gate"]["steps"])
    assert jobs["gate"]["steps"][-1]["env"]["NEEDS"] == "${{ toJSON(needs) }}"
    report = jobs["report"]
    assert report["needs"] == ["gate", "canary-cpu", "canary-gpu"]  # the canary's records, not its result
    assert report["if"] == "${{ !cancelled() && needs.gate.result == 'success' }}"
    step = next(s for s in report["steps"] if "freshness_report.sh" in s.get("run", ""))
    assert step["env"]["ROUTE_ISSUES"] == "1" and step["env"]["SKIPPED_ENTRIES"] == "${{ needs.gate.outputs.skipped }}"
    assert report["permissions"]["issues"] == "write"
    pr = next(s for s in report["steps"] if s.get("uses", "").startswith("peter-evans/create-pull-request"))
    assert {"ci/history/", "ci/badges/", "README.md"} <= set(pr["with"]["add-paths"].split())
    # into the default branch, also for a run dispatched on release-check/matrix (issue 50)
    assert pr["with"]["base"] == "${{ github.event.repository.default_branch }}"


def test_dead_man_and_keepalive_jobs():
    jobs = load_workflow()["jobs"]
    dead_man = jobs["dead-man"]
    assert dead_man["if"] == "${{ always() }}" and "--max-gpu-age 14" in json.dumps(dead_man["steps"])
    keepalive = jobs["keepalive"]
    assert keepalive["if"] == "${{ github.event_name == 'schedule' }}"
    assert keepalive["steps"][-1]["env"]["GH_TOKEN"] == "${{ secrets.KEEPALIVE_TOKEN }}"
    assert keepalive["steps"][-1]["run"] == "bash ci/keepalive.sh"


def test_a_failing_lab_does_not_fail_the_cpu_job():
    run = next(s["run"] for s in load_workflow()["jobs"]["cpu"]["steps"] if "rocmlab run" in s.get("run", ""))
    assert "0|1|3) exit 0" in run


# ---------------------------------------------------------------- the gate


def needs(matrix="success", gpu="success", cpu="success", gpu_multi="skipped"):
    include = {"include": [{"name": "rocm-10.0", "runs_on": ["self-hosted"]}, {"name": "rocm-7.14"}]}
    return {
        "matrix": {
            "result": matrix,
            "outputs": {"rocm": json.dumps(include), "cpu": '{"include":[{"name":"cpu-current"}]}'},
        },
        "gpu": {"result": gpu, "outputs": {}},
        "cpu": {"result": cpu, "outputs": {}},
        "gpu-multi": {"result": gpu_multi, "outputs": {}},
    }


@pytest.mark.parametrize(
    "jobs, stamp, skipped",
    [
        ({}, True, []),
        ({"gpu": "skipped"}, True, ["rocm-10.0", "rocm-7.14"]),
        ({"gpu": "failure"}, False, []),
        ({"gpu": "cancelled"}, False, []),
        ({"cpu": "failure", "gpu": "skipped"}, False, ["rocm-10.0", "rocm-7.14"]),
        ({"matrix": "failure", "gpu": "skipped", "cpu": "skipped"}, False, []),
        ({"gpu": "skipped", "gpu_multi": "success"}, True, ["rocm-10.0", "rocm-7.14"]),
        ({"gpu_multi": "failure"}, False, []),
    ],
)
def test_the_gate_lets_the_report_stamp_only_after_honest_jobs(jobs, stamp, skipped):
    decision = gate.decide(needs(**jobs))
    assert decision.stamp is stamp and decision.skipped == skipped


def test_the_gate_writes_its_outputs_and_fails_loudly(tmp_path, monkeypatch, capsys):
    output = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    assert gate.main(["--needs", json.dumps(needs(gpu="skipped")), "--github-output"]) == 0
    assert output.read_text() == "stamp=true\nskipped=rocm-10.0 rocm-7.14\n"
    assert gate.main(["--needs", json.dumps(needs(gpu="failure")), "--github-output"]) == 1
    assert "::error title=Freshness report not stamped::" in capsys.readouterr().out
    assert output.read_text().endswith("stamp=false\nskipped=\n")


# ---------------------------------------------------------------- issue routing


@pytest.fixture
def routed_course(make_course, tmp_path, monkeypatch):
    """A course whose report has 01-demo failing on cpu-current (after a numpy bump), 02-other passing
    again on cpu-current, 01-demo verified on rocm-7.14, and a failure outside the matrix."""
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "amd/rocmlab")
    root = make_course({"01-demo": (None, None), "02-other": (None, None)})
    write_matrix(root)
    earlier, results = tmp_path / "earlier", root / "results"
    write_result(earlier, lab="01-demo", env="cpu-current", days_ago=3)
    write_result(earlier, lab="02-other", env="cpu-current", status="failed", days_ago=3)
    monkeypatch.setenv("GITHUB_RUN_ID", "100")
    assert (
        main(["--root", str(root), "report", "--results", str(earlier), "--stamp", "--output", str(tmp_path / "x.md")])
        == 0
    )
    bumped = ["torch==2.13.0+cpu", "transformers==5.24.0", "peft==0.21.2", "numpy==2.5.0"]
    failing_cell = {"index": 3, "ename": "RuntimeError", "evalue": "HIP error", "source": "train(model)"}
    write_result(
        results,
        lab="01-demo",
        env="cpu-current",
        status="failed",
        days_ago=0.1,
        freeze=bumped,
        failing_cell=failing_cell,
    )
    error = {
        "ename": "RuntimeError",
        "evalue": "HIP error",
        "traceback": ["Traceback (most recent call last)", "RuntimeError: HIP error"],
    }
    executed_notebook(results / "cpu-current" / "01-demo.ipynb", [0.5, 2.0], error=error)
    write_result(results, lab="02-other", env="cpu-current", days_ago=0.1)
    write_result(results, lab="01-demo", env="rocm-7.14", days_ago=0.1)
    write_result(results, lab="02-other", env="local", status="failed", days_ago=0.1)
    monkeypatch.setenv("GITHUB_RUN_ID", "101")
    report_json = tmp_path / "freshness.json"
    argv = ["--root", str(root), "report", "--results", str(results), "--format", "json", "--output", str(report_json)]
    assert main(argv) == 0
    return report_json


def test_routing_opens_updates_and_closes_one_issue_per_pair(routed_course, fake_gh, capsys):
    calls, open_issues = fake_gh
    open_issues((9, "02-other", "cpu-current"), (11, "01-demo", "rocm-10.0"))
    assert route_failures.main([str(routed_course)]) == 0
    made = calls()
    assert made[0]["argv"][:3] == ["label", "create", "freshness"]
    assert made[1]["argv"][:2] == ["issue", "list"]
    create = next(c for c in made if c["argv"][:2] == ["issue", "create"])
    assert create["argv"][create["argv"].index("--title") + 1] == "freshness: 01-demo fails on cpu-current"
    body = create["body"]
    assert "<!-- rocmlab-freshness lab=01-demo entry=cpu-current -->" in body
    assert "- failing cell: cell 3: `RuntimeError: HIP error`" in body
    assert "- numpy 2.4.6 → 2.5.0" in body  # package versions changed since the last pass
    assert "Traceback (most recent call last)\nRuntimeError: HIP error" in body
    assert (
        "- executed notebook: https://github.com/amd/rocmlab/actions/runs/101#artifacts (artifact `results-cpu-current`"
        in body
    )
    assert "- log: https://github.com/amd/rocmlab/actions/runs/101" in body and "train(model)" in body
    close = next(c for c in made if c["argv"][:2] == ["issue", "close"])
    assert close["argv"][2] == "9" and "Passes again on cpu-current" in close["argv"][-1]
    assert not any("11" in c["argv"] for c in made)  # never run: left open as it is
    assert not any("local" in json.dumps(c) for c in made)  # outside the matrix: not routed
    assert len(made) == 4


def test_a_pair_that_keeps_failing_updates_its_issue(routed_course, fake_gh):
    calls, open_issues = fake_gh
    open_issues((7, "01-demo", "cpu-current"))
    assert route_failures.main([str(routed_course)]) == 0
    made = {tuple(c["argv"][:3]): c for c in calls()}
    assert "numpy 2.4.6 → 2.5.0" in made[("issue", "edit", "7")]["body"]
    comment = made[("issue", "comment", "7")]["argv"]
    assert comment[-1].startswith("Still failing in the run of") and comment[-1].endswith("/actions/runs/101)")
    assert not any(c["argv"][:2] == ["issue", "create"] for c in calls())


def test_a_gh_failure_is_reported(routed_course, fake_gh, tmp_path, capsys):
    (tmp_path / "bin" / "gh").write_text("#!/bin/sh\necho 'HTTP 403: Resource not accessible' >&2\nexit 1\n")
    assert route_failures.main([str(routed_course)]) == 1
    assert "HTTP 403" in capsys.readouterr().err


# ---------------------------------------------------------------- keepalive


def keepalive(tmp_path, days_old, token="secret"):
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    date = f"@{1_800_000_000 - days_old * 86400} +0000"
    git_env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    for argv in (
        ["init", "-q"],
        ["-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "--allow-empty", "-m", "x"],
    ):
        subprocess.run(["git", *argv], cwd=repo, env=git_env, check=True, capture_output=True, timeout=30)
    env = {**os.environ, "KEEPALIVE_NOW": "1800000000", "GITHUB_REPOSITORY": "amd/rocmlab", "GH_TOKEN": token}
    return subprocess.run(
        ["bash", str(ROOT / "ci" / "keepalive.sh")], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )


def test_keepalive_reenables_the_scheduled_workflows_before_day_60(tmp_path, fake_gh):
    calls, _ = fake_gh
    done = keepalive(tmp_path, days_old=10)
    assert done.returncode == 0 and "nothing to do" in done.stdout and calls() == []
    done = keepalive(tmp_path / "old", days_old=55)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c["argv"] for c in calls()] == [
        ["api", "--method", "PUT", "repos/amd/rocmlab/actions/workflows/freshness.yml/enable"],
        ["api", "--method", "PUT", "repos/amd/rocmlab/actions/workflows/release-check.yml/enable"],
    ]


def test_keepalive_without_a_token_fails_loudly_when_it_matters(tmp_path, fake_gh):
    done = keepalive(tmp_path, days_old=55, token="")
    assert done.returncode == 1 and "::error title=Keepalive has no token::" in done.stdout


# ---------------------------------------------------------------- the whole report job


@pytest.mark.slow  # five rocmlab processes
def test_the_report_job_stamps_writes_its_outputs_and_routes(routed_course, fake_gh, tmp_path):
    calls, _ = fake_gh
    root = routed_course.parent / "course"
    wrapper = tmp_path / "bin" / "rocmlab"
    wrapper.write_text(
        "#!/bin/sh\n"
        # the recorded upstream for the commands that read it (not `releases exit-codes`)
        f'case "$1 $2" in "releases check"|"releases verify-pins") '
        f'set -- "$@" --fixtures "{ROOT}/tests/fixtures/upstream";; esac\n'
        f'exec "{sys.executable}" -m rocmlab.cli --root "{root}" "$@"\n'
    )
    wrapper.chmod(0o755)
    summary = tmp_path / "step-summary.md"
    env = {
        **os.environ,
        "SKIPPED_ENTRIES": "rocm-10.0",
        "ROUTE_ISSUES": "1",
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    done = subprocess.run(
        ["bash", str(ROOT / "ci" / "freshness_report.sh"), "results", "out"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = root / "out"
    assert {p.name for p in out.iterdir()} == {
        "upstream.json",
        "freshness.md",
        "freshness.json",
        "dashboard.html",
        "diff.md",
    }
    skipped = [json.loads(line) for line in (root / "ci" / "history" / "rocm-10.0.jsonl").read_text().splitlines()]
    assert {(line["lab"], line["status"]) for line in skipped} == {("01-demo", "skipped"), ("02-other", "skipped")}
    assert "## rocmlab freshness" in summary.read_text()
    assert "numpy 2.4.6 → 2.5.0" in (out / "diff.md").read_text()
    assert any(c["argv"][:2] == ["issue", "create"] for c in calls())
