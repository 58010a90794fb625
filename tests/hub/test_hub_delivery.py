"""Lab updates mid-course (issue 27): edit → bump → deliver again never loses a learner's work.

The fast tests drive ``rocmlab.hub.delivery`` on copies of a built lab; the slow one runs the
whole path: the demo hub delivers lab 01, the learner edits it through the Jupyter server, the
instructor bumps the lab and rebuilds it, the learner's server starts again, and the edits are
still there beside the new version, which the grader accepts as it does the old one.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import urllib.request
from pathlib import Path

import nbformat
import pytest

from rocmlab.course.catalog import discover, select
from rocmlab.course.course import Course
from rocmlab.hub.delivery import MANIFEST, changelog_since, deliver_lab

REPO = Path(__file__).resolve().parents[2]
LAB = "01-rocm-setup"
BUILT = REPO / "labs" / "zh" / LAB
SHIPPED = nbformat.read(BUILT / f"{LAB}.ipynb", as_version=4).metadata["rocmlab"]["version"]  # the lab's version today
EDIT = "def backend_of(torch_module):\n    return 'rocm'  # my answer\n"
CHANGELOG = f"""# 01-rocm-setup changelog

## 9.2.0

- The matmul exercise reports TFLOP/s with two decimals.

## {SHIPPED}

- Old news the learner already had.
"""


def learner_edit(notebook: Path, text: str = EDIT) -> None:
    nb = nbformat.read(notebook, as_version=4)
    cell = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    cell.source = text
    nbformat.write(nb, notebook)


def bumped(tmp_path: Path, version: str = "9.2.0") -> Path:
    """The built lab as the instructor ships it after a bump: a new version and a changed cell."""
    src = tmp_path / "built-new" / LAB
    shutil.copytree(BUILT, src)
    nb = nbformat.read(src / f"{LAB}.ipynb", as_version=4)
    nb.metadata["rocmlab"]["version"] = version
    nb.cells[0].source += "\n\n(new in 9.2.0)"
    nbformat.write(nb, src / f"{LAB}.ipynb")
    return src


@pytest.fixture
def changelog(tmp_path) -> Path:
    path = tmp_path / "CHANGELOG.md"
    path.write_text(CHANGELOG, encoding="utf-8")
    return path


def test_first_delivery_copies_the_lab_and_records_it(tmp_path):
    home = tmp_path / "home"
    done = deliver_lab(BUILT, home / LAB)
    assert done.action == "new" and done.version == SHIPPED
    assert (home / LAB / f"{LAB}.ipynb").read_bytes() == (BUILT / f"{LAB}.ipynb").read_bytes()
    manifest = json.loads((home / LAB / MANIFEST).read_text())
    assert manifest["version"] == SHIPPED and f"{LAB}.ipynb" in manifest["files"]
    assert deliver_lab(BUILT, home / LAB).action == "current"
    assert deliver_lab(tmp_path / "no-such-lab", home / "x") is None


def test_edited_notebook_is_kept_and_the_new_version_arrives_beside_it(tmp_path, changelog):
    dest = tmp_path / "home" / LAB
    deliver_lab(BUILT, dest)
    notebook = dest / f"{LAB}.ipynb"
    learner_edit(notebook)
    edited = notebook.read_bytes()
    done = deliver_lab(bumped(tmp_path), dest, changelog=changelog)
    assert (done.action, done.previous, done.version) == ("updated", SHIPPED, "9.2.0")
    assert notebook.read_bytes() == edited, "the learner's notebook was overwritten"
    beside = dest / f"{LAB}.v9.2.0.ipynb"
    assert done.beside == [beside.name]
    assert nbformat.read(beside, as_version=4).metadata["rocmlab"]["version"] == "9.2.0"
    note = (dest / "UPDATE-9.2.0.md").read_text()
    assert beside.name in note and "TFLOP/s with two decimals" in note and "Old news" not in note
    assert "没有被覆盖" in note
    assert "data/" in "".join(done.replaced) or not (BUILT / "data").exists()  # unchanged data refreshed
    # delivering the same version again changes nothing
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert deliver_lab(bumped(tmp_path / "again"), dest, changelog=changelog).action == "current"
    assert before == {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}


def test_unedited_notebook_is_updated_in_place(tmp_path, changelog):
    dest = tmp_path / "home" / LAB
    deliver_lab(BUILT, dest)
    done = deliver_lab(bumped(tmp_path), dest, changelog=changelog)
    assert done.beside == [] and f"{LAB}.ipynb" in done.replaced
    assert nbformat.read(dest / f"{LAB}.ipynb", as_version=4).metadata["rocmlab"]["version"] == "9.2.0"
    assert not (dest / f"{LAB}.v9.2.0.ipynb").exists()


def test_a_third_version_keeps_both_earlier_ones(tmp_path, changelog):
    dest = tmp_path / "home" / LAB
    deliver_lab(BUILT, dest)
    learner_edit(dest / f"{LAB}.ipynb")
    deliver_lab(bumped(tmp_path / "a"), dest, changelog=changelog)
    learner_edit(dest / f"{LAB}.v9.2.0.ipynb", EDIT + "# more work\n")
    changelog.write_text(CHANGELOG.replace("## 9.2.0", "## 9.3.0\n\n- Third.\n\n## 9.2.0"))
    done = deliver_lab(bumped(tmp_path / "b", "9.3.0"), dest, changelog=changelog)
    assert done.beside == [f"{LAB}.v9.3.0.ipynb"]
    assert "# my answer" in (dest / f"{LAB}.ipynb").read_text()
    assert "# more work" in (dest / f"{LAB}.v9.2.0.ipynb").read_text()
    note = (dest / "UPDATE-9.3.0.md").read_text()
    assert "Third." in note and "TFLOP/s" not in note


def test_home_from_before_the_manifest_counts_as_edited(tmp_path):
    dest = tmp_path / "home" / LAB
    shutil.copytree(BUILT, dest)  # delivered by an older hub: no manifest
    done = deliver_lab(bumped(tmp_path), dest)
    assert done.beside == [f"{LAB}.v9.2.0.ipynb"]
    assert "no entry for this version" in (dest / "UPDATE-9.2.0.md").read_text()


def test_changelog_sections_between_two_versions(changelog):
    assert "TFLOP/s" in changelog_since(changelog, SHIPPED, "9.2.0")
    assert changelog_since(changelog, "9.2.0", "9.2.0") == ""
    assert "Old news" in changelog_since(changelog, "0.0.1", "9.2.0")
    assert changelog_since(None, "9.0.0", "9.2.0") == ""


def test_grader_accepts_either_version_and_flags_the_old_one(tmp_path, changelog):
    from rocmlab.grading import submissions as grade

    dest = tmp_path / "home" / LAB
    deliver_lab(BUILT, dest)
    learner_edit(dest / f"{LAB}.ipynb")
    deliver_lab(bumped(tmp_path), dest, changelog=changelog)
    (lab,) = select(discover(REPO), [LAB])
    lab = dataclasses.replace(lab, version="9.2.0")  # the source after the bump
    for name, old in ((f"{LAB}.ipynb", True), (f"{LAB}.v9.2.0.ipynb", False)):
        result = grade.StudentResult("learner1", name)
        assert grade.load_submission(grade.Submission("learner1", dest / name), lab, result) is not None
        assert ("old_version" in result.flags) == old, (name, result.flags)


# ------------------------------------------------------------------ end to end through the demo hub


def contents_api(server: str, token: str, path: str, method="GET", body=None):
    request = urllib.request.Request(
        f"{server}api/contents/{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read().decode())


@pytest.mark.slow
@pytest.mark.machine_wide
def test_edit_bump_deliver_again_through_the_hub(tmp_path, demo_hub_options):
    from rocmlab.build.assignments import build
    from rocmlab.hub import DemoHub

    course = tmp_path / "course"
    shutil.copytree(
        REPO,
        course,
        ignore=shutil.ignore_patterns(".venv", ".git", "results", "_site", "grades", ".pytest_cache", "__pycache__"),
    )
    (course / ".venv").symlink_to(REPO / ".venv")  # the proxy of `make hub-setup`
    learner = "learner1"
    options = {"course": Course(course), "learners": (learner,), "instructors": (), "labs": (LAB,), "lang": "zh"}
    with DemoHub(tmp_path / "hub", **options, **demo_hub_options) as hub:
        server = hub.start_server(learner)
        token = hub.user_token(learner)
        path = f"{LAB}/{LAB}.ipynb"
        model = contents_api(server, token, path)
        solution = next(c for c in model["content"]["cells"] if c["metadata"].get("nbgrader", {}).get("solution"))
        solution["source"] = EDIT
        contents_api(server, token, path, "PUT", {"type": "notebook", "format": "json", "content": model["content"]})
        hub.stop_server(learner)
        edited = (hub.home(learner) / path).read_bytes()

        # the instructor bumps the lab mid-course and rebuilds it
        folder = course / "solutions" / LAB
        toml = (folder / "lab.toml").read_text()
        (folder / "lab.toml").write_text(toml.replace(f'version = "{SHIPPED}"', 'version = "9.2.0"', 1))
        changelog = (folder / "CHANGELOG.md").read_text()
        (folder / "CHANGELOG.md").write_text(
            changelog.replace(f"\n## {SHIPPED}", f"\n## 9.2.0\n\n- A clearer first exercise.\n\n## {SHIPPED}", 1)
        )
        (lab,) = select(discover(course), [LAB])
        build(course, [lab], ["zh"], course / "labs", progress=lambda *_: None)

        server = hub.start_server(learner)
        home = hub.home(learner) / LAB
        assert (home / f"{LAB}.ipynb").read_bytes() == edited, "the learner's edits were overwritten"
        new = nbformat.read(home / f"{LAB}.v9.2.0.ipynb", as_version=4)
        assert new.metadata["rocmlab"]["version"] == "9.2.0"
        assert "A clearer first exercise." in (home / "UPDATE-9.2.0.md").read_text()
        listing = {item["name"] for item in contents_api(server, hub.user_token(learner), LAB)["content"]}
        assert {f"{LAB}.ipynb", f"{LAB}.v9.2.0.ipynb", "UPDATE-9.2.0.md"} <= listing


def test_the_helm_hook_command_delivers_updates_beside_edits(tmp_path):
    """``python -m rocmlab.hub.delivery BUILT HOME``: what the chart's postStart runs."""
    import subprocess
    import sys

    home = tmp_path / "home"
    built = tmp_path / "built"
    shutil.copytree(BUILT, built / LAB)
    command = [sys.executable, "-m", "rocmlab.hub.delivery", str(built), str(home)]
    env = {"PATH": "/usr/bin:/bin", "ROCMLAB_ROOT": str(REPO)}
    subprocess.run(command, check=True, timeout=60, env=env)
    learner_edit(home / LAB / f"{LAB}.ipynb")
    shutil.rmtree(built / LAB)
    shutil.copytree(bumped(tmp_path), built / LAB)
    out = subprocess.run(command, check=True, timeout=60, env=env, capture_output=True, text=True).stdout
    assert f"{LAB} {SHIPPED} -> 9.2.0 (updated)" in out
    assert "# my answer" in (home / LAB / f"{LAB}.ipynb").read_text()
    assert (home / LAB / f"{LAB}.v9.2.0.ipynb").is_file() and (home / LAB / "UPDATE-9.2.0.md").is_file()


def test_everything_delivered_belongs_to_the_learner(tmp_path, changelog):
    import os

    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    owner = (54321, 54321)
    dest = tmp_path / "home" / LAB
    (tmp_path / "home").mkdir()
    deliver_lab(BUILT, dest, owner)
    learner_edit(dest / f"{LAB}.ipynb")
    deliver_lab(bumped(tmp_path), dest, owner, changelog)
    paths = [dest, *dest.rglob("*")]
    assert any(p.is_dir() and not any(c.is_file() for c in p.iterdir()) for p in paths)  # folders of folders too
    not_theirs = [str(p.relative_to(dest)) for p in paths if (p.stat().st_uid, p.stat().st_gid) != owner]
    assert not not_theirs, not_theirs


def test_delivery_for_a_real_account_runs_as_that_account(tmp_path, changelog):
    """With real accounts the hub is root and the home is the learner's to fill: ``deliver_as_user``
    writes as the learner (a forked child that dropped to their uid), so a link the learner planted
    where the new version goes cannot make root write outside the home."""
    import os
    import pwd

    from rocmlab.hub.delivery import deliver_as_user
    from rocmlab.hub.language import SETTINGS, SETTINGS_FILE

    if os.geteuid() != 0:
        pytest.skip("dropping to another account needs root")
    nobody = pwd.getpwnam("nobody")
    owner = (nobody.pw_uid, nobody.pw_gid)
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, *owner)
    dest = home / LAB
    assert deliver_as_user(owner, BUILT, dest, changelog, "zh").action == "new"
    paths = [dest, *dest.rglob("*"), home / SETTINGS / SETTINGS_FILE]
    assert {(p.stat().st_uid, p.stat().st_gid) for p in paths} == {owner}
    # the learner edits, and plants a link where the new version will be written
    notebook = dest / f"{LAB}.ipynb"
    learner_edit(notebook)
    os.chown(notebook, *owner)
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    (dest / "UPDATE-9.2.0.md").symlink_to(root_only / "planted")
    with pytest.raises(OSError, match="as uid .*PermissionError"):
        deliver_as_user(owner, bumped(tmp_path), dest, changelog)
    assert not (root_only / "planted").exists()
    # without the link the update arrives, written by the learner's uid
    (dest / "UPDATE-9.2.0.md").unlink()
    (dest / f"{LAB}.v9.2.0.ipynb").unlink()
    done = deliver_as_user(owner, bumped(tmp_path / "again"), dest, changelog)
    assert (done.action, done.beside) == ("updated", [f"{LAB}.v9.2.0.ipynb"])
    assert "TFLOP/s" in (dest / "UPDATE-9.2.0.md").read_text()  # the CHANGELOG read before the fork
    assert (dest / f"{LAB}.v9.2.0.ipynb").stat().st_uid == owner[0]
    assert deliver_as_user(owner, tmp_path / "not-built", home / "x") is None
