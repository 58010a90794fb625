"""The GitHub Actions workflows: linted offline (actionlint with shellcheck on run: blocks,
the GitHub workflow schema, shellcheck on ci/*.sh), wired to the matrix and the ci/ scripts;
the freshness job's docker commands, and the job and the release check run end to end here."""

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import changed_labs  # ci/changed_labs.py (ci/ is on pytest's pythonpath)
import pytest
import yaml
from freshness_helpers import RECORDED_MATRIX

from rocmlab.freshness import containers, jobs, releases

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


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


def test_the_workflows_exist():
    names = [p.name for p in WORKFLOWS]
    assert names == ["freshness.yml", "pages.yml", "pr.yml", "references.yml", "release-check.yml"]


def test_the_references_workflow_grades_every_lab_on_each_other_backend():
    """One job per backend but the default (which .ci/run grades for every lab), and each job's
    -k selection, read by pytest's own expression parser, picks exactly that backend's gradings."""
    from _pytest.mark.expression import Expression
    from conftest import GRADING_WAYS

    from rocmlab.course.catalog import discover

    workflow = load("references.yml")
    assert workflow["env"]["ROCMLAB_EVERY_REFERENCE"] == "1"
    jobs = workflow["jobs"]["grade"]["strategy"]["matrix"]["include"]
    other_ways = GRADING_WAYS[1:]  # [0] is the default backend
    assert sorted(job["way"] for job in jobs) == sorted(other_ways)
    test = "test_the_reference_scores_full_marks_and_the_student_version_its_blank_score"
    labs = [lab.id for lab in discover(ROOT)]
    names = {way: [f"{test}[{way}-{lab}]" for lab in labs] for way in other_ways}
    every = [name for way in other_ways for name in names[way]]
    for job in jobs:
        selection = Expression.compile(job["select"])
        picked = [name for name in every if selection.evaluate(lambda word, name=name: word.lower() in name.lower())]
        assert picked == names[job["way"]], job


def test_pages_workflow_builds_the_site_and_publishes_it_and_the_student_branch():
    import tomllib

    workflow = load("pages.yml")
    build, branch, deploy = workflow["jobs"]["build"], workflow["jobs"]["student-labs"], workflow["jobs"]["deploy"]
    runs = "\n".join(step.get("run", "") for step in build["steps"])
    assert '".[site]"' in runs and "rocmlab build --check" in runs and "rocmlab site --out _site" in runs
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_site"
    assert deploy["needs"] == "build" and deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in deploy["steps"])
    split = "\n".join(step.get("run", "") for step in branch["steps"])
    assert "git subtree split --prefix labs" in split and "env/site.toml" in split
    site = tomllib.loads((ROOT / "env" / "site.toml").read_text())
    assert site["labs_branch"] != "main"  # the launch links never pull the branch holding solutions/


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


# A linter run as a command: at the start of a line or after &&, ||, ;, |, $( or a backtick.
LINTER_COMMAND = re.compile(
    r"(?m)(?:^|&&|\|\||;|\||\$\(|`)\s*(?:[\w./-]*/)?(?:python3?\s+-m\s+)?"
    r"(?:ruff|lint-imports|flake8|pylint|black|isort)\b"
)


@pytest.mark.parametrize(
    "text",
    ["ruff check --select E9,F63 src", "  python -m ruff check .", "make x && .venv/bin/lint-imports", "a; black ."],
)
def test_a_linter_of_its_own_is_seen(text):
    assert LINTER_COMMAND.search(text)


def test_lint_has_one_definition_make_lint_and_the_pull_request_runs_it():
    """No workflow or CI script runs a linter of its own (a subset of ruff, no format, no layers):
    they lint through `make lint`, and the pull request's lint job does."""
    runs = [
        (f"{path.name}: {step.get('name') or step['run'][:40]}", step["run"])
        for path in WORKFLOWS
        for job in load(path.name)["jobs"].values()
        for step in job.get("steps", [])
        if "run" in step
    ]
    scripts = [(path.name, path.read_text()) for path in [*sorted((ROOT / "ci").glob("*.*")), ROOT / ".ci" / "run"]]
    assert [where for where, text in runs + scripts if LINTER_COMMAND.search(text)] == []
    assert "make lint" in [step.get("run") for step in load("pr.yml")["jobs"]["lint"]["steps"]]
    assert re.search(r'^step lint "[^"]*" make lint$', (ROOT / ".ci" / "run").read_text(), re.M)


def test_freshness_jobs_come_from_the_matrix_and_use_the_gpu():
    fresh = load("freshness.yml")
    crons = [c["cron"] for c in fresh["on"]["schedule"]]
    assert len(crons) == 2 and fresh["env"]["MONTHLY_CRON"] in crons  # weekly, and monthly multi-gpu
    assert "entries" in fresh["on"]["workflow_dispatch"]["inputs"]
    assert "toJSON(vars)" in json.dumps(fresh["jobs"]["matrix"])  # runner labels from repository variables
    for name, profile in (("gpu", "gpu"), ("gpu-multi", "multi-gpu"), ("canary-gpu", "gpu")):
        job = fresh["jobs"][name]
        assert job["runs-on"] == "${{ matrix.runs_on }}"
        runs = "\n".join(step.get("run", "") for step in job["steps"])
        assert f'ci/freshness_gpu_step.sh "$ENTRY" {profile} "$GFX"' in runs
        assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in job["steps"])
    assert "monthly == 'true'" in fresh["jobs"]["gpu-multi"]["if"] and "monthly != 'true'" in fresh["jobs"]["gpu"]["if"]
    for name in ("canary-cpu", "canary-gpu"):
        assert fresh["jobs"][name]["continue-on-error"] is True  # never blocking
    assert "error::FutureWarning" in json.dumps(fresh["jobs"]["canary-cpu"])
    gate = fresh["jobs"]["gate"]  # the gate and the report behind it: tests/ci/test_freshness_workflow.py
    assert {"gpu", "gpu-multi", "cpu"} <= set(gate["needs"]) and not {"canary-cpu", "canary-gpu"} & set(gate["needs"])
    report = fresh["jobs"]["report"]
    assert {"gate", "canary-cpu", "canary-gpu"} <= set(report["needs"]) and "needs.gate.result" in report["if"]
    assert "ci/freshness_report.sh" in json.dumps(report["steps"])
    assert "--stamp" in (ROOT / "ci" / "freshness_report.sh").read_text(encoding="utf-8")
    step = (ROOT / "ci" / "freshness_gpu_step.sh").read_text(encoding="utf-8")
    assert "ci/freshness_job.sh" in step and "login ghcr.io" in step and "${REPOSITORY,,}" in step


def test_pr_workflow_installs_the_torch_of_the_matrix(capsys, monkeypatch):
    import matrix_json  # ci/matrix_json.py; run as a script in the test below

    text = (ROOT / ".github" / "workflows" / "pr.yml").read_text(encoding="utf-8")
    assert "torch==" not in text  # written once, in env/matrix.toml
    assert text.count("--pin cpu-current:torch") == 2 and text.count('"$TORCH_PIN"') == 2
    monkeypatch.chdir(ROOT)
    assert matrix_json.main(["--pin", "cpu-current:torch"]) == 0
    pin = releases.read_matrix(ROOT / "env" / "matrix.toml").get("cpu-current").pin("torch")
    assert capsys.readouterr().out.strip() == f"torch=={pin}"


def test_release_check_runs_weekly_and_opens_a_pull_request():
    check = load("release-check.yml")
    (cron,) = check["on"]["schedule"]
    assert cron["cron"].split()[2:] == ["*", "*", "1"]  # weekly
    permissions = check["jobs"]["check"]["permissions"]
    assert {permissions[k] for k in ("contents", "pull-requests", "issues", "actions")} == {"write"}
    assert "ci/release_check.sh" in json.dumps(check["jobs"]["check"])
    assert "rocmlab releases verify-pins --out pins.json" in json.dumps(check["jobs"]["pins"])
    script = (ROOT / "ci" / "release_check.sh").read_text(encoding="utf-8")
    assert "gh pr create" in script and "gh issue close" in script and "gh workflow run freshness.yml" in script
    # the exit codes come from the one table (`rocmlab releases exit-codes`), never written as numbers
    assert 'eval "$codes"' in script and '"$rocmlab" releases exit-codes' in script
    for name, _code, _meaning in releases.EXIT_CODES:
        if name != "EXIT_PINS_BROKEN":  # verify-pins' code: the pins job reads it
            assert f'"${name}"' in script, name
    assert not any(f"{code})" in script for _n, code, _m in releases.EXIT_CODES)


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


def shellcheck() -> str:
    path = shutil.which("shellcheck")
    if not path:
        pytest.skip("shellcheck is not installed (Debian package shellcheck: make system-deps)")
    return path


@pytest.mark.slow  # needs the Debian package, which make system-deps installs
def test_shellcheck_passes_on_the_ci_scripts():
    scripts = sorted(str(p) for p in (ROOT / "ci").glob("*.sh"))
    result = lint(shellcheck(), "--severity=style", *scripts)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_actionlint_runs_shellcheck_on_run_blocks(tmp_path):
    workflow = tmp_path / "unquoted.yml"
    workflow.write_text(
        "name: x\non: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: rm $FILES\n",
        encoding="utf-8",
    )
    result = lint(tool("actionlint"), "-no-color", f"-shellcheck={shellcheck()}", str(workflow))
    assert result.returncode != 0 and "SC2086" in result.stdout
    clean = lint(tool("actionlint"), "-no-color", f"-shellcheck={shellcheck()}", *map(str, WORKFLOWS))
    assert clean.returncode == 0, clean.stdout + clean.stderr


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


# ---------------------------------------------------------------- the freshness job's docker commands


def matrix_entry(name: str):
    return releases.read_matrix(ROOT / "env" / "matrix.toml").get(name)


def test_the_generated_docker_run_command(tmp_path):
    env_file = tmp_path / "isolation"
    env_file.write_text("HIP_VISIBLE_DEVICES=3\n")
    spec = containers.RunSpec(
        repo=Path("/w/repo"),
        cache=Path("/w/cache"),
        user="1001:1001",
        groups=("44", "992"),
        env_file=env_file,
        env={"HF_HUB_OFFLINE": "1"},
    )
    argv = containers.run_command(
        matrix_entry("rocm-10.1"), "ghcr.io/o/r/rocmlab@sha256:ab", "c1", spec, ["rocmlab", "run"]
    )
    line = containers.shell(argv)
    assert line.startswith("docker run --rm --name c1 --user 1001:1001 --device /dev/kfd --device /dev/dri")
    assert "--group-add 44 --group-add 992" in line and f"--env-file {env_file}" in line
    assert "-v /w/repo:/rocmlab -v /w/cache:/rocmlab-cache -w /rocmlab" in line
    assert "-e ROCMLAB_ENV=rocm-10.1 -e ROCMLAB_CACHE=/rocmlab-cache -e HF_HOME=/rocmlab-cache/huggingface" in line
    assert line.endswith("-e HF_HUB_OFFLINE=1 ghcr.io/o/r/rocmlab@sha256:ab rocmlab run")
    assert "--privileged" not in line and "--user 0" not in line
    cpu = containers.run_command(
        matrix_entry("cpu-current"),
        "img",
        "c2",
        containers.RunSpec(repo=Path("/r"), cache=Path("/c"), user="1:1", gpu=False),
        ["x"],
    )
    assert "--device" not in cpu and "--group-add" not in cpu


def test_device_groups_are_the_host_gids_and_the_isolation_file_is_optional(tmp_path):
    gids = {"video": 44, "render": 992}

    def lookup(name):
        if name not in gids:
            raise KeyError(name)
        return types.SimpleNamespace(gr_gid=gids[name])

    assert containers.device_groups(lookup) == ("44", "992")
    del gids["render"]
    assert containers.device_groups(lookup) == ("44",)
    assert containers.isolation_env_file(tmp_path / "absent") is None
    (tmp_path / "present").write_text("")
    assert containers.isolation_env_file(tmp_path / "present") == tmp_path / "present"


def test_build_command_per_gfx_target_with_a_registry_cache():
    argv = containers.build_command(matrix_entry("rocm-10.1"), "gfx90a", "rocmlab/rocm-10.1:gfx90a", "ghcr.io/o/r:c")
    line = containers.shell(argv)
    assert "-f env/docker/rocm-10.1.Dockerfile" in line and "--build-arg GFX=gfx90a" in line
    assert "--cache-from ghcr.io/o/r:c --build-arg BUILDKIT_INLINE_CACHE=1" in line and line.endswith(" .")
    image = containers.build_command(matrix_entry("rocm-7.2"), "gfx942", "t")
    assert "GFX=" not in " ".join(image)  # an image entry carries every target already


def test_models_of_a_profile_are_what_its_labs_load():
    assert jobs.models_for(ROOT, "smoke") == ["tiny-qwen-zh"]
    gpu = jobs.models_for(ROOT, "gpu")
    assert gpu[0] == "tiny-qwen-zh" and "Qwen/Qwen2.5-0.5B-Instruct" in gpu  # lab 10's one-GPU profile: tiny
    assert jobs.models_for(ROOT, "gpu", ("01-rocm-setup",)) == []


@pytest.mark.parametrize(
    "name,profile,gfx,message",
    [
        ("rocm-10.1", "gpu", "gfx803", "carries kernels for"),
        ("canary-pytorch-nightly", "smoke", None, "CPU canary"),
        ("cpu-current", "smoke", "gfx942", "CPU entry"),
        ("rocm-10.1", "fast", None, "--profile"),
    ],
)
def test_job_plan_rejects_what_cannot_run(name, profile, gfx, message):
    with pytest.raises(jobs.JobError, match=message):
        jobs.plan(ROOT, name, profile, gfx, cache=Path("/c"), results=Path("/r"))


def test_gpu_job_needs_a_rocm_host(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "DEVICES", (tmp_path / "kfd",))
    job = jobs.plan(ROOT, "rocm-10.1", "gpu", None, cache=tmp_path / "c", results=tmp_path / "r")
    with pytest.raises(jobs.JobFailed, match="not a ROCm host"):
        jobs.run_job(job, log=lambda *_: None)


def test_gpu_job_steps_in_order(tmp_path, monkeypatch):
    """A recording docker: build from the cache, push, run by digest; fetch online, the rest offline."""
    calls = tmp_path / "calls.jsonl"
    fake = tmp_path / "docker"
    fake.write_text(
        "#!/usr/bin/env -S python3 -IS\nimport json, os, sys\n"  # -IS: each of the job's calls starts without scanning site-packages
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if sys.argv[1:3] == ['image', 'inspect']: print(json.dumps(['ghcr.io/o/r/rocmlab@sha256:' + 'f' * 64]))\n"
        "if sys.argv[1] == 'pull': sys.exit(1)\n"
        "if sys.argv[-2:] == ['doctor', '--json']: print('{\"checks\": []}')\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("ROCMLAB_DOCKER", str(fake))
    monkeypatch.setattr(jobs, "DEVICES", (tmp_path,))
    job = jobs.plan(
        ROOT,
        "rocm-10.1",
        "gpu",
        "gfx90a",
        cache=tmp_path / "cache",
        results=tmp_path / "results",
        image_repo="ghcr.io/o/r/rocmlab",
        run_id="t1",
    )
    monkeypatch.setattr(jobs, "_inside", lambda job, path: "results/" + Path(path).name)
    assert jobs.run_job(job, log=lambda *_: None) == 0
    steps = [json.loads(line) for line in calls.read_text().splitlines()]
    kinds = [s[0] if s[0] != "run" else "run:" + s[s.index("--name") + 1].split("-")[-2] for s in steps]
    assert kinds[:5] == ["pull", "build", "tag", "push", "image"]
    models = jobs.models_for(ROOT, "gpu")
    fetches = ["run:fetch"] * len(models)
    assert kinds[5:] == [*fetches, "run:doctor", "run:check", "run:labs", *["rm"] * (len(fetches) + 3)]
    *fetch_steps, doctor, check, labs = (s for s in steps if s[0] == "run")
    assert "--build-arg" in steps[1] and "GFX=gfx90a" in steps[1] and "ghcr.io/o/r/rocmlab:rocm-10.1-gfx90a" in steps[1]
    for fetch, model in zip(fetch_steps, models):
        assert "HF_HUB_OFFLINE=1" not in fetch and fetch[-3:] == ["assets", "fetch", model]
    for step in (doctor, check, labs):
        assert "HF_HUB_OFFLINE=1" in step and "ghcr.io/o/r/rocmlab@sha256:" + "f" * 64 in step
        assert step[step.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    assert check[-2:] == ["--gfx", "gfx90a"] and labs[-6:-2] == ["--profile", "gpu", "--env", "rocm-10.1"]
    assert json.loads((tmp_path / "results" / "rocm-10.1" / "doctor.json").read_text()) == {"checks": []}


def fake_torch(version, hip=None, arch=None):
    props = types.SimpleNamespace(gcnArchName=arch)
    cuda = types.SimpleNamespace(
        is_available=lambda: arch is not None,
        device_count=lambda: 1 if arch else 0,
        get_device_properties=lambda i: props,
    )
    return types.SimpleNamespace(__version__=version, version=types.SimpleNamespace(hip=hip, cuda=None), cuda=cuda)


@pytest.mark.parametrize(
    "torch,gfx,problem",
    [
        (fake_torch("2.14.0+rocm10.1.0", "7.16.26332", "gfx942:sramecc+:xnack-"), None, None),
        (fake_torch("2.14.0+rocm10.1.0", "7.16.26332", "gfx90a:sramecc+:xnack-"), None, "GPU arch gfx90a"),
        (fake_torch("2.14.0+rocm10.1.0", "7.16.26332", "gfx90a"), "gfx90a", None),
        (fake_torch("2.13.0+rocm10.1.0", "7.16.26332", "gfx942"), None, "torch 2.13.0+rocm10.1.0"),
        (fake_torch("2.14.0+rocm10.0.0", "7.15.0", "gfx942"), None, "torch build +rocm10.0.0"),
        (fake_torch("2.14.0", None, None), None, "not a ROCm build"),
    ],
)
def test_entry_check_compares_torch_hip_and_gfx(monkeypatch, torch, gfx, problem):
    monkeypatch.setitem(sys.modules, "torch", torch)
    report = jobs.check_entry(matrix_entry("rocm-10.1"), gfx)
    if problem is None:
        assert report["problems"] == [], report
    else:
        assert any(problem in p for p in report["problems"]), report


def test_entry_check_of_a_cpu_entry_checks_every_pin(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch("2.14.1+cpu"))
    monkeypatch.setattr(jobs, "_version_of", lambda p: {"transformers": "5.23.0"}.get(p, "0"))
    problems = jobs.check_entry(releases.read_matrix(RECORDED_MATRIX).get("cpu-current"))["problems"]
    assert "transformers 5.23.0, the entry says ==5.25.0" in problems and not any(
        p.startswith("torch") for p in problems
    )


# ---------------------------------------------------------------- end to end on this machine


def course_copy(tmp_path: Path) -> Path:
    """A copy of the course (solutions, env, package metadata) as a git repository."""
    course = tmp_path / "course"
    for name in ("solutions", "env", "src", "ci", "tests/fixtures/upstream"):
        shutil.copytree(ROOT / name, course / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", ".dockerignore"):
        shutil.copy(ROOT / name, course / name)
    return course


@pytest.mark.slow
def test_freshness_job_script_end_to_end_on_the_cpu_stand_in(tmp_path):
    """ci/freshness_job.sh --profile smoke: the same job, docker stood in by ci/standin/docker."""
    course = course_copy(tmp_path)
    pins = [
        f"{p}=={importlib.metadata.version(p)}" for p in ("torch", "transformers", "peft", "accelerate", "tokenizers")
    ]
    entry = '\n[[cpu]]\nname = "cpu-standin"\npython = "3.11"\nstatus = "previous"\n'
    entry += f"pins = {json.dumps(pins)}\n"
    entry += 'sources = [{ url = "https://pypi.org/", seen = 2026-12-01, facts = ["pins"], fact = "this machine" }]\n'
    matrix = course / "env" / "matrix.toml"
    matrix.write_text(matrix.read_text() + entry)
    rocmlab = str(Path(sys.executable).parent / "rocmlab")
    subprocess.run([rocmlab, "env", "dockerfiles"], cwd=course, check=True, capture_output=True, timeout=120)
    log = tmp_path / "standin.jsonl"
    from rocmlab.assets.cache import cache_root

    env = os.environ | {
        "ROCMLAB": rocmlab,
        "ROCMLAB_DOCKER": str(course / "ci" / "standin" / "docker"),
        "STANDIN_PYTHON": sys.executable,
        "STANDIN_LOG": str(log),
        "STANDIN_STATE": str(tmp_path / "state"),
        "ROCMLAB_CI_CACHE": str(cache_root()),
    }
    script = [
        str(course / "ci" / "freshness_job.sh"),
        "cpu-standin",
        "--profile",
        "smoke",
        "--labs",
        "02-llm-inference",
    ]
    result = subprocess.run(script, cwd=course, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = course / "results" / "cpu-standin"
    record = json.loads((out / "02-llm-inference.json").read_text())
    assert record["status"] == "passed" and record["env"] == "cpu-standin"
    assert json.loads((out / "entry.json").read_text())["problems"] == []
    assert isinstance(json.loads((out / "doctor.json").read_text()), dict)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["command"] for c in calls][:2] == ["build", "run"]
    runs = [c for c in calls if c["command"] == "run"]
    assert [r["argv"][1:3] for r in runs] == [
        ["assets", "fetch"],
        ["doctor", "--json"],
        ["env", "check-entry"],
        ["run", "02-llm-inference"],
    ]
    assert all(("-e", "HF_HUB_OFFLINE=1") in map(tuple, r["options"]) for r in runs[1:])
    assert all(("--network", "none") in map(tuple, r["options"]) for r in runs[1:])
    assert ("-e", "HF_HUB_OFFLINE=1") not in map(tuple, runs[0]["options"])
    assert ("--network", "none") not in map(tuple, runs[0]["options"])  # only the pre-fetch has the network
    assert all(p.stat().st_uid == os.getuid() for p in out.rglob("*"))

    # the same job stops before any lab when the container is not what the entry says
    matrix.write_text(matrix.read_text().replace(pins[1], "transformers==4.0.0"))
    subprocess.run([rocmlab, "env", "dockerfiles"], cwd=course, check=True, capture_output=True, timeout=120)
    shutil.rmtree(course / "results")
    result = subprocess.run(script, cwd=course, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 1 and "transformers" in result.stderr
    assert not (course / "results" / "cpu-standin" / "02-llm-inference.json").exists()


@pytest.mark.slow
def test_release_check_script_end_to_end(tmp_path):
    """ci/release_check.sh on recorded responses: one PR branch with the matrix edit and the
    Dockerfiles, a freshness run of only the new entry, the issue opened; then closed when caught up."""
    course = course_copy(tmp_path)
    shutil.copy(ROOT / "tests" / "fixtures" / "upstream" / "matrix-before.toml", course / "env" / "matrix.toml")
    rocmlab = str(Path(sys.executable).parent / "rocmlab")
    subprocess.run([rocmlab, "env", "dockerfiles"], cwd=course, check=True, capture_output=True, timeout=120)
    remote = tmp_path / "remote.git"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    for argv in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-q", "-m", "before"],
        ["remote", "add", "origin", str(remote)],
    ):
        subprocess.run(git + argv, cwd=course, check=True, capture_output=True)
    gh_log, state = tmp_path / "gh.log", tmp_path / "gh-state"
    state.mkdir()
    fake_gh = tmp_path / "bin" / "gh"
    fake_gh.parent.mkdir()
    fake_gh.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {gh_log}\n'
        'case "$1 $2" in\n'
        f'  "issue list") cat {state}/issue 2>/dev/null ;;\n'
        f'  "issue create") echo 7 > {state}/issue ;;\n'
        f'  "issue close") rm -f {state}/issue ;;\n'
        f'  "pr list") cat {state}/pr 2>/dev/null ;;\n'
        f'  "pr create") echo 12 > {state}/pr ;;\n'
        "esac\n"
    )
    fake_gh.chmod(0o755)
    env = os.environ | {
        "PATH": f"{fake_gh.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "ROCMLAB_FIXTURES": str(course / "tests" / "fixtures" / "upstream"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    script = ["bash", str(course / "ci" / "release_check.sh")]
    result = subprocess.run(script, cwd=course, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    calls = gh_log.read_text()
    assert "pr create --head release-check/matrix --base main" in calls
    assert "workflow run pr.yml --ref release-check/matrix\n" in calls  # the bot's PR gets its checks
    # the freshness runs of every entry that changed (tests/ci/test_release_check_workflow.py has more)
    assert (
        "workflow run freshness.yml --ref release-check/matrix -f entries=rocm-10.1,rocm-7.14,rocm-10.0,cpu-current\n"
        in calls
    )
    assert "issue create" in calls
    pushed = subprocess.run(
        ["git", "show", "release-check/matrix:env/matrix.toml"], cwd=remote, capture_output=True, text=True, check=True
    )
    assert 'name = "rocm-10.1"' in pushed.stdout and 'rocm = "7.14.1"' in pushed.stdout
    files = subprocess.run(
        ["git", "ls-tree", "--name-only", "release-check/matrix", "env/docker/"],
        cwd=remote,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "env/docker/rocm-10.1.Dockerfile" in files.stdout

    # a week later on the merged branch: nothing newer, the issue is closed
    subprocess.run(["git", "checkout", "-q", "release-check/matrix"], cwd=course, check=True)
    (state / "issue").write_text("7\n")
    result = subprocess.run(script, cwd=course, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "issue close 7" in gh_log.read_text()
