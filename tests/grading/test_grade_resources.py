"""A learner's resources are their own (issue 47): as root each kernel writes into its run's own
size-limited tmpfs (work folder, /tmp, /var/tmp, /dev/shm, /run/lock together), apart from the
grader's files, and runs in a cgroup of its own (memory, tmpfs pages included, and processes). A
learner who writes until the disk is full, whose processes together take more memory than its
cgroup holds, or who forks until no process is left, fails alone: the learners graded beside it,
in the same class and the same slots, keep their full marks, and the slots' zygotes live on."""

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
from rocmlab.sandbox.cgroups import KERNELS
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
# Processes that each stay far below RLIMIT_AS but together take more than the kernel's cgroup
# holds (MEMORY_MB + SPACE_MB): the cgroup's OOM killer ends one of them, nothing outside it.
HOG_MB, HOGS = 400, 3
HOG = f"""
import json, subprocess, sys
hold = "import time; hold = b'x' * ({HOG_MB} * 2**20); time.sleep(1)"
children = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range({HOGS})]
print("HOGGED", json.dumps([child.wait() for child in children]))
"""
# Processes until fork fails: the kernel's cgroup (pids.max) and its user's RLIMIT_NPROC stop it
BOMB = """
import errno, os, time
forked, failed = 0, ""
while forked < 100_000:
    try:
        pid = os.fork()
    except OSError as exc:
        failed = errno.errorcode.get(exc.errno, str(exc.errno))
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    forked += 1
print("FORKED", forked, failed)
"""
MEMORY_MB, PROCESSES = 1024, 64


@pytest.fixture(params=["bubblewrap", "bubblewrap-per-kernel", "namespaces"])
def backend(request, monkeypatch):
    name = request.param.removesuffix("-per-kernel")
    if not (bubblewrap_works if name == "bubblewrap" else namespaces_work)():
        pytest.skip(f"{name} does not work here")
    monkeypatch.setattr(grader, "choose_backend", lambda _isolate: name)
    if request.param.endswith("-per-kernel"):
        monkeypatch.setattr(sandbox, "fork_server_applies", lambda *_: False)
    return request.param


def printed_by(out, student: str, lab) -> str:
    executed = nbformat.read(out / "course" / "autograded" / student / lab.id / f"{lab.id}.ipynb", as_version=4)
    return "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))


def test_a_learner_who_fills_its_disk_its_memory_or_its_processes_fails_alone(backend, tmp_path):
    lab = select(discover(classroom.COURSE), [classroom.LAB])[0]
    base = classroom.student_notebook(classroom.COURSE, tmp_path)
    entries = {name: (classroom.answer(base), 5) for name in ("perfect_a", "perfect_b", "perfect_c")}
    entries["fills_disk"] = (classroom.answer(base, classroom.SUM_OK + FILL), 5)
    entries["hogs_memory"] = (classroom.answer(base, classroom.SUM_OK + HOG), 5)
    entries["forks_away"] = (classroom.answer(base, classroom.SUM_OK + BOMB), 5)
    classroom.write_class({k: (nb, s, set()) for k, (nb, s) in entries.items()}, tmp_path / "submitted")
    out = tmp_path / "out"
    results = grade_class(
        classroom.COURSE,
        lab,
        find_submissions(tmp_path / "submitted", lab.id),
        out,
        jobs=2,
        limits=Limits(disk_mb=SPACE_MB, memory_mb=MEMORY_MB, max_processes=PROCESSES),
        progress=lambda _m: None,
    )
    by_name = {r.student: r for r in results}
    for name in ("perfect_a", "perfect_b", "perfect_c"):
        assert by_name[name].status == "graded" and by_name[name].score == 5, (by_name[name].flags, by_name[name].notes)
    filler = by_name["fills_disk"]
    assert filler.status == "graded" and not {"crashed", "invalid"} & set(filler.flags), filler.notes
    report = json.loads(printed_by(out, "fills_disk", lab).split("FILLED ")[1].splitlines()[0])
    assert set(report["failed"].values()) == {"ENOSPC"}, report  # every folder it may write: full
    assert SPACE_MB - 8 <= sum(report["written_mb"].values()) <= SPACE_MB, report  # all of them: one space
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sandbox"]["limits"]["disk_mb"] == SPACE_MB
    assert not [p for p in os.listdir("/tmp") if p.startswith("fill-")]
    assert not [p for p in summary["sandbox"]["problems"] if "fork server ended" in p]  # every zygote lived
    assert not [name for name in KERNELS.names() if name.startswith(f"{os.getpid()}-")]  # no cgroup left
    if not KERNELS.version():
        assert summary["sandbox"]["no_kernel_cgroup"]  # said; the rlimits alone held the others apart
        return
    assert summary["sandbox"]["kernel_cgroup"] == {"memory_max_mb": MEMORY_MB + SPACE_MB, "pids_max": PROCESSES}
    ends = json.loads(printed_by(out, "hogs_memory", lab).split("HOGGED ")[1].splitlines()[0])
    assert -9 in ends and 1 not in ends, ends  # killed by its cgroup's OOM killer; no MemoryError (RLIMIT_AS)
    forked, failed = printed_by(out, "forks_away", lab).split("FORKED ")[1].split()[:2]
    assert int(forked) < PROCESSES and failed == "EAGAIN", (forked, failed)
