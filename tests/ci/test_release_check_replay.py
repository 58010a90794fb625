"""Issue 50, replayed through the real ci/release_check.sh with a fake `gh` and a real git remote.

Each case starts from the recorded upstream (tests/fixtures/upstream/, in the sources' own formats:
TheRock's releases API, AMD's PEP 503 pages as TheRock's manage_structured.py renders them, PyTorch's
indexes, Docker Hub's tags API, PyPI's JSON API) and the frozen matrix of the day they were recorded,
changes one thing upstream the way upstream would, and runs the weekly script. A tracking issue is
open before each run: the script may close it only when the check found nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from freshness_helpers import RECORDED_MATRIX

from rocmlab.freshness import releases

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "fixtures" / "upstream"
TODAY = "2026-12-06"
BIN = Path(sys.executable).parent
NEXT = "https://stable.repo.amd.com/rocm/whl-next/"
GIT = ["git", "-c", "user.name=maintainer", "-c", "user.email=maintainer@example.org"]


# ---------------------------------------------------------------- the world


def course(tmp_path: Path) -> tuple[Path, Path]:
    """A course checkout (main) at the recorded matrix, with an origin remote."""
    repo = tmp_path / "course"
    (repo / "env").mkdir(parents=True)
    (repo / "ci").mkdir()
    (repo / "solutions").mkdir()
    shutil.copy(RECORDED_MATRIX, repo / "env" / "matrix.toml")
    for name in ("pyproject.toml", "ci/release_check.sh", "ci/route_failures.py", "ci/matrix_json.py"):
        shutil.copy(ROOT / name, repo / name)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "matrix"]):
        subprocess.run(GIT + argv, cwd=repo, check=True, capture_output=True)
    subprocess.run(GIT + ["remote", "add", "origin", str(remote)], cwd=repo, check=True)
    subprocess.run(GIT + ["push", "-q", "origin", "main"], cwd=repo, check=True, capture_output=True)
    return repo, remote


def upstream_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "upstream"
    shutil.copytree(UPSTREAM, folder)
    return folder


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def add_link(folder: Path, page: str, filename: str) -> None:
    """One more file on an AMD index page, as TheRock's generator renders a link."""
    path = folder / page
    link = f'    <a href="{filename.replace("+", "%2B")}">{filename}</a><br/>\n  </body>'
    path.write_text(path.read_text(encoding="utf-8").replace("  </body>", link, 1), encoding="utf-8")


def add_release(folder: Path, tag: str, name: str, published: str) -> None:
    def change(items):
        items.insert(
            0,
            {
                "url": f"https://api.github.com/repos/ROCm/TheRock/releases/{400000000 + len(items)}",
                "html_url": f"https://github.com/ROCm/TheRock/releases/tag/{tag}",
                "tag_name": tag,
                "name": name,
                "draft": False,
                "prerelease": False,
                "created_at": published,
                "published_at": published,
                "assets": [],
            },
        )

    edit_json(folder / "therock-releases.json", change)


def no_channel_yet(folder: Path, series: str) -> None:
    """What a new series' other channels answer before they have it: S3's 403 for PyTorch's index, an
    empty page of Docker Hub's tags API."""
    tags = f"https://hub.docker.com/v2/namespaces/rocm/repositories/pytorch/tags?page_size=100&name=rocm{series}"
    (folder / f"dockerhub-rocm{series}.json").write_text(
        json.dumps({"count": 0, "next": None, "previous": None, "results": []}), encoding="utf-8"
    )
    edit_json(
        folder / "manifest.json",
        lambda m: m.update(
            {
                f"https://download.pytorch.org/whl/rocm{series}/torch/": {"status": 403},
                tags: {"file": f"dockerhub-rocm{series}.json", "content_type": "application/json"},
            }
        ),
    )


def add_pypi_release(folder: Path, package: str, version: str, day: str) -> None:
    def change(data):
        wheel = f"{package}-{version}-py3-none-any.whl"
        data["releases"][version] = [
            {"filename": wheel, "packagetype": "bdist_wheel", "upload_time_iso_8601": f"{day}T10:00:00.000000Z"}
            | {"yanked": False, "yanked_reason": None}
        ]

    edit_json(folder / f"pypi-{package}.json", change)


def fake_gh(tmp_path: Path, open_issue: int | None = 7) -> tuple[Path, Path]:
    """`gh` that logs its arguments and keeps the tracking issue and the bot's pull request in files."""
    log, state = tmp_path / "gh.log", tmp_path / "gh-state"
    state.mkdir()
    if open_issue:
        (state / "issue").write_text(f"{open_issue}\n")
    gh = tmp_path / "bin" / "gh"
    gh.parent.mkdir()
    gh.write_text(
        "#!/usr/bin/env bash\n"
        f'printf "%s\\n" "$*" >> {log}\n'
        'case "$1 $2" in\n'
        f'  "issue list") if [[ "$*" == *--label* ]]; then echo "[]"; else cat {state}/issue 2>/dev/null; fi ;;\n'
        f'  "issue create") if [[ "$*" == *"Upstream releases"* ]]; then echo 8 > {state}/issue; fi ;;\n'
        f'  "issue close") rm -f {state}/issue ;;\n'
        f'  "issue edit") cp "${{@: -1}}" {state}/issue-body.md ;;\n'
        f'  "pr list") cat {state}/pr 2>/dev/null ;;\n'
        f'  "pr create") echo 12 > {state}/pr ;;\n'
        "esac\n"
    )
    gh.chmod(0o755)
    return gh, log


def run_check(repo: Path, gh: Path, fixtures: Path, **env) -> subprocess.CompletedProcess:
    variables = os.environ | {
        "PATH": f"{gh.parent}:{BIN}:{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "ROCMLAB": str(BIN / "rocmlab"),
        "ROCMLAB_FIXTURES": str(fixtures),
        "ROCMLAB_TODAY": TODAY,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    script = ["bash", "ci/release_check.sh"]
    return subprocess.run(
        script, cwd=repo, env=variables | env, capture_output=True, text=True, timeout=300, check=False
    )


def calls(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def issue_body(tmp_path: Path) -> str:
    return (tmp_path / "gh-state" / "issue-body.md").read_text(encoding="utf-8")


def remote_branches(remote: Path) -> list[str]:
    out = subprocess.run(["git", "branch", "--format=%(refname:short)"], cwd=remote, capture_output=True, text=True)
    return out.stdout.split()


# ---------------------------------------------------------------- the findings of issue 50


def test_a_check_that_found_nothing_closes_the_issue(tmp_path):
    repo, remote = course(tmp_path)
    gh, log = fake_gh(tmp_path)
    result = run_check(repo, gh, UPSTREAM)
    assert result.returncode == 0, result.stderr[-3000:]
    assert any(c.startswith("issue close 7 ") for c in calls(log))
    assert remote_branches(remote) == ["main"]


def test_a_windows_only_wheel_moves_no_linux_pin(tmp_path):
    """TheRock publishes Windows and Linux wheels to one index: a win_amd64-only torch 2.14.2 (with its
    Windows device wheel) is not a candidate for the Linux rocm-10.1 entry."""
    folder = upstream_copy(tmp_path)
    add_link(folder, "whl-next-torch.html", "torch-2.14.2+rocm10.1.0-cp312-cp312-win_amd64.whl")
    add_link(
        folder,
        "whl-next-amd-torch-device-gfx942.html",
        "amd_torch_device_gfx942-2.14.2+rocm10.1.0-py3-none-win_amd64.whl",
    )
    repo, remote = course(tmp_path)
    before = (repo / "env" / "matrix.toml").read_text(encoding="utf-8")
    gh, log = fake_gh(tmp_path)
    result = run_check(repo, gh, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (repo / "env" / "matrix.toml").read_text(encoding="utf-8") == before
    assert json.loads((repo / "release-check.json").read_text())["updates"] == []
    assert any(c.startswith("issue close 7 ") for c in calls(log)) and remote_branches(remote) == ["main"]
    # verify-pins reads the same rule: a pin on the Windows wheel only is missing for the Linux entry
    matrix = tmp_path / "pinned.toml"
    pinned = before.replace("==2.14.0+rocm10.1.0", "==2.14.2+rocm10.1.0")
    matrix.write_text(pinned.replace('pytorch = "2.14.0"', 'pytorch = "2.14.2"', 1), encoding="utf-8")
    code = releases.main(releases_command="verify-pins", matrix=matrix, fixtures=folder)
    assert code == releases.EXIT_PINS_BROKEN


def test_a_linux_torch_without_its_device_wheel_is_not_proposed(tmp_path):
    """torch 2.14.3 for Linux is on the index, amd-torch-device-gfx942 2.14.3 is not: nothing is proposed
    (verify-pins would find the device wheel missing only after the merge)."""
    folder = upstream_copy(tmp_path)
    add_link(folder, "whl-next-torch.html", "torch-2.14.3+rocm10.1.0-cp312-cp312-linux_x86_64.whl")
    repo, _remote = course(tmp_path)
    gh, _log = fake_gh(tmp_path)
    result = run_check(repo, gh, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((repo / "release-check.json").read_text())["updates"] == []
    add_link(
        folder,
        "whl-next-amd-torch-device-gfx942.html",
        "amd_torch_device_gfx942-2.14.3+rocm10.1.0-py3-none-linux_x86_64.whl",
    )
    found = json.loads(
        subprocess.run(
            [
                BIN / "rocmlab",
                "releases",
                "check",
                "--matrix",
                str(RECORDED_MATRIX),
                "--fixtures",
                str(folder),
                "--json",
                "--today",
                TODAY,
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    )
    assert ("rocm-10.1", "pytorch", "2.14.0", "2.14.3") in {
        (u["entry"], u["field"], u["old"], u["new"]) for u in found["updates"]
    }


# Each finding below is judged twice: in process, where `rocmlab releases check` finds it and writes
# the reason into the body the script posts (make test); and through the real script, fake `gh` and
# git remote (the slow step: bash, git and four rocmlab processes per case, about 1 CPU-s each).
FOUND_BY = ["check", pytest.param("script", marks=pytest.mark.slow)]


def needs_a_person(
    tmp_path: Path, folder: Path, reason: str, code: int, open_issue: int | None = 7, found_by: str = "script"
) -> None:
    if found_by == "check":
        body = tmp_path / "release-check.md"
        matrix = tmp_path / "matrix.toml"
        shutil.copy(RECORDED_MATRIX, matrix)
        found = releases.main(
            releases_command="check",
            matrix=matrix,
            fixtures=folder,
            body_out=body,
            today=date.fromisoformat(TODAY),
            pyproject=ROOT / "pyproject.toml",  # the script's course holds a copy of it beside env/
        )
        assert found == code
        assert reason in body.read_text(encoding="utf-8")
        return
    repo, remote = course(tmp_path)
    gh, log = fake_gh(tmp_path, open_issue)
    result = run_check(repo, gh, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    done = calls(log)
    assert not any(c.startswith("issue close") for c in done), done
    if open_issue:
        assert any(c.startswith("issue edit 7 --body-file") for c in done) and reason in issue_body(tmp_path)
        assert any(c.startswith("issue comment 7 --body") for c in done)
    else:  # none open yet: one is opened with the reasons
        assert any(c.startswith("issue create --title Upstream releases newer than the release matrix") for c in done)
        assert reason in (repo / "release-check-issue.md").read_text(encoding="utf-8")
    assert json.loads((repo / "release-check.json").read_text())["needs_person"]
    assert remote_branches(remote) == ["main"]  # nothing to edit: no branch, no run
    assert not any(c.startswith("workflow run") for c in done)
    recheck = releases.main(releases_command="check", matrix=repo / "env" / "matrix.toml", fixtures=folder)
    assert recheck == code


@pytest.mark.parametrize("found_by", FOUND_BY)
def test_a_release_without_a_torch_build_keeps_the_issue_open(tmp_path, found_by):
    folder = upstream_copy(tmp_path)
    add_release(folder, "therock-10.2", "ROCm Core SDK 10.2.0 Release", "2026-12-04T16:00:00Z")
    no_channel_yet(folder, "10.2")
    needs_a_person(
        tmp_path,
        folder,
        "- waiting for torch: ROCm 10.2.0 released 2026-12-04",
        releases.EXIT_NEEDS_PERSON,
        found_by=found_by,
    )


@pytest.mark.parametrize("found_by", FOUND_BY)
def test_a_patch_release_without_its_torch_is_pending_not_patched(tmp_path, found_by):
    """7.14.2 is out, no torch +rocm7.14.2 yet: rocm-7.14 is not patched to a ROCm its torch was not built for."""
    folder = upstream_copy(tmp_path)
    add_release(folder, "therock-7.14.2", "ROCm Core SDK 7.14.2 Release", "2026-12-03T16:00:00Z")
    needs_a_person(
        tmp_path,
        folder,
        "- waiting for torch: rocm-7.14: ROCm 7.14.2 released 2026-12-03",
        releases.EXIT_NEEDS_PERSON,
        found_by=found_by,
    )


@pytest.mark.parametrize("found_by", FOUND_BY)
def test_a_major_held_at_the_cap_keeps_the_issue_open(tmp_path, found_by):
    folder = upstream_copy(tmp_path)
    add_pypi_release(folder, "transformers", "6.0.0", "2026-12-04")
    needs_a_person(
        tmp_path,
        folder,
        "- held at a cap: cpu-current: transformers 6.0.0",
        releases.EXIT_NEEDS_PERSON,
        found_by=found_by,
    )


@pytest.mark.parametrize("found_by", FOUND_BY)
def test_an_unmarked_major_is_not_a_plain_pin_edit(tmp_path, found_by):
    folder = upstream_copy(tmp_path)
    add_pypi_release(folder, "accelerate", "2.0.0", "2026-12-04")
    needs_a_person(
        tmp_path,
        folder,
        "- unmarked major: cpu-current: accelerate 2.0.0",
        releases.EXIT_NEEDS_PERSON,
        found_by=found_by,
    )


@pytest.mark.parametrize("found_by", FOUND_BY)
def test_an_unreadable_release_keeps_the_issue_open(tmp_path, found_by):
    folder = upstream_copy(tmp_path)
    add_release(folder, "core-sdk-drop", "Core SDK drop", "2026-12-04T16:00:00Z")
    reason = "- unreadable release: TheRock release tag 'core-sdk-drop'"
    needs_a_person(tmp_path, folder, reason, releases.EXIT_OFFLINE, open_issue=None, found_by=found_by)


@pytest.mark.parametrize("found_by", FOUND_BY)
def test_a_final_release_on_the_older_line_is_not_skipped(tmp_path, found_by):
    folder = upstream_copy(tmp_path)
    add_release(folder, "therock-7.15", "ROCm Core SDK 7.15.0 Release", "2026-12-02T16:00:00Z")
    needs_a_person(
        tmp_path, folder, "- not watched: ROCm 7.15.0 (therock-7.15", releases.EXIT_NEEDS_PERSON, found_by=found_by
    )


@pytest.mark.parametrize("found_by", FOUND_BY)
def test_a_newer_patch_image_of_a_legacy_entry_is_not_skipped(tmp_path, found_by):
    folder = upstream_copy(tmp_path)

    def change(data):
        tag = dict(data["results"][0], name="rocm7.2.5_ubuntu24.04_py3.12_pytorch_release_2.10.0")
        data["results"].insert(0, tag)

    edit_json(folder / "dockerhub-rocm7.2.json", change)
    needs_a_person(
        tmp_path,
        folder,
        "rocm-7.2: rocm/pytorch has images of ROCm 7.2.5",
        releases.EXIT_NEEDS_PERSON,
        found_by=found_by,
    )


@pytest.mark.parametrize("answer", ["403", "no links"])
@pytest.mark.parametrize("found_by", FOUND_BY)
def test_an_unreadable_index_an_entry_installs_from_makes_the_check_partial(tmp_path, answer, found_by):
    """S3 answers 403 for a path that does not exist, but from whl-next, which rocm-10.1 installs from,
    a 403 or a page without links is a failed source, never an empty index."""
    folder = upstream_copy(tmp_path)
    if answer == "403":
        edit_json(folder / "manifest.json", lambda m: m.update({NEXT + "torch/": {"status": 403}}))
    else:
        page = "<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Links for torch</h1>\n  </body>\n</html>\n"
        (folder / "whl-next-torch.html").write_text(page, encoding="utf-8")
    needs_a_person(tmp_path, folder, f"- failed source: wheels {NEXT}", releases.EXIT_OFFLINE, found_by=found_by)
    if found_by == "script":
        assert "partial check" in issue_body(tmp_path)


# ---------------------------------------------------------------- the bot branch


def new_series(tmp_path: Path) -> Path:
    """ROCm 10.2.0 with torch 2.15.0 for Linux (and its device wheel) on whl-next, and 7.14.2 for the
    previous rocm-7.14 entry on whl-multi-arch."""
    folder = upstream_copy(tmp_path)
    add_release(folder, "therock-10.2", "ROCm Core SDK 10.2.0 Release", "2026-12-04T16:00:00Z")
    add_release(folder, "therock-7.14.2", "ROCm Core SDK 7.14.2 Release", "2026-12-03T16:00:00Z")
    for py in ("311", "312", "313"):
        add_link(folder, "whl-next-torch.html", f"torch-2.15.0+rocm10.2.0-cp{py}-cp{py}-linux_x86_64.whl")
        add_link(folder, "whl-multi-arch-torch.html", f"torch-2.12.0+rocm7.14.2-cp{py}-cp{py}-linux_x86_64.whl")
    add_link(
        folder,
        "whl-next-amd-torch-device-gfx942.html",
        "amd_torch_device_gfx942-2.15.0+rocm10.2.0-py3-none-linux_x86_64.whl",
    )
    add_link(
        folder,
        "whl-multi-arch-amd-torch-device-gfx942.html",
        "amd_torch_device_gfx942-2.12.0+rocm7.14.2-py3-none-linux_x86_64.whl",
    )
    no_channel_yet(folder, "10.2")
    return folder


@pytest.mark.slow  # the script's git and gh traffic over two runs, nothing to judge in process: 4 CPU-s
def test_the_bot_branch_is_never_pushed_over_a_maintainers_commit_and_a_quiet_week_runs_nothing(tmp_path):
    folder = new_series(tmp_path)
    repo, remote = course(tmp_path)
    gh, log = fake_gh(tmp_path)
    first = run_check(repo, gh, folder)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    done = calls(log)
    assert (
        "pr create --head release-check/matrix --base main --title Upstream releases newer than the release matrix --body-file release-check.md"
        in done
    )
    # the patched previous entry runs again: the run dispatched and the PR body name the same entries
    dispatched = next(c for c in done if c.startswith("workflow run freshness.yml"))
    assert dispatched == "workflow run freshness.yml --ref release-check/matrix -f entries=rocm-10.2,rocm-7.14"
    body = (repo / "release-check.md").read_text(encoding="utf-8")
    assert "- rocm-10.2 on a GPU runner\n- rocm-7.14 on a GPU runner\n" in body
    only = subprocess.run(
        [sys.executable, "ci/matrix_json.py", "--kind", "rocm", "--only", "rocm-10.2,rocm-7.14"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    assert [j["name"] for j in json.loads(only.stdout)["include"]] == ["rocm-10.2", "rocm-7.14"]

    # a week without upstream change: nothing pushed, nothing dispatched
    subprocess.run(["git", "switch", "-q", "main"], cwd=repo, check=True)
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)
    pushed = subprocess.run(
        ["git", "rev-parse", "release-check/matrix"], cwd=remote, capture_output=True, text=True
    ).stdout
    log.write_text("")
    quiet = run_check(repo, gh, folder)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "the edit is the one already on release-check/matrix (pull request #12)" in quiet.stdout
    assert not any(c.startswith(("workflow run", "pr create")) for c in calls(log)), calls(log)
    assert (
        subprocess.run(["git", "rev-parse", "release-check/matrix"], cwd=remote, capture_output=True, text=True).stdout
        == pushed
    )

    # a maintainer adds a commit to the branch (the unverified-fact check the PR asks for)
    clone = tmp_path / "maintainer"
    subprocess.run(["git", "clone", "-q", "-b", "release-check/matrix", str(remote), str(clone)], check=True)
    matrix = clone / "env" / "matrix.toml"
    matrix.write_text(matrix.read_text(encoding="utf-8").replace('unverified = ["gfx"]\n', "", 1), encoding="utf-8")
    subprocess.run(GIT + ["commit", "-qam", "rocm-10.2: gfx checked against RELEASES.md"], cwd=clone, check=True)
    subprocess.run(GIT + ["push", "-q", "origin", "release-check/matrix"], cwd=clone, check=True, capture_output=True)
    mine = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout
    subprocess.run(["git", "switch", "-q", "main"], cwd=repo, check=True)
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)
    log.write_text("")
    blocked = run_check(repo, gh, folder)
    assert blocked.returncode == 0, blocked.stderr[-3000:]
    assert (
        subprocess.run(["git", "rev-parse", "release-check/matrix"], cwd=remote, capture_output=True, text=True).stdout
        == mine
    )
    assert not any(c.startswith("workflow run") for c in calls(log))
    assert "holds commits not made by the bot: nothing pushed" in blocked.stdout
    assert "rocm-10.2: gfx checked against RELEASES.md" in issue_body(tmp_path)


# ---------------------------------------------------------------- the bot's PR can pass

# The unit tests of pr.yml's `python -m pytest` that read env/matrix.toml, README.md or docs/ (the
# files a bot PR changes); the rest do not see the matrix.
READS_THE_MATRIX = [
    "tests/freshness/test_releases.py",
    "tests/freshness/test_environments.py",
    "tests/freshness/test_release_docs.py",
    "tests/freshness/test_release_replay.py::test_the_replay_starts_from_the_real_matrix_shape",
    "tests/ci/test_workflows.py",
    "tests/ci/test_freshness_workflow.py",
    "tests/doctor/test_doctor.py",
    "tests/foundation/test_cli.py::test_the_readme_command_table_is_generated_from_the_parsers",
    "tests/hub/test_hub_helm.py::test_image_is_a_release_matrix_entry_built_from_env_docker",
    "tests/labs/test_lab01.py::test_install_lines_come_from_the_release_matrix",
    "tests/labs/test_lab07.py::test_triton_pins_run_the_interpreter_and_fit_the_cpu_kernels_extra",
]


@pytest.mark.slow  # a nested pytest of 11 test modules: 14 CPU-s, a tenth of make test
def test_the_bots_own_edit_for_a_new_series_passes_the_tests_that_read_the_matrix(tmp_path):
    """The bot's --apply output (a new series with its unverified gfx fact, a patched previous entry, the
    regenerated Dockerfiles and sentences), applied to a copy of this repository's matrix, README and docs,
    then the unit tests that read them, run against the copy."""
    copy = tmp_path / "repo"
    for name in ("tests", "env", "docs", "ci", ".ci", ".github", "solutions", "src/rocmlab/schemas"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("README.md", "Makefile", "pyproject.toml", ".dockerignore"):
        shutil.copy(ROOT / name, copy / name)
    folder = new_series(tmp_path)
    env = os.environ | {"PATH": f"{BIN}:{os.environ['PATH']}"}
    check = [BIN / "rocmlab", "releases", "check", "--apply", "--json", "--fixtures", str(folder), "--today", TODAY]
    applied = subprocess.run(check, cwd=copy, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert applied.returncode == releases.EXIT_UPDATES, applied.stderr[-3000:]
    found = json.loads(applied.stdout)
    assert [e["name"] for e in found["new_entries"]] == ["rocm-10.2"]
    assert found["new_entries"][0]["unverified"] == ["gfx"]
    assert "rocm-10.2" in (copy / "README.md").read_text(encoding="utf-8")  # the sentences follow the matrix
    subprocess.run(
        [BIN / "rocmlab", "env", "dockerfiles"], cwd=copy, env=env, check=True, capture_output=True, timeout=120
    )
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *READS_THE_MATRIX],
        cwd=copy,
        env=env | {"ROCMLAB_ROOT": str(copy)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout[-4000:]


@pytest.mark.slow  # the script's pull-request comment, through fake gh: 1.3 CPU-s
def test_without_a_gpu_runner_the_pr_body_says_which_entries_do_not_run(tmp_path):
    folder = new_series(tmp_path)
    repo, _remote = course(tmp_path)
    gh, log = fake_gh(tmp_path)
    result = run_check(repo, gh, folder, ROCMLAB_GPU_RUNNERS="none", PR_CHECKS="native")
    assert result.returncode == 0, result.stderr[-3000:]
    done = calls(log)
    assert not any(c.startswith("workflow run") for c in done)  # both changed entries are ROCm entries
    assert any(
        c.startswith(
            "pr comment 12 --body No GPU runner (ROCMLAB_GPU_RUNNERS=none): the labs were not run on rocm-10.2,rocm-7.14"
        )
        for c in done
    )
    body = (repo / "release-check.md").read_text(encoding="utf-8")
    assert "- rocm-10.2 not run: no GPU runner" in body and "- rocm-7.14 not run: no GPU runner" in body
