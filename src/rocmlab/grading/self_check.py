"""``rocmlab check NOTEBOOK``: a learner's self-check, offline, without a gradebook.

Runs the notebook the way the grader would (smoke parameters unless ``--keep-params``, the
lab's time limits when the course is at hand, the same sandboxed execution path), then
prints each visible test's result and message and the visible score. When a cell failed
before a test did, it names that first failed cell, says whether it is the learner's answer, a
cell the learner added or a course cell (which the learner did not write), and how to fix it:
a test failing with ``NameError`` is usually the echo of that earlier failure. The model cache
is checked for readability before anything runs, as ``rocmlab grade`` does; so is the sandbox:
a lab whose ranks need loopback TCP is not run on a backend that gives none (Landlock), and the
learner is told why in the notebook's language. What the lab needs comes from its lab.toml, or, for
a notebook checked alone (no course at hand), from the notebook's metadata, as its cached assets do. Exit 0 when every visible test passed, 1 when one
failed or the check could not run, 2 on bad input.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ..course.catalog import LANGUAGES, LOOPBACK_TCP, SMOKE, Lab, Requires
from ..course.course import Course
from ..course.notebooks import solution_notebook, write_notebook
from ..course.parameters import INJECTED, notebook_parameters
from ..course.source import CACHED_ASSETS
from ..errors import ExitCode, InputError
from ..execution.papermill_engine import TIMEOUT_ENAME
from ..sandbox.limits import Sandbox, choose_backend, is_root
from ..sandbox.runs import Limits
from .cells import grading, mark_unrun_tests, shown_message
from .preflight import (
    check_adapter_cache,
    check_learner_sandbox_gives,
    check_model_cache,
    course_view,
    model_cache,
    sandbox_env,
)
from .submissions import read_notebook, safe_text

DEFAULT_TIMEOUT_S = 1800
COURSE_CELL_ID = re.compile(r"cell-\d+")  # the ids rocmlab build gives the lab's own cells


OPTIONAL = "-stretch-"  # in a test cell's grade_id: an optional exercise, scored apart from the core


def is_optional(grade_id: str) -> bool:
    """An optional (stretch) exercise's test cell: labelled optional and scored apart from the core."""
    return OPTIONAL in grade_id


@dataclass
class VisibleTest:
    grade_id: str
    points: float
    passed: bool
    message: str

    @property
    def optional(self) -> bool:
        return is_optional(self.grade_id)


@dataclass
class FirstError:
    """The first cell that failed, as the learner sees the notebook."""

    position: int  # 1-based, counting every cell the learner has
    owner: str  # "test", "answer", "added", "course", "course-edited"
    message: str
    hint: str

    def describe(self) -> str:
        whose = {
            "answer": "your answer",
            "added": "a cell you added",
            "course": "a course cell, not your code",
            "course-edited": "a course cell you edited",
        }[self.owner]
        return f"first error: cell {self.position} ({whose}): {self.message}\n      how to fix: {self.hint}"


HINTS = (
    (
        ("PermissionError", "CacheError", "model cache"),
        "the check cannot read a file the lab needs, often the model cache: run `rocmlab assets build-model "
        "--force` (it builds the cache readable by everyone) or ask your instructor to fix its permissions",
    ),
    (
        ("ModuleNotFoundError", "ImportError"),
        "a package the lab needs is missing from this Python: run the check with the course's Python or kernel",
    ),
    (("FileNotFoundError",), "a file the lab needs is missing: keep the lab's data/ folder beside your notebook"),
    (
        (TIMEOUT_ENAME,),
        "the cell ran past the lab's time limit: if it is a course cell, the machine was probably busy; "
        "run the check again when it is idle (a loop of your own that never ends looks the same)",
    ),
)


def _owner(cell, course: dict[str, str] | None) -> str:
    meta = grading(cell)
    if meta.get("grade"):
        return "test"
    if meta.get("solution"):
        return "answer"
    cell_id = cell.get("id", "")
    if course is not None:
        if cell_id not in course:
            return "added"
        return "course" if cell.source.strip() == course[cell_id].strip() else "course-edited"
    return "course" if COURSE_CELL_ID.fullmatch(cell_id) else "added"


def _hint(owner: str, message: str) -> str:
    for needles, hint in HINTS:
        if any(n in message for n in needles):
            return hint
    return {
        "answer": "fix this answer: the tests after it fail because of it",
        "added": "fix or delete this cell: the tests after it fail because of it",
        "course-edited": "put this course cell back as it was (copy it from a fresh copy of the lab)",
    }.get(
        owner,
        "run the notebook from the top (Restart & Run All); if this cell fails there too, "
        "tell your instructor and quote this message",
    )


def first_error(executed, course: dict[str, str] | None, injected_ids: frozenset = frozenset()) -> FirstError | None:
    """The first non-test cell that raised before the first failing test (None: the tests failed on their own).
    Its position counts the cells the learner has: not the ``injected_ids`` (or, without them, any
    injected-parameters cell), which the run added."""
    position = 0
    for cell in executed.cells:
        if _added_by_run(cell, injected_ids):
            continue
        position += 1
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if not errors:
            continue
        owner = _owner(cell, course)
        if owner == "test":
            return None
        message = shown_message(str(errors[0].get("ename", "")), str(errors[0].get("evalue", "")))
        return FirstError(position, owner, message, _hint(owner, message))
    return None


def _added_by_run(cell, injected_ids: frozenset) -> bool:
    if INJECTED not in cell.get("metadata", {}).get("tags", []):
        return False
    return not injected_ids or cell.get("id") not in injected_ids


def notebook_cache_needs(nb) -> Requires:
    """A downloaded notebook's smoke run's cached assets (``metadata.rocmlab.cache_needs``, written
    by ``rocmlab build``), for the preflight where no ``lab.toml`` is at hand; unknown names are ignored."""
    needs = nb.metadata.get("rocmlab", {}).get("cache_needs", [])
    names = {n for n in needs if isinstance(n, str) and n in CACHED_ASSETS} if isinstance(needs, list) else set()
    return Requires(**dict.fromkeys(names, True))


SANDBOX_NEEDS = (LOOPBACK_TCP,)  # what a lab may need of the sandbox (lab.toml's ``needs``)


def notebook_needs(nb) -> tuple[str, ...]:
    """What a notebook checked alone needs of the sandbox (``metadata.rocmlab.needs``, written by
    ``rocmlab build`` from lab.toml's ``needs``); unknown names are ignored."""
    needs = nb.metadata.get("rocmlab", {}).get("needs", [])
    return tuple(n for n in SANDBOX_NEEDS if isinstance(needs, list) and n in needs)


def course_cells(lab: Lab | None, lang: str) -> dict[str, str] | None:
    """The lab's own cells (not answers, not tests) by id, when the course is at hand."""
    if lab is None:
        return None
    nb = solution_notebook(lab, lang if lang in LANGUAGES else "en")
    return {c.get("id", ""): c.source for c in nb.cells if c.cell_type == "code" and not grading(c)}


def read_learner_notebook(path: Path):
    try:
        nb = read_notebook(path)  # the grader's own checks: size, no symbolic link, well-formed cells
    except FileNotFoundError:
        raise InputError(f"{path}: no such notebook") from None
    except Exception as exc:  # noqa: BLE001 (any parse failure is the learner's input)
        raise InputError(f"{safe_text(path)}: not a readable Jupyter notebook: {str(exc)[:200]}") from None
    tests = [c for c in nb.cells if grading(c).get("grade")]
    if not tests:
        raise InputError(
            f"{path}: no graded test cell (cells with nbgrader metadata grade=true): is this a rocmlab lab notebook?"
        )
    return nb


def find_lab(nb, course: Course | None) -> Lab | None:
    """The notebook's lab in the course, when there is one (for its profiles): a learner's notebook
    is checked without it."""
    lab_id = nb.metadata.get("rocmlab", {}).get("id")
    if not lab_id or course is None:
        return None
    try:
        return course.lab(lab_id)
    except InputError:  # no solutions/ in it, or another of its labs is broken: check without lab.toml
        return None


def prepare(nb, keep_params: bool):
    nb.cells = [c for c in nb.cells if keep_params or INJECTED not in c.metadata.get("tags", [])]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def _sandbox(course: Course | None, keep_params: bool, backend: str) -> Sandbox:
    """The grader's sandbox: the course root (when there is one) and the home folder hidden."""
    root = course.root if course else None
    hide, expose = course_view(root) if root else ([Path.home()], [model_cache()])
    limits = Limits(memory_mb=0) if keep_params else Limits()
    return Sandbox(limits, hide=hide, expose=expose, slots=1, env=sandbox_env(root), backend=backend)


def run_check(
    path: Path, keep_params: bool = False, course: Course | None = None
) -> tuple[list[VisibleTest], str, FirstError | None]:
    nb = read_learner_notebook(path)
    lab = find_lab(nb, course)
    params, timeout_s, cell_timeout_s, requires = {}, DEFAULT_TIMEOUT_S, DEFAULT_TIMEOUT_S, Requires()
    if lab is not None:
        smoke = lab.profile(SMOKE)
        timeout_s, cell_timeout_s = smoke.timeout_s, smoke.cell_timeout_s
        if not keep_params:
            params, requires = smoke.parameters, smoke.requires
    elif not keep_params:
        requires = notebook_cache_needs(nb)
    lang = nb.metadata.get("rocmlab", {}).get("lang", "en")
    backend = choose_backend(None)
    lab_id = lab.id if lab is not None else str(nb.metadata.get("rocmlab", {}).get("id", path.stem))
    check_learner_sandbox_gives(lab_id, lab.needs if lab is not None else notebook_needs(nb), backend, lang)
    own = notebook_parameters(nb)  # what the notebook runs with where no profile's parameters replace them
    check_model_cache({**own, **params}, other_user=is_root())
    check_adapter_cache(requires, other_user=is_root())
    prepared = prepare(nb, keep_params)
    kept_injected = frozenset(c.get("id") for c in prepared.cells if INJECTED in c.metadata.get("tags", []))
    # the notebook's own (maybe GPU) parameters: no address-space limit, GPU runtimes reserve large ranges
    sandbox = _sandbox(course, keep_params, backend)
    run = sandbox.new_run(0, cell_timeout_s)
    try:
        data = path.parent / "data"
        if data.is_dir():
            shutil.copytree(data, run.work / "data")
        elif lab is not None and lab.data_dir.is_dir():
            shutil.copytree(lab.data_dir, run.work / "data")
        source = run.private / "input.ipynb"
        try:
            write_notebook(prepared, source)
        except Exception as exc:  # noqa: BLE001 (nbformat's schema validation)
            raise InputError(f"{path}: not a valid Jupyter notebook: {str(exc).splitlines()[0][:300]}") from None
        executed, outcome = run.execute(source, run.private / "output" / path.name, params, cell_timeout_s, timeout_s)
        executed = executed or prepared
    finally:
        run.cleanup()
        sandbox.close()
    mark_unrun_tests(executed)
    problem = outcome.reason if outcome.status in ("timeout", "crashed") else ""
    return visible_results(executed), problem, first_error(executed, course_cells(lab, lang), kept_injected)


def visible_results(executed) -> list[VisibleTest]:
    results = []
    for cell in executed.cells:
        meta = grading(cell)
        if not meta.get("grade"):
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        stderr = [o for o in cell.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stderr"]
        failed = bool(errors or stderr)
        message = ""
        if errors:
            message = f"{errors[0].get('ename', '')}: {errors[0].get('evalue', '')}".strip()[:1000]
        elif stderr:
            message = (
                "wrote to stderr (the grader counts that as a failure): " + "".join(stderr[0].get("text", ""))[:300]
            )
        results.append(VisibleTest(meta["grade_id"], float(meta.get("points", 0)), not failed, message))
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "A learner's offline self-check: run the notebook as the grader would (smoke parameters, the lab's "
        "time limits, sandboxed) and print each visible test's result and the visible score."
    )
    parser.add_argument("notebook", metavar="NOTEBOOK", help="your lab notebook (.ipynb)")
    parser.add_argument(
        "--keep-params",
        action="store_true",
        help="run with the notebook's own parameter values instead of the smoke profile's",
    )


def _score(tests: list[VisibleTest]) -> str:
    return f"{sum(t.points for t in tests if t.passed):g} / {sum(t.points for t in tests):g}"


def needs_course(options: dict) -> bool:
    """Never: a learner checks her notebook anywhere; in a course, its lab's smoke profile applies."""
    return False


def main(*, notebook: str, course: Course | None = None, keep_params: bool = False) -> int:
    """Exit 0 when every visible test passed, 1 when one failed (2, raised: bad input)."""
    path = Path(notebook).absolute()  # not resolved: a symbolic link is refused, as grading does
    tests, problem, first = run_check(path, keep_params, course)
    for test in tests:
        verdict = "PASS" if test.passed else "FAIL"
        print(
            f"{verdict}  {test.grade_id:<32} {test.points:g} pt{'s' if test.points != 1 else ''}"
            + (" (optional)" if test.optional else "")
            + (f"\n      {test.message}" if test.message else "")
        )
    core = [t for t in tests if not t.optional]
    optional = [t for t in tests if t.optional]
    if first is not None and not all(t.passed for t in tests):
        print(first.describe())
    if problem:
        print(f"note: {problem}", file=sys.stderr)
    print(
        f"visible score: {_score(core)}"
        + (f", optional exercises {_score(optional)} (scored apart from the core)" if optional else "")
        + " (the grade comes from the hidden checks, run when the lab is graded: each rule the text states, "
        "on inputs of your own)"
    )
    return ExitCode.OK if tests and all(t.passed for t in tests) else ExitCode.FAILED
