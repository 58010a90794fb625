"""Learners who have read the grader's source (rocmlab.harness, rocmlab.lab.answers), graded under
every sandbox backend this machine has. Each attack sits in a notebook whose answers are blank,
and scores what a blank notebook scores, while the harness's record shows that the attack was
in effect when the checks ran. Two more learners try to read what another kernel printed and
what the harness was sent (the checks' source, the seed), and to plant the harness's result."""

import ast
import json

import classroom
import pytest

from rocmlab.assets.cache import cache_root
from rocmlab.course.catalog import discover, select
from rocmlab.grading.grader import grade_class
from rocmlab.grading.submissions import find_submissions

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]

MARK = "ROCMLAB-OTHER-KERNEL-PRINTED-THIS"
WRITER = (
    "import os, sys\n"
    f"print({MARK!r}); sys.stderr.write({MARK!r} + '\\n')\n"
    f"os.write(1, b{MARK!r} + b'\\n'); os.write(2, b{MARK!r} + b'\\n')\n"
)
# What another kernel printed, and what the harness is sent: the checks' source and the seed
NEEDLES = (MARK, "@check(", "rocmlab_check", '"seed"', "probe_timeout_s")
# Everything a kernel could reach that might hold another kernel's output or the harness's
# request: its inherited descriptors, every process's, the temp folders and the sandbox base.
READER = (
    f"MODEL_CACHE = {str(cache_root())!r}\n"
    + f"BACKWARDS = {tuple(n[::-1] for n in NEEDLES)!r}\n"
    + """import glob, importlib.util, os, sys
# written backwards: this cell's own source (in IPython's history and caches) must not match
NEEDLES = [n[::-1].encode() for n in BACKWARDS]
found = []
def look(path):
    # without blocking: a pipe (the kernel's own stdout, which ipykernel captures) may hold nothing
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        text = os.read(fd, 4_000_000)
    except OSError:
        return
    finally:
        os.close(fd)
    for needle in NEEDLES:
        if needle in text:
            found.append((path, needle.decode()))
def parent(pid):
    try:
        with open(f'/proc/{pid}/stat') as fh:
            return int(fh.read().rsplit(')', 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0
def lineage(pid):
    chain = []
    while pid > 1:
        chain.append(pid)
        pid = parent(pid)
    return chain
def named(pid, word):
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as fh:
            return word in fh.read()
    except OSError:
        return False
# This class's processes: everything below its grader (the parent of the slot's papermill worker)
# where the kernel can see more (Landlock: no PID namespace of its own); another test's processes
# on the machine are no part of this class. In a PID namespace of its own the kernel sees only that.
WORKER = next((p for p in lineage(os.getpid()) if named(p, b'entry\\x00worker') or named(p, b'execution.worker')), None)
GRADER = parent(WORKER) if WORKER else None
def ours(pid):
    return GRADER is None or GRADER in lineage(pid)
for path in glob.glob('/proc/*/fd/*') + glob.glob('/proc/*/cmdline') + glob.glob('/proc/*/environ'):
    pid = path.split('/')[2]
    if not pid.isdigit() or ours(int(pid)):
        look(path)
# the interpreter's installation, rocmlab's own package and the course model's cache are public:
# a course cloned (or a cache put) under /tmp would put them in the walk, and they name what the
# needles name (a model's manifest records its seed, quoted as a JSON key)
PACKAGE = os.path.dirname(importlib.util.find_spec('rocmlab').origin)
PUBLIC = tuple(os.path.realpath(p) + os.sep for p in {sys.prefix, sys.base_prefix, PACKAGE, MODEL_CACHE})
for top in ('/tmp', '/var/tmp', '/dev/shm', os.path.expanduser('~'), '/run'):
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not (os.path.realpath(os.path.join(folder, d)) + os.sep).startswith(PUBLIC)]
        for name in files:
            look(os.path.join(folder, name))
planted = []
for folder in glob.glob('/tmp/rocmlab-sandbox-*/**/', recursive=True):
    try:
        with open(os.path.join(folder, 'x.checks.json'), 'w') as fh:
            fh.write('{"checks": []}')
        planted.append(folder)
    except OSError:
        pass
print('FOUND', found)
print('PLANTED', planted)
"""
)


def test_the_readers_own_source_names_no_needle():
    # the reader would find its own cell in IPython's history and report a leak that is not one
    assert [n for n in NEEDLES if n in READER] == []


@pytest.fixture(scope="module")
def graded(tmp_path_factory, grading_backend):
    work = tmp_path_factory.mktemp("forgery")
    root = classroom.COURSE
    lab = select(discover(root), [classroom.LAB])[0]
    base = classroom.student_notebook(root, work)
    blank = classroom.answer(base, "raise NotImplementedError()\n", "raise NotImplementedError()\n")
    entries = {
        **classroom.forgery_class(base),
        "correct": (classroom.answer(base), 5, set()),
        "leak1_prints": (classroom.answer(base, classroom.SUM_OK + WRITER), 5, set()),
        "leak2_reads": (classroom.answer(blank, classroom.SUM_OK + READER, classroom.BLANK_NORM), 2, set()),
    }
    classroom.write_class(entries, work / "submitted")
    out = work / "out"
    # one job: the reader runs in the slot (and zygote) the writer used just before it
    results = grade_class(
        root, lab, find_submissions(work / "submitted", lab.id), out, jobs=1, progress=lambda _m: None
    )
    return {r.student: r for r in results}, entries, out, grading_backend


def _executed(out, student):
    return (out / "course" / "autograded" / student / classroom.LAB / f"{classroom.LAB}.ipynb").read_text()


@pytest.mark.parametrize("name", [*classroom.FORGERIES])
def test_a_forgery_scores_what_a_blank_notebook_scores(graded, name):
    results, entries, _, backend = graded
    result = results[name]
    assert result.status == "graded" and result.score == entries[name][1] == 0, (backend, result.checks)
    details = [c["detail"] for c in result.checks]
    assert all(details), details  # every check failed, each with a reason
    if classroom.FORGERY_SAW[name]:  # the forged answer, not the blank one, reached the harness
        assert all(d.startswith(classroom.FORGERY_SAW[name]) for d in details), (backend, details)
    assert not any("NotImplementedError" in d for d in details) or name == "shadows_builtins", details


def test_the_blank_notebook_and_the_correct_one_score_as_expected(graded):
    results, *_ = graded
    assert results["correct"].score == 5 and results["leak1_prints"].score == 5


def test_no_kernel_reads_another_kernels_output_or_the_harness_input(graded):
    results, _, out, backend = graded
    assert results["leak2_reads"].score == 2
    assert _printed(out, "leak2_reads", "FOUND") == [], backend


def _printed(out, student, label):
    nb = json.loads(_executed(out, student))
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    return ast.literal_eval(next(line for line in text.splitlines() if line.startswith(label))[len(label) :].strip())


def test_no_kernel_can_plant_the_harness_result(graded):
    results, _, out, backend = graded
    planted = _printed(out, "leak2_reads", "PLANTED")
    # only the kernel's own work and socket folders are writable; the harness writes elsewhere
    assert all(p.rstrip("/").rsplit("/", 1)[-1] in ("work", "ipc") or "/work/" in p for p in planted), planted
    assert results["leak2_reads"].score == 2


def test_the_seed_of_each_learner_is_recorded_and_differs(graded):
    results, _, out, _ = graded
    summary = json.loads((out / "summary.json").read_text())
    seeds = [s["seed"] for s in summary["students"]]
    assert len(set(seeds)) == len(seeds) and all(isinstance(s, int) for s in seeds)
    assert {s["student"]: s["seed"] for s in summary["students"]} == {n: r.seed for n, r in results.items()}
