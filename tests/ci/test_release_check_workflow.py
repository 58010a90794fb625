"""The weekly release check as a workflow: the bot's pull request gets its checks (pr.yml) and the
freshness runs of the entries that changed; yanked pins become issues. ci/release_check.sh runs
here against the replayed history (tests/fixtures/replay/) with a recording `gh` and a real git remote."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import route_failures  # ci/route_failures.py (ci/ is on pytest's pythonpath)
import yaml

ROOT = Path(__file__).resolve().parents[2]
REPLAY = ROOT / "tests" / "fixtures" / "replay"
DAYS = {
    "step1-rocm7.14": "2026-07-20",
    "step2-rocm10.0": "2026-09-01",
    "step3-rocm10.1": "2026-10-06",
    "step4-rocm10.2": "2026-11-20",
}


def load(name: str) -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the bare key `on` as true
    return data


def test_the_bot_pull_request_reaches_the_pr_checks_either_way():
    check = load("release-check.yml")["jobs"]["check"]
    app, checkout = check["steps"][0], check["steps"][1]
    # a GitHub App token when configured: its pushes and pull requests start pull_request workflows
    assert app["uses"].startswith("actions/create-github-app-token@") and "RELEASE_CHECK_APP_CLIENT_ID" in app["if"]
    assert checkout["with"]["token"] == "${{ steps.app.outputs.token || github.token }}"
    script = next(s for s in check["steps"] if s.get("run") == "bash ci/release_check.sh")
    assert script["env"]["GH_TOKEN"] == checkout["with"]["token"]
    assert "'native'" in script["env"]["PR_CHECKS"] and "'dispatch'" in script["env"]["PR_CHECKS"]
    assert check["permissions"]["actions"] == "write"  # gh workflow run
    # otherwise the script dispatches pr.yml on the branch: pr.yml must run on workflow_dispatch, every job
    pr = load("pr.yml")
    assert "workflow_dispatch" in pr["on"] and "pull_request" in pr["on"]
    assert not any("if" in job and "pull_request" in job["if"] for job in pr["jobs"].values())
    text = (ROOT / ".github" / "workflows" / "pr.yml").read_text(encoding="utf-8")
    assert "github.base_ref || 'main'" in text  # the smoke job's base without a pull_request event


def test_the_pins_job_routes_yanked_pins_to_issues():
    pins = load("release-check.yml")["jobs"]["pins"]
    assert pins["permissions"]["issues"] == "write"
    run = next(s["run"] for s in pins["steps"] if "verify-pins" in s.get("run", ""))
    assert "python ci/route_failures.py --pins pins.json" in run and 'exit "$status"' in run


def test_pin_routing_opens_updates_and_closes(monkeypatch):
    calls, listed = [], []

    def gh(*args, dry_run=False):
        calls.append(args)
        return json.dumps(listed) if args[:2] == ("issue", "list") else ""

    monkeypatch.setattr(route_failures, "gh", gh)
    yanked = {
        "entry": "cpu-current",
        "package": "peft",
        "version": "0.20.0",
        "reason": "r",
        "url": "https://pypi.org/project/peft/0.20.0/",
    }
    assert route_failures.route_pins({"yanked": [yanked], "partial": False}) == [
        "opened: peft==0.20.0 of cpu-current is yanked"
    ]
    assert ("issue", "create") == calls[-1][:2] and "pins: peft==0.20.0 of cpu-current is yanked" in calls[-1]
    listed.append({"number": 5, "body": route_failures.pin_body(yanked)})
    assert route_failures.route_pins({"yanked": [yanked]}) == ["updated #5: peft of cpu-current"]
    assert route_failures.route_pins({"yanked": [], "partial": True}) == []  # a partial check closes nothing
    # verify-pins (current entries) may close only what it checked: cpu-previous's issue stays (no flapping)
    listed.append({"number": 6, "body": route_failures.pin_body(yanked | {"entry": "cpu-previous"})})
    pins_job = {"yanked": [], "partial": False, "checked": ["cpu-current", "rocm-10.1"]}
    assert route_failures.route_pins(pins_job) == ["closed #5: peft of cpu-current"]
    assert not any(c[:3] == ("issue", "close", "6") for c in calls)
    assert route_failures.route_pins({"yanked": [], "partial": False}) == []  # a report that checked nothing


def course_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A course checkout at the 7.2-era matrix, as a git repository with an origin."""
    course = tmp_path / "course"
    for name in ("solutions", "env", "src", "ci"):
        shutil.copytree(ROOT / name, course / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", ".dockerignore"):
        shutil.copy(ROOT / name, course / name)
    shutil.copy(REPLAY / "matrix-7.2.toml", course / "env" / "matrix.toml")
    rocmlab = str(Path(sys.executable).parent / "rocmlab")
    subprocess.run([rocmlab, "env", "dockerfiles"], cwd=course, check=True, capture_output=True, timeout=120)
    remote = tmp_path / "remote.git"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    for argv in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-q", "-m", "7.2"],
        ["remote", "add", "origin", str(remote)],
    ):
        subprocess.run(git + argv, cwd=course, check=True, capture_output=True)
    return course, remote


def fake_gh(tmp_path: Path) -> tuple[Path, Path]:
    log, state = tmp_path / "gh.log", tmp_path / "gh-state"
    state.mkdir()
    gh = tmp_path / "bin" / "gh"
    gh.parent.mkdir()
    gh.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {log}\n'
        'case "$1 $2" in\n'
        f'  "issue list") if [[ "$*" == *--label* ]]; then echo "[]"; else cat {state}/issue 2>/dev/null; fi ;;\n'
        f'  "issue create") if [[ "$*" == *"Upstream releases"* ]]; then echo 7 > {state}/issue; fi ;;\n'
        f'  "pr list") cat {state}/pr 2>/dev/null ;;\n'
        f'  "pr create") echo 12 > {state}/pr ;;\n'
        "esac\n"
    )
    gh.chmod(0o755)
    return gh, log


def run_step(course: Path, gh: Path, step: str, **env) -> subprocess.CompletedProcess:
    variables = (
        os.environ
        | {
            "PATH": f"{gh.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}",
            "PYTHON": sys.executable,
            "ROCMLAB_FIXTURES": str(REPLAY / step),
            "ROCMLAB_TODAY": DAYS[step],
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        }
        | env
    )
    script = ["bash", str(course / "ci" / "release_check.sh")]
    return subprocess.run(script, cwd=course, env=variables, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow  # about 20 s: a course copy, three checks, the script
def test_release_check_dispatches_the_pr_checks_and_the_freshness_runs(tmp_path):
    """One weekly run (ROCm 10.2 and torch 2.15 are out, peft 0.20.0 yanked) from the 10.1-era matrix."""
    course, remote = course_repo(tmp_path)
    gh, log = fake_gh(tmp_path)
    rocmlab = str(Path(sys.executable).parent / "rocmlab")
    for step in ("step1-rocm7.14", "step2-rocm10.0", "step3-rocm10.1"):  # the history so far, merged
        subprocess.run(
            [rocmlab, "releases", "check", "--apply", "--fixtures", str(REPLAY / step), "--today", DAYS[step]],
            cwd=course,
            capture_output=True,
            timeout=120,
            check=False,
        )
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "10.1"], cwd=course, check=True
    )
    result = run_step(course, gh, "step4-rocm10.2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    calls = log.read_text().splitlines()
    create = calls.index(next(c for c in calls if c.startswith("pr create --head release-check/matrix")))
    assert calls[create + 2] == "workflow run pr.yml --ref release-check/matrix"  # after `pr list` finds #12
    assert "workflow run freshness.yml --ref release-check/matrix -f entries=rocm-10.2,cpu-current" in calls
    assert any(c.startswith("issue create --title pins: peft==0.20.0 of cpu-current is yanked") for c in calls)
    pushed = subprocess.run(
        ["git", "show", "release-check/matrix:env/matrix.toml"], cwd=remote, capture_output=True, text=True, check=True
    ).stdout
    assert pushed.startswith("# The release matrix") and 'name = "rocm-10.2"' in pushed and '"peft==0.21.2"' in pushed
    assert json.loads((course / "release-check.json").read_text())["changed_entries"] == ["rocm-10.2", "cpu-current"]


@pytest.mark.slow
def test_release_check_through_the_whole_history(tmp_path):
    """Every step through ci/release_check.sh, each merged before the next: with a GitHub App token
    (PR_CHECKS=native, no dispatch of pr.yml) and without a GPU runner (ROCm entries not run, said on the PR)."""
    course, remote = course_repo(tmp_path)
    gh, log = fake_gh(tmp_path)
    expected = {
        "step1-rocm7.14": "",
        "step2-rocm10.0": "cpu-current",
        "step3-rocm10.1": "",
        "step4-rocm10.2": "cpu-current",
    }
    for step, entries in expected.items():
        log.write_text("")
        result = run_step(course, gh, step, PR_CHECKS="native", ROCMLAB_GPU_RUNNERS="none")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        calls = log.read_text().splitlines()
        assert not any("workflow run pr.yml" in c for c in calls)
        runs = [c for c in calls if c.startswith("workflow run freshness.yml")]
        assert runs == (
            [f"workflow run freshness.yml --ref release-check/matrix -f entries={entries}"] if entries else []
        )
        assert any(c.startswith("pr comment 12 --body No GPU runner") for c in calls), calls
        subprocess.run(["git", "checkout", "-q", "release-check/matrix"], cwd=course, check=True)  # merged
    final = subprocess.run(
        ["git", "show", "release-check/matrix:env/matrix.toml"], cwd=remote, capture_output=True, text=True, check=True
    ).stdout
    assert 'name = "rocm-10.2"' in final and 'rocm = "7.14.1"' in final
