"""The GitHub Actions workflows: linted offline, and wired to the matrix and the ci/ scripts."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rocmlab import releases

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
sys.path.insert(0, str(ROOT / "ci"))
import changed_labs  # noqa: E402 (after the sys.path setup)


def tool(name: str) -> str:
    found = Path(sys.executable).parent / name
    path = str(found) if found.exists() else shutil.which(name)
    if not path:
        pytest.skip(f"{name} is not installed (dev extra)")
    return path


def lint(*argv, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def load(name: str) -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the bare key `on` as true
    return data


def test_three_workflows_exist():
    assert [p.name for p in WORKFLOWS] == ["freshness.yml", "pr.yml", "release-check.yml"]


def test_actionlint_passes():
    result = lint(tool("actionlint"), "-no-color", *map(str, WORKFLOWS))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow  # check-jsonschema takes several seconds to start
def test_workflows_match_the_bundled_github_schema():
    result = lint(tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS))
    assert result.returncode == 0, result.stdout + result.stderr


BROKEN = """\
name: broken
on: push
jobs:
  a:
    runs-on: ubuntu-latest
    needs: missing-job
    steps:
      - run: echo ${{ matrix.nope }}
"""


def test_actionlint_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN, encoding="utf-8")
    result = lint(tool("actionlint"), "-no-color", str(broken))
    assert result.returncode != 0 and "missing-job" in result.stdout


@pytest.mark.slow
def test_the_schema_rejects_a_broken_workflow(tmp_path):
    no_jobs = tmp_path / "no-jobs.yml"
    no_jobs.write_text("name: x\non: push\njobs: 3\n", encoding="utf-8")
    result = lint(tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(no_jobs))
    assert result.returncode != 0


def test_pull_request_workflow_lints_tests_builds_and_smokes_changed_labs():
    pr = load("pr.yml")
    assert "pull_request" in pr["on"]
    assert set(pr["jobs"]) == {"lint", "test", "smoke"}
    steps = json.dumps(pr["jobs"])
    assert "rocmlab build --check" in steps and "pytest" in steps
    assert "ci/changed_labs.py" in steps and "--profile smoke" in steps


def test_freshness_jobs_come_from_the_matrix_and_use_the_gpu():
    fresh = load("freshness.yml")
    assert "schedule" in fresh["on"]
    gpu = fresh["jobs"]["gpu"]
    assert gpu["runs-on"] == "${{ matrix.runs_on }}"
    assert gpu["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.rocm) }}"
    assert "ci/freshness_job.sh" in json.dumps(gpu["steps"])
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in gpu["steps"])
    script = (ROOT / "ci" / "freshness_job.sh").read_text(encoding="utf-8")
    assert "--device /dev/kfd --device /dev/dri" in script and "--profile gpu" in script
    report = fresh["jobs"]["report"]  # behind the gate: tests/test_freshness_workflow.py
    assert report["needs"] == "gate" and "ci/freshness_report.sh" in json.dumps(report["steps"])
    assert "--stamp" in (ROOT / "ci" / "freshness_report.sh").read_text(encoding="utf-8")
    assert any(s.get("uses", "").startswith("peter-evans/create-pull-request") for s in report["steps"])


def test_release_check_runs_on_a_schedule_and_opens_an_issue():
    check = load("release-check.yml")
    assert "schedule" in check["on"] and check["permissions"]["issues"] == "write"
    assert "ci/release_check.sh" in json.dumps(check["jobs"])
    script = (ROOT / "ci" / "release_check.sh").read_text(encoding="utf-8")
    assert "gh issue create" in script
    for code in (releases.EXIT_UP_TO_DATE, releases.EXIT_UPDATES, releases.EXIT_OFFLINE):
        assert f"{code})" in script


def test_matrix_script_prints_the_job_matrix_of_the_release_matrix(tmp_path):
    output = tmp_path / "github_output"
    result = subprocess.run(
        [sys.executable, "ci/matrix_json.py", "--kind", "rocm", "--github-output", "rocm"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"GITHUB_OUTPUT": str(output), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    expected = releases.job_matrix(releases.load_matrix(ROOT / "env" / "matrix.toml"))
    assert json.loads(result.stdout) == expected and expected["include"]
    key, value = output.read_text().strip().split("=", 1)
    assert key == "rocm" and json.loads(value) == expected


def test_shell_scripts_parse():
    for script in (ROOT / "ci").glob("*.sh"):
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30, check=False)
        assert result.returncode == 0, f"{script}: {result.stderr}"


def test_changed_labs_keeps_existing_lab_folders_only(tmp_path):
    (tmp_path / "solutions" / "03-lora-finetune-zh").mkdir(parents=True)
    (tmp_path / "solutions" / "03-lora-finetune-zh" / "lab.toml").write_text("")
    paths = [
        "solutions/03-lora-finetune-zh/lab.py",
        "solutions/03-lora-finetune-zh/data/x.jsonl",
        "solutions/09-deleted-lab/lab.py",
        "src/rocmlab/cli.py",
        "README.md",
    ]
    assert changed_labs.labs_in(paths, tmp_path) == ["03-lora-finetune-zh"]
