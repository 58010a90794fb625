"""A class of hostile submissions graded in one run: each gets the points it earned and a flag,
the others keep their grades, the gradebook stays whole, nothing leaks and nothing is left running.

The process-count limit is proven with a small bound before the fork bomb is ever graded.
"""

import csv
import json
import socket
import threading

import classroom
import nbformat
import pytest

from rocmlab.course.catalog import discover, select
from rocmlab.course.notebooks import solution_notebook, write_notebook
from rocmlab.grading.grader import grade_class
from rocmlab.grading.submissions import find_submissions
from rocmlab.processes import is_root
from rocmlab.sandbox.grader_users import USER_PREFIX
from rocmlab.sandbox.limits import Limits, Sandbox

pytestmark = pytest.mark.slow


def _run_cells(sources, limits, hide=(), timeout_s=60):
    sandbox = Sandbox(limits, hide=list(hide), slots=1)
    run = sandbox.new_run(0, 20)
    try:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
        source = run.private / "in.ipynb"
        nbformat.write(nb, str(source))
        executed, _ = run.execute(source, run.private / "out.ipynb", {}, 20, timeout_s)
        return [
            "".join(o.get("text", "") for o in c.outputs if o.get("output_type") == "stream") for c in executed.cells
        ]
    finally:
        run.cleanup()
        sandbox.close()


@pytest.fixture(scope="module")
def process_limit_holds():
    """A kernel limited to 40 processes (threads count) cannot start 60 sleepers."""
    spawn = (
        "import subprocess\nprocs = []\ntry:\n    for _ in range(60):\n"
        "        procs.append(subprocess.Popen(['sleep', '30']))\nexcept OSError:\n    pass\n"
        "print('started', len(procs))\nfor p in procs:\n    p.kill()"
    )
    out = _run_cells([spawn], Limits(max_processes=40))
    started = int(out[0].split()[-1])
    assert 0 < started < 40, out
    return True


def test_process_limit_holds_with_a_small_bound(process_limit_holds):
    assert process_limit_holds


def test_memory_limit_stops_a_large_allocation():
    allocate = "try:\n    big = bytearray(3 * 2**30)\n    print('allocated')\nexcept MemoryError:\n    print('refused')"
    out = _run_cells([allocate], Limits(memory_mb=2048))
    assert out[0].strip() == "refused"


@pytest.fixture(scope="module")
def listener():
    """A loopback server on the host: the sandboxed kernel must not reach it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.5)
    accepted, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                accepted.append(1)
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join(2)
    server.close()


@pytest.fixture(scope="module")
def graded(tmp_path_factory, listener, process_limit_holds):
    work = tmp_path_factory.mktemp("grade-class")
    root = classroom.COURSE
    lab = select(discover(root), [classroom.LAB])[0]
    base = classroom.student_notebook(root, work)
    out = work / "out"
    secrets = {"solution": lab.source, "gradebook": out / "course" / "gradebook.db"}
    entries = {
        **classroom.regular_class(base),
        **classroom.adversarial_class(base, secrets, listener[0]),
        **classroom.tampering_class(base),
    }
    classroom.write_class(entries, work / "submitted")
    solution = work / "instructor" / f"{lab.id}.ipynb"  # a solution notebook the grader could read
    write_notebook(solution_notebook(lab), solution)
    (work / "submitted" / "symlinked.ipynb").symlink_to(solution)
    entries["symlinked"] = (None, 0, {"invalid"})
    results = grade_class(
        root, lab, find_submissions(work / "submitted", lab.id), out, jobs=2, progress=lambda _m: None
    )
    return {r.student: r for r in results}, entries, out, lab


EXPECTED = [
    "correct",
    "partial",
    "wrong",
    "unanswered",
    "loops_forever",
    "allocates_50gb",
    "network",
    "rewrites_test",
    "deletes_test",
    "duplicates_test",
    "monkeypatches",
    "reads_secrets",
    "prints_100mb",
    "invalid_json",
    "other_lab",
    "exits_kernel",
    "old_version",
    *classroom.KERNEL_TAMPERING,
    "symlinked",
]


@pytest.mark.parametrize("name", EXPECTED)
def test_each_submission_gets_what_it_earned_and_its_flags(graded, name):
    results, entries, _, _ = graded
    _, score, flags = entries[name]
    result = results[name]
    assert result.score == score, (
        result.flags,
        result.notes,
        [(t.grade_id, t.points, t.message) for t in result.tests],
    )
    assert set(flags) <= set(result.flags), result.flags
    if not flags:
        assert not {"tampered", "invalid", "wrong_lab"} & set(result.flags)


def test_fork_bomb_is_contained_and_graded(graded):
    results, _, _, _ = graded
    bomb = results["fork_bomb"]
    assert bomb.status == "graded" and 0 <= bomb.score <= 5
    assert results["correct"].score == 5


def test_nothing_is_left_running_as_a_grader_user(graded, left_as_grader_users):
    """Only this run's users: other grading runs on the machine hold users of their own."""
    _, _, out, _ = graded
    own = set(json.loads((out / "summary.json").read_text())["sandbox"]["grader_users"])
    assert own or not is_root()
    assert all(name.startswith(USER_PREFIX) for name in own)
    assert not left_as_grader_users(own)


def test_network_cheat_never_reached_the_host(graded, listener):
    assert listener[1] == []


def test_secrets_were_unreadable(graded):
    _, _, out, _ = graded
    executed = (out / "course" / "autograded" / "reads_secrets" / classroom.LAB / f"{classroom.LAB}.ipynb").read_text()
    assert "blocked" in executed and "LEAK" not in executed.replace("print('LEAK'", "")


def test_gradebook_and_csv_hold_every_learner_once(graded):
    results, _, out, lab = graded
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gb:
        submissions = gb.assignment_submissions(lab.id)
        scores = {s.student.id: s.score for s in submissions}
    assert scores == {name: r.score for name, r in results.items()}
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert sorted(r["student_id"] for r in rows) == sorted(results)
    assert {r["student_id"]: float(r["score"]) for r in rows} == scores


def test_summary_and_feedback_name_each_broken_rule(graded):
    results, _, out, lab = graded
    summary = json.loads((out / "summary.json").read_text())
    assert {s["student"] for s in summary["students"]} == set(results)
    assert summary["flag_counts"]["tampered"] >= 3
    partial = (out / "feedback" / "partial" / f"{lab.id}.html").read_text()
    assert "01-grade-norm" in partial and "✗ normalize returns x divided by its Euclidean norm" in partial
    checks = (lab.folder / "checks.py").read_text()
    for page in (out / "feedback").rglob("*.html"):  # no check code, no detail, no input
        text = page.read_text()
        assert "variant" not in text and "np.testing" not in text and "Mismatch" not in text
        assert not any(line.strip() in text for line in checks.splitlines() if len(line.strip()) > 12)
    details = [c["detail"] for s in summary["students"] if s["student"] == "wrong" for c in s["checks"]]
    assert all(d.startswith("wrong") for d in details)  # the instructor sees why
