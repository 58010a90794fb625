"""``rocmlab build --verify``: every test cell and every hidden check passes on the solution and
fails on the student version.

Both notebooks run in the smoke profile, each followed by the lab's hidden checks in the trusted
harness (``rocmlab.harness``); the student version runs with errors allowed so that every test
cell is reached. A test or check that passes on the empty student version cannot tell a right
answer from no answer: that is a build error.
"""

from __future__ import annotations

import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..course.catalog import SMOKE, Lab
from ..course.notebooks import solution_notebook
from ..errors import ExitCode
from ..execution.outcome import Outcome
from ..execution.run import Target, run_lab
from ..execution.worker import parallel_map
from ..grading.cells import cell_points
from ..harness import lab_checks
from .assignments import render_lab


@dataclass
class TestVerdict:
    grade_id: str
    on_solution: str  # "pass" | "fail" | "not run"
    on_student: str


@dataclass
class Verification:
    lab: str
    tests: list[TestVerdict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _verdicts(outcome: Outcome | None) -> dict[str, str]:
    """Each visible test cell's verdict (``grade_id``) and each hidden check's (``grade_id:name``)."""
    if outcome is None:
        return {}
    verdicts = {
        c["grade_id"]: ("not run" if not c["executed"] else "fail" if c["error"] else "pass")
        for c in outcome.cells
        if c["graded"]
    }
    for item in (outcome.harness or {}).get("checks", []):
        verdicts[f"{item['grade_id']}:{item['name']}"] = "pass" if item["passed"] else "fail"
    return verdicts


def judge(lab_id: str, solution: Outcome | None, solution_reason: str, student: Outcome | None) -> Verification:
    result = Verification(lab_id)
    if solution is None or solution.status != "passed":
        result.problems.append(f"the solution notebook did not pass: {solution_reason or 'skipped'}")
    on_solution, on_student = _verdicts(solution), _verdicts(student)
    if not on_solution and not on_student:
        result.problems.append("no graded test cell found")
    for grade_id in dict.fromkeys([*on_solution, *on_student]):
        verdict = TestVerdict(grade_id, on_solution.get(grade_id, "not run"), on_student.get(grade_id, "not run"))
        result.tests.append(verdict)
        if verdict.on_solution != "pass":
            result.problems.append(f"{grade_id}: expected to pass on the solution, it did {verdict.on_solution!r}")
        if verdict.on_student == "pass":
            result.problems.append(
                f"{grade_id}: passes on the empty student version, so it cannot tell a right answer from none"
            )
        elif verdict.on_student == "not run":
            result.problems.append(f"{grade_id}: never ran on the student version (an earlier cell hung or crashed)")
    return result


def verify_lab(root: Path, lab: Lab, target: Target, out: Path, lang: str = "en") -> Verification:
    lab_checks(lab.checks, cell_points(solution_notebook(lab, lang)))
    with tempfile.TemporaryDirectory(prefix="rocmlab-verify-") as tmp:
        student_nb = render_lab(root, lab, lang, Path(tmp) / lab.id)
        with ThreadPoolExecutor(max_workers=2) as pool:
            sol = pool.submit(run_lab, root, lab, SMOKE, target, out / "solution", lang=lang)
            stu = pool.submit(
                run_lab,
                root,
                lab,
                SMOKE,
                target,
                out / "student",
                lang=lang,
                student=True,
                allow_errors=True,
                notebook=student_nb,
            )
            (sol_record, sol_outcome), (_, stu_outcome) = sol.result(), stu.result()
    return judge(lab.id, sol_outcome, sol_record.reason, stu_outcome)


def verify_labs(
    root: Path, labs: list[Lab], target: Target, out: Path, jobs: int = 1, progress=print
) -> list[Verification]:
    def one(lab: Lab) -> Verification:
        progress(f"verify {lab.id}")
        result = verify_lab(root, lab, target, out)
        progress(f"verify {lab.id}: {'ok' if result.ok else 'FAILED'} ({len(result.tests)} graded tests)")
        return result

    return parallel_map(one, labs, jobs)


def verify_command(root: Path, labs: list[Lab], out: Path, jobs: int) -> int:
    """``rocmlab build --verify``: print each graded test's verdict; exit 1 when a lab fails."""
    from ..execution.run import local_target

    results = verify_labs(root, labs, local_target(), out, jobs=jobs, progress=lambda msg: print(msg, file=sys.stderr))
    for result in results:
        for test in result.tests:
            print(f"{result.lab:<28} {test.grade_id:<32} solution: {test.on_solution:<8} student: {test.on_student}")
        for problem in result.problems:
            print(f"{result.lab}: ERROR: {problem}")
    bad = [r.lab for r in results if not r.ok]
    if bad:
        print(f"verify failed for {', '.join(bad)} (executed notebooks under {out})", file=sys.stderr)
        return ExitCode.FAILED
    print(f"verified {len(results)} lab(s): every graded test passes on the solution and fails on the student version")
    return ExitCode.OK
