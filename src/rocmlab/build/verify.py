"""``rocmlab build --verify``: every test cell and every hidden check passes on the solution and
fails on the student version, and every classic mistake listed in ``checks.py`` (``@mistake``)
fails its check and at least one visible test.

The notebooks run in the smoke profile, each followed by the lab's hidden checks in the trusted
harness (``rocmlab.harness``); the student version runs with errors allowed so that every test
cell is reached. A test or check that passes on the empty student version cannot tell a right
answer from no answer: that is a build error. A mistake runs as the solution notebook with the
mistaken function defined after the right one in its answer cell: a mistake that the visible
tests pass lets a learner's self-check say "all passed" and the grade say otherwise, which is a
build error too, as is one its own check passes.
"""

from __future__ import annotations

import ast
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..course.catalog import SMOKE, Lab
from ..course.notebooks import solution_notebook, write_notebook
from ..errors import ExitCode, LabError
from ..execution.outcome import Outcome
from ..execution.run import Target, run_lab
from ..execution.worker import parallel_map
from ..grading.cells import cell_points, grading
from ..harness import Mistake, lab_checks, mistakes_of
from .assignments import render_lab


@dataclass
class TestVerdict:
    grade_id: str
    on_solution: str  # "pass" | "fail" | "not run"
    on_student: str


@dataclass
class MistakeVerdict:
    check: str  # grade_id:name of the check it is listed on
    rule: str  # the mistake, in English
    check_failed: bool
    visible_failed: list[str]  # the visible test cells it failed


@dataclass
class Verification:
    lab: str
    tests: list[TestVerdict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    mistakes: list[MistakeVerdict] = field(default_factory=list)

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


def defined_functions(code: str) -> list[str]:
    """The functions a mistake's ``code`` defines at its top level."""
    return [n.name for n in ast.parse(code).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def mistake_notebook(lab: Lab, lang: str, item: Mistake):
    """The solution notebook with ``item.code`` appended to the answer cell of each function it
    redefines: the learner's notebook, right but for this mistake. LabError when the code does not
    parse or redefines no answer function."""
    where = f"{lab.checks}: the mistake listed on {item.check}"
    try:
        names = defined_functions(item.code)
    except SyntaxError as exc:
        raise LabError(f"{where}: its code does not parse: {exc}") from None
    if not names:
        raise LabError(f"{where}: its code defines no function")
    nb = solution_notebook(lab, lang)
    answers = [c for c in nb.cells if c.cell_type == "code" and grading(c).get("solution")]
    last = None
    for name in names:
        cell = next((c for c in answers if f"def {name}(" in c.source), None)
        if cell is None:
            raise LabError(f"{where}: {name} is not defined in an answer cell of {lab.source}")
        last = cell
    last.source = (
        last.source.rstrip() + "\n\n\n# a classic mistake (rocmlab build --verify)\n" + item.code.strip() + "\n"
    )
    return nb


def judge_mistake(item: Mistake, grade_id: str, outcome: Outcome | None) -> tuple[MistakeVerdict, list[str]]:
    verdicts = _verdicts(outcome)
    key = f"{grade_id}:{item.check}"
    visible = [k for k, v in verdicts.items() if ":" not in k and v != "pass"]
    verdict = MistakeVerdict(key, item.rule["en"], verdicts.get(key) == "fail", visible)
    problems = []
    if not verdict.check_failed:
        problems.append(f"mistake {item.rule['en']!r}: its check {key} did {verdicts.get(key, 'not run')!r}, not fail")
    if not visible:
        problems.append(
            f"mistake {item.rule['en']!r}: passes every visible test, so a learner's self-check says all passed "
            "and the grade takes points: add a visible case that it fails"
        )
    return verdict, problems


def _run_mistake(root, lab, lang, item, index, target, out, tmp) -> Outcome | None:
    notebook = Path(tmp) / f"mistake-{index}" / f"{lab.id}.ipynb"
    write_notebook(mistake_notebook(lab, lang, item), notebook)
    _, outcome = run_lab(
        root,
        lab,
        SMOKE,
        target,
        out / f"mistake-{index}",
        lang=lang,
        student=True,
        allow_errors=True,
        notebook=notebook,
    )
    return outcome


def verify_lab(
    root: Path, lab: Lab, target: Target, out: Path, lang: str = "en", mistakes: bool = True
) -> Verification:
    checks = lab_checks(lab.checks, cell_points(solution_notebook(lab, lang)))
    listed = mistakes_of(checks) if mistakes else []
    grade_ids = {c.name: c.grade_id for c in checks}
    for item in listed:  # a broken listing is a build error before anything runs
        mistake_notebook(lab, lang, item)
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
            wrong = [
                pool.submit(_run_mistake, root, lab, lang, item, k, target, out, tmp)
                for k, item in enumerate(listed, start=1)
            ]
            (sol_record, sol_outcome), (_, stu_outcome) = sol.result(), stu.result()
            wrong_outcomes = [w.result() for w in wrong]
    result = judge(lab.id, sol_outcome, sol_record.reason, stu_outcome)
    for item, outcome in zip(listed, wrong_outcomes):
        verdict, problems = judge_mistake(item, grade_ids[item.check], outcome)
        result.mistakes.append(verdict)
        result.problems += problems
    return result


def verify_labs(
    root: Path, labs: list[Lab], target: Target, out: Path, jobs: int = 1, progress=print
) -> list[Verification]:
    def one(lab: Lab) -> Verification:
        progress(f"verify {lab.id}")
        result = verify_lab(root, lab, target, out)
        progress(
            f"verify {lab.id}: {'ok' if result.ok else 'FAILED'} "
            f"({len(result.tests)} graded tests, {len(result.mistakes)} listed mistakes)"
        )
        return result

    return parallel_map(one, labs, jobs)


def verify_command(root: Path, labs: list[Lab], out: Path, jobs: int) -> int:
    """``rocmlab build --verify``: print each graded test's verdict; exit 1 when a lab fails."""
    from ..execution.run import local_target

    results = verify_labs(root, labs, local_target(), out, jobs=jobs, progress=lambda msg: print(msg, file=sys.stderr))
    for result in results:
        for test in result.tests:
            print(f"{result.lab:<28} {test.grade_id:<32} solution: {test.on_solution:<8} student: {test.on_student}")
        for item in result.mistakes:
            print(
                f"{result.lab:<28} mistake on {item.check}: check {'fails' if item.check_failed else 'PASSES'}, "
                f"visible tests failed: {', '.join(item.visible_failed) or 'NONE'}\n{'':<28}   ({item.rule})"
            )
        for problem in result.problems:
            print(f"{result.lab}: ERROR: {problem}")
    bad = [r.lab for r in results if not r.ok]
    if bad:
        print(f"verify failed for {', '.join(bad)} (executed notebooks under {out})", file=sys.stderr)
        return ExitCode.FAILED
    print(
        f"verified {len(results)} lab(s): every graded test passes on the solution and fails on the student "
        "version, and every listed mistake fails its check and a visible test"
    )
    return ExitCode.OK
