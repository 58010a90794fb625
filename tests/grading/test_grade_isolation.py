"""What a graded kernel can reach of the course and the host, and bad learner input that must cost
only its learner. Graded in one run against a copy of the fixture course with the instructor's
usual clutter planted in it: a git history, executed solution notebooks, an earlier grading."""

import csv
import json
import os
import shutil
import uuid

import classroom
import pytest

from rocmlab.course.catalog import discover, select
from rocmlab.errors import CommandFailed
from rocmlab.grading import grader
from rocmlab.grading.grader import grade_class
from rocmlab.grading.submissions import find_submissions
from rocmlab.hub.roster import import_roster
from rocmlab.sandbox.limits import bubblewrap_works, choose_backend, is_root

pytestmark = pytest.mark.slow

PLANTED = {
    ".git/objects/solution": "git-secret-answer",
    "results/local/01-grade.ipynb": "results-secret-answer",
    "grades/01-grade/course/source/01-grade/01-grade.ipynb": "grades-secret-answer",
}


def _reader(paths) -> str:
    return "\n".join(
        f"try:\n    print('LEAK', open({str(p)!r}).read())\nexcept OSError as e:\n    print('blocked', type(e).__name__)"
        for p in paths
    )


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course") / "course"
    shutil.copytree(classroom.COURSE, root)
    for name, text in PLANTED.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def graded(course, tmp_path_factory, grading_backend):
    """The class graded once per sandbox backend this machine has."""
    return (*_grade(course, tmp_path_factory), grading_backend in ("bubblewrap", "namespaces") and is_root())


def _grade(course, tmp_path_factory):
    work = tmp_path_factory.mktemp("isolation")
    lab = select(discover(course), [classroom.LAB])[0]
    base = classroom.student_notebook(course, work)
    marker = f"rocmlab-leftover-{uuid.uuid4().hex}"
    litter = "\n".join(
        f"open('{folder}/{marker}', 'w').write('x' * 4096)" for folder in ("/tmp", "/var/tmp", "/dev/shm")
    )
    seen = (  # landlock: the temp folders cannot even be listed
        "import os\ndef listed(folder):\n    try:\n        return os.listdir(folder)\n"
        "    except PermissionError:\n        return []\n"
        f"print('SEEN', [f for f in ('/tmp', '/var/tmp', '/dev/shm') if '{marker}' in listed(f)])"
    )
    entries = {
        "correct": (classroom.answer(base), 5),
        "reads_course": (classroom.answer(base, classroom.SUM_OK + _reader(course / n for n in PLANTED)), 5),
        "litters_tmp": (classroom.answer(base, classroom.SUM_OK + litter), 5),
        "reads_litter": (classroom.answer(base, classroom.SUM_OK + seen), 5),
    }
    folder = work / "submitted"
    entries["shadows_modules"] = (classroom.answer(base), 5)
    classroom.write_class({k: (nb, s, set()) for k, (nb, s) in entries.items()}, folder, layout="nbgrader")
    for module in ("psutil", "json"):  # beside the notebook, so in the kernel's start-up folder
        hijack = "import os\nopen('/tmp/hijacked', 'w').write(str(os.getuid()))\nraise SystemExit('hijacked')\n"
        (folder / "shadows_modules" / classroom.LAB / f"{module}.py").write_text(hijack)
    for name in ("newline\n", os.fsdecode(b"caf\xe9")):  # a trailing newline; a non-UTF-8 folder name
        classroom.write(classroom.answer(base), folder / name / classroom.LAB / f"{classroom.LAB}.ipynb")
    classroom.write(classroom.answer(base), folder / "dotdot.ipynb")
    os.rename(folder / "dotdot.ipynb", folder / "...ipynb")  # flat layout: learner id ".."
    out = work / "out"
    roster_csv = work / "roster.csv"  # the class roster names a learner in the gradebook (issue 52)
    roster_csv.write_text("login,name_zh,name_en,email,group\ncorrect,高正,Zheng Gao,,learner\n", encoding="utf-8")
    import_roster(roster_csv, work / "hub", [f"sqlite:///{out / 'course' / 'gradebook.db'}"])
    results = grade_class(course, lab, find_submissions(folder, lab.id), out, jobs=2, progress=lambda _m: None)
    return {r.student: r for r in results}, entries, out, marker


def _executed(out, student):
    return (out / "course" / "autograded" / student / classroom.LAB / f"{classroom.LAB}.ipynb").read_text()


def test_good_learners_are_graded_despite_bad_ids_in_the_class(graded):
    results, entries, out, _, forked = graded
    for name, (_nb, score) in entries.items():
        assert results[name].score == score and results[name].status == "graded", results[name]
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary["sandbox"]["backend"] in ("bubblewrap", "namespaces", "landlock") and summary["sandbox"]["private_tmp"]
    )
    assert summary["sandbox"]["forked_kernels"] == forked
    rows = (out / "grades.csv").read_text().splitlines()
    assert len(rows) == 1 + len(entries), rows  # no row for an invalid id, and no split row
    named = {row["student_id"]: row for row in csv.DictReader(rows)}["correct"]
    assert (named["first_name"], named["last_name"], float(named["score"])) == ("Zheng Gao", "高正", 5)


def test_each_bad_id_costs_only_its_learner_with_a_reason(graded):
    results, _, out, _, _ = graded
    bad = {name: r for name, r in results.items() if r.status == "invalid"}
    assert set(bad) == {"..", "newline\n", "caf\\udce9"}, set(bad)
    for result in bad.values():
        assert result.flags == ["invalid"] and "not a valid id" in result.notes[0] and result.score == 0
    assert not (out / f"{classroom.LAB}.html").exists()
    assert sorted(p.parent.name for p in (out / "feedback").glob(f"*/{classroom.LAB}.html")) == sorted(
        n for n in results if n not in bad
    )


def test_the_course_root_is_hidden_from_learner_code(graded):
    _, _, out, _, _ = graded
    executed = _executed(out, "reads_course")
    assert "secret-answer" not in executed
    assert executed.count("blocked") >= len(PLANTED)


def test_temp_folders_are_private_to_each_run(graded):
    _, _, out, marker, _ = graded
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        assert not os.path.exists(os.path.join(folder, marker)), folder
    assert "SEEN []" in _executed(out, "reads_litter")


def test_no_sandbox_means_no_grading_unless_unsafe(course, tmp_path, monkeypatch):
    lab = select(discover(course), [classroom.LAB])[0]
    monkeypatch.setattr(grader, "choose_backend", lambda _isolate: "none")
    with pytest.raises(CommandFailed, match="bubblewrap.*--unsafe"):
        grade_class(course, lab, [], tmp_path / "out", progress=lambda _m: None)
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not bubblewrap_works(), reason="bubblewrap is not installed")
def test_bubblewrap_is_the_default_where_installed():
    assert choose_backend(None) == "bubblewrap"
