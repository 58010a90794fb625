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
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import python_ast
from ..course.catalog import Lab
from ..course.notebooks import solution_notebook, write_notebook
from ..errors import ExitCode, LabError
from ..execution.outcome import Outcome
from ..execution.run import judge_checks
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
    sandbox: dict = field(default_factory=dict)  # the grading sandbox (``Sandbox.isolation``)
    scores: dict = field(default_factory=dict)  # learner -> (score, max_score)

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


def judge(
    lab_id: str, solution: Outcome | None, solution_reason: str, student: Outcome | None, with_student: bool = True
) -> Verification:
    """``with_student=False``: only the solution was graded (``verify_lab(student=False)``), so
    nothing is asked of the student version."""
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
        if not with_student:
            continue
        if verdict.on_student == "pass":
            result.problems.append(
                f"{grade_id}: passes on the empty student version, so it cannot tell a right answer from none"
            )
        elif verdict.on_student == "not run":
            result.problems.append(f"{grade_id}: never ran on the student version (an earlier cell hung or crashed)")
    return result


def defined_functions(code: str) -> list[str]:
    """The functions a mistake's ``code`` defines at its top level."""
    return [n.name for n in python_ast.parse(code).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


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


LEARNERS = ("solution", "student")  # the class ``build --verify`` grades, with a "mistake-K" per listed mistake


def write_class(root: Path, lab: Lab, lang: str, listed: list[Mistake], folder: Path, student: bool = True) -> Path:
    """The solution, the built student version (unless not ``student``) and each mistake's
    notebook, as a class of learners under ``folder/submitted``."""
    submitted = folder / "submitted"
    write_notebook(solution_notebook(lab, lang), submitted / "solution.ipynb")
    if student:
        shutil.copyfile(render_lab(root, lab, lang, folder / "release"), submitted / "student.ipynb")
    for k, item in enumerate(listed, start=1):
        write_notebook(mistake_notebook(lab, lang, item), submitted / f"mistake-{k}.ipynb")
    return submitted


def graded_outcome(result) -> Outcome:
    """A graded learner (``StudentResult``) as ``judge`` reads a run: its run's cells, the
    harness's checks, and a status that is "passed" only when it was graded with no flag and no cell raised."""
    status = next((flag for flag in ("timeout", "crashed") if flag in result.flags), "")
    if not status and (result.status != "graded" or result.flags):
        status = "failed"
    outcome = Outcome(status or "passed", result.duration_s, "; ".join(result.notes)[:1000])
    outcome.harness = {"seed": result.seed, "checks": result.checks}
    outcome.cells = result.cells
    raised = [c for c in outcome.cells if c["error"]]
    if outcome.status == "passed" and raised:
        outcome.status = "failed"
        outcome.reason = f"cell {raised[0]['index']}: {raised[0]['error']['ename']}: {raised[0]['error']['evalue']}"
    judge_checks(outcome)
    return outcome


def verify_lab(
    root: Path,
    lab: Lab,
    out: Path,
    lang: str = "en",
    mistakes: bool = True,
    jobs: int | None = None,
    student: bool = True,
) -> Verification:
    """Grade the class of ``write_class`` with ``rocmlab grade``'s own code, sandbox and mounts
    (``grading.grader.grade_class``; without a sandbox here, unsandboxed, as ``Verification.sandbox``
    says), into ``out``; judge what each learner's graded run shows. ``student=False`` grades the
    solution (and the mistakes) without the student version. ``jobs``: the class's job slots; by
    default two, or one where the lab's checks take the reference kernel (``slot_jobs``)."""
    from ..grading.grader import grade_class
    from ..grading.submissions import find_submissions
    from ..sandbox.limits import choose_backend

    checks = lab_checks(lab.checks, cell_points(solution_notebook(lab, lang)))
    jobs = slot_jobs(checks) if jobs is None else jobs
    listed = mistakes_of(checks) if mistakes else []
    grade_ids = {c.name: c.grade_id for c in checks}
    for item in listed:  # a broken listing is a build error before anything runs
        mistake_notebook(lab, lang, item)
    with tempfile.TemporaryDirectory(prefix="rocmlab-verify-") as tmp:
        submitted = write_class(root, lab, lang, listed, Path(tmp), student)
        results = grade_class(
            root,
            lab,
            find_submissions(submitted, lab.id),
            out,
            jobs=jobs,
            progress=lambda _msg: None,
            unsafe=choose_backend(None) == "none",
        )
    graded = {r.student: r for r in results}
    outcomes = {name: graded_outcome(r) for name, r in graded.items()}
    solution = outcomes["solution"]
    result = judge(lab.id, solution, solution.reason, outcomes.get("student"), with_student=student)
    result.sandbox = json.loads((out / "summary.json").read_text(encoding="utf-8")).get("sandbox") or {}
    result.scores = {name: (r.score, r.max_score) for name, r in graded.items()}
    for k, item in enumerate(listed, start=1):
        verdict, problems = judge_mistake(item, grade_ids[item.check], outcomes.get(f"mistake-{k}"))
        result.mistakes.append(verdict)
        result.problems += problems
    return result


def slot_jobs(checks: list) -> int:
    """Job slots for a class of a few learners: two, so that the solution and the student version
    are graded side by side, but one where a check takes the reference kernel: each slot starts its
    own, which runs the whole solution once more (``grading.reference``)."""
    from ..grading.reference import needs_reference

    return 1 if needs_reference(checks) else 2


def verify_labs(root: Path, labs: list[Lab], out: Path, jobs: int = 1, progress=print) -> list[Verification]:
    """One lab after another, each graded as a class on ``jobs`` slots (two graders' sandboxes at
    once in one process ended it silently with status 2 after a build: found 2026-12-06, not yet
    understood). A lab this machine's sandbox cannot grade stops it before the first lab is graded."""
    from ..grading.preflight import check_sandbox_gives
    from ..sandbox.limits import choose_backend

    backend = choose_backend(None)
    for lab in labs:
        check_sandbox_gives(lab, backend)

    def one(lab: Lab) -> Verification:
        progress(f"verify {lab.id}")
        result = verify_lab(root, lab, out / lab.id, jobs=jobs)
        progress(
            f"verify {lab.id}: {'ok' if result.ok else 'FAILED'} "
            f"({len(result.tests)} graded tests, {len(result.mistakes)} listed mistakes; {sandbox_text(result.sandbox)})"
        )
        return result

    return [one(lab) for lab in labs]


def sandbox_text(isolation: dict) -> str:
    """Which sandbox graded the class (``Sandbox.isolation``), in words."""
    backend = isolation.get("backend", "unknown")
    if backend == "none":
        return "sandbox none (no bubblewrap, root or Landlock here): graded unsandboxed, as this user"
    kernels = "kernels forked from a zygote" if isolation.get("forked_kernels") else "a kernel started per learner"
    cgroup = isolation.get("kernel_cgroup")
    if cgroup:
        kernels += f", each in a cgroup of its own ({cgroup['memory_max_mb']} MB, {cgroup['pids_max']} tasks)"
    elif isolation.get("no_kernel_cgroup"):
        kernels += ", no cgroup per kernel"
    return f"sandbox {backend}, {kernels}"


def verify_command(root: Path, labs: list[Lab], out: Path, jobs: int) -> int:
    """``rocmlab build --verify``: print each graded test's verdict; exit 1 when a lab fails."""
    results = verify_labs(root, labs, out, jobs=jobs, progress=lambda msg: print(msg, file=sys.stderr))
    for result in results:
        print(f"{result.lab:<28} graded as `rocmlab grade` grades: {sandbox_text(result.sandbox)}")
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
