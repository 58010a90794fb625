"""A learner's resources are their own (issue 47): as root each kernel writes into its run's own
size-limited tmpfs (work folder, /tmp, /var/tmp, /dev/shm, /run/lock together), apart from the
grader's files. A learner who writes until the disk is full fails alone: the learners graded
beside it, in the same class and the same slots, keep their full marks."""

import json
import os

import classroom
import nbformat
import pytest

from rocmlab.course.catalog import discover, select
from rocmlab.grading import grader
from rocmlab.grading.grader import grade_class
from rocmlab.grading.submissions import find_submissions
from rocmlab.sandbox import limits as sandbox
from rocmlab.sandbox.limits import Limits, bubblewrap_works, is_root, namespaces_work

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not is_root(), reason="a run's own tmpfs needs root")]

SPACE_MB = 48
FILL = """
import errno, json, os
written, failed = {}, {}
for folder in (".", "/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
    written[folder] = 0
    try:
        for n in range(10_000):
            with open(os.path.join(folder, f"fill-{n}"), "wb") as out:
                for _ in range(16):
                    out.write(b"x" * 2**20)
                    written[folder] += 1
    except OSError as exc:
        failed[folder] = errno.errorcode.get(exc.errno, str(exc.errno))
print("FILLED", json.dumps({"written_mb": written, "failed": failed}))
"""


@pytest.fixture(params=["bubblewrap", "bubblewrap-per-kernel", "namespaces"])
def backend(request, monkeypatch):
    name = request.param.removesuffix("-per-kernel")
    if not (bubblewrap_works if name == "bubblewrap" else namespaces_work)():
        pytest.skip(f"{name} does not work here")
    monkeypatch.setattr(grader, "choose_backend", lambda _isolate: name)
    if request.param.endswith("-per-kernel"):
        monkeypatch.setattr(sandbox, "fork_server_applies", lambda *_: False)
    return request.param


def test_a_learner_who_fills_its_disk_fails_alone(backend, tmp_path):
    lab = select(discover(classroom.COURSE), [classroom.LAB])[0]
    base = classroom.student_notebook(classroom.COURSE, tmp_path)
    entries = {name: (classroom.answer(base), 5) for name in ("perfect_a", "perfect_b", "perfect_c")}
    entries["fills_disk"] = (classroom.answer(base, classroom.SUM_OK + FILL), 5)
    classroom.write_class({k: (nb, s, set()) for k, (nb, s) in entries.items()}, tmp_path / "submitted")
    out = tmp_path / "out"
    results = grade_class(
        classroom.COURSE,
        lab,
        find_submissions(tmp_path / "submitted", lab.id),
        out,
        jobs=2,
        limits=Limits(disk_mb=SPACE_MB),
        progress=lambda _m: None,
    )
    by_name = {r.student: r for r in results}
    for name in ("perfect_a", "perfect_b", "perfect_c"):
        assert by_name[name].status == "graded" and by_name[name].score == 5, (by_name[name].flags, by_name[name].notes)
    filler = by_name["fills_disk"]
    assert filler.status == "graded" and not {"crashed", "invalid"} & set(filler.flags), filler.notes
    executed = nbformat.read(out / "course" / "autograded" / "fills_disk" / lab.id / f"{lab.id}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    report = json.loads(printed.split("FILLED ")[1].splitlines()[0])
    assert set(report["failed"].values()) == {"ENOSPC"}, report  # every folder it may write: full
    assert SPACE_MB - 8 <= sum(report["written_mb"].values()) <= SPACE_MB, report  # all of them: one space
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sandbox"]["limits"]["disk_mb"] == SPACE_MB
    assert not [p for p in os.listdir("/tmp") if p.startswith("fill-")]
