"""Where ``rocmlab grade``'s time goes, per learner, for the classes CI's slow suite grades.

Two kinds of class, graded in process with ``rocmlab.grading.grader.grade_class`` (one job):

- ``forgery``: the grading fixture lab's forgery class (tests/fixtures/submissions/classroom.py:
  a blank notebook with each forgery, and a correct one), as tests/grading/test_grade_forgery.py
  grades it on each backend;
- ``labs``: for each lab named (``--labs``, every lab by default), a class of two learners, its
  zh reference solution and its student version, as tests/grading/test_grade_references.py
  grades them.

For each learner it prints the wall time, the score, the flags and the first note (a timeout
says which limit stopped the run), and for each class the total and the sandbox used. Run it
with the interpreter of another checkout (``/work/main/.venv/bin/python benchmarks/...``) for
that checkout's figures: the classes are built from this checkout's fixtures and labs.

    .venv/bin/python benchmarks/grade_references.py [--class forgery|labs] [--labs 01 05 ...]
        [--sandbox BACKEND] [--per-kernel] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "submissions"))

import classroom  # noqa: E402 (after the sys.path setup)

from rocmlab.course.catalog import discover, select  # noqa: E402 (after the sys.path setup)
from rocmlab.course.notebooks import solution_notebook, write_notebook  # noqa: E402 (after the sys.path setup)
from rocmlab.grading import grader  # noqa: E402 (after the sys.path setup)
from rocmlab.grading.submissions import find_submissions  # noqa: E402 (after the sys.path setup)
from rocmlab.sandbox import limits as sandbox  # noqa: E402 (after the sys.path setup)


def forgery_class(work: Path) -> tuple[Path, object]:
    """The fixture lab and its forgery class, written under ``work/submitted``."""
    root = classroom.COURSE
    base = classroom.student_notebook(root, work)
    entries = {**classroom.forgery_class(base), "correct": (classroom.answer(base), 5, set())}
    classroom.write_class(entries, work / "submitted")
    return root, select(discover(root), [classroom.LAB])[0]


def lab_class(lab, work: Path) -> None:
    """The lab's zh reference solution and its built student version, under ``work/submitted``."""
    from rocmlab.build.assignments import render_lab

    write_notebook(solution_notebook(lab, "zh"), work / "submitted" / "reference.ipynb")
    student = render_lab(REPO, lab, "zh", work / "release")
    shutil.copyfile(student, work / "submitted" / "student.ipynb")


def grade(root: Path, lab, work: Path) -> tuple[float, list]:
    started = time.monotonic()
    results = grader.grade_class(
        root, lab, find_submissions(work / "submitted", lab.id), work / "out", jobs=1, progress=lambda _m: None
    )
    return time.monotonic() - started, results


def report(title: str, seconds: float, results: list, backend: str) -> None:
    print(f"{title}: {seconds:.1f} s on {backend}")
    for r in sorted(results, key=lambda r: -r.duration_s):
        note = r.notes[0][:90] if r.notes else ""
        print(f"  {r.student:<20} {r.duration_s:7.1f} s  {r.score:g}/{r.max_score:g}  {','.join(r.flags):<12} {note}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--class", dest="kind", choices=["forgery", "labs"], default="forgery")
    parser.add_argument("--labs", nargs="*", default=[], help="lab ids or their number prefixes (labs: every lab)")
    parser.add_argument("--sandbox", help="a backend other than the best one here (bubblewrap, namespaces, ...)")
    parser.add_argument("--per-kernel", action="store_true", help="no zygote: a kernel started per learner")
    parser.add_argument("--keep", help="grade under this folder and keep it")
    args = parser.parse_args()
    if args.sandbox:
        grader.choose_backend = lambda _isolate: args.sandbox
    if args.per_kernel:
        sandbox.fork_server_applies = lambda *_: False
    backend = (args.sandbox or sandbox.choose_backend(None)) + ("-per-kernel" if args.per_kernel else "")
    top = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rocmlab-bench-refs-"))
    totals = []
    try:
        if args.kind == "forgery":
            work = top / "forgery"
            root, lab = forgery_class(work)
            seconds, results = grade(root, lab, work)
            report(f"forgery class of {lab.id}", seconds, results, backend)
            totals.append(("forgery", seconds))
        else:
            labs = discover(REPO)
            chosen = [lab for lab in labs if not args.labs or any(lab.id.startswith(p) for p in args.labs)]
            for lab in chosen:
                work = top / lab.id
                lab_class(lab, work)
                seconds, results = grade(REPO, lab, work)
                report(f"{lab.id} (reference, student)", seconds, results, backend)
                totals.append((lab.id, seconds))
        print(json.dumps({"backend": backend, "seconds": {name: round(s, 1) for name, s in totals}}))
    finally:
        if not args.keep:
            shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
