"""Grading a class: each submission validated, restored, executed in the sandbox, then scored by
nbgrader's autograde; the main thread alone writes the gradebook and the outputs."""

from __future__ import annotations

import ast
import contextlib
import os
import queue
import secrets
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .. import python_ast
from ..course.catalog import HIDDEN_DATA, LANGUAGES, SMOKE, Lab, Profile
from ..course.notebooks import solution_notebook, write_notebook
from ..errors import CommandFailed
from ..execution.results import write_json_atomic
from ..harness import harness_options, lab_checks
from ..sandbox.limits import Sandbox, choose_backend, is_root
from ..sandbox.runs import Limits
from .cells import cell_points, check_results, grading, read_flags, restore_cells, score_tests
from .feedback import feedback_html
from .gradebook import Course, safe_url
from .nbgrader_compat import shared_gradebook_engines
from .preflight import (
    check_adapter_cache,
    check_model_cache,
    check_sandbox_gives,
    course_view,
    no_sandbox,
    sandbox_env,
)
from .reference import needs_reference, slot_reference
from .self_check import is_optional
from .submissions import (
    FLAGS,
    GradedTest,
    StudentResult,
    Submission,
    copy_learner_files,
    load_submission,
    safe_text,
    valid_id,
)


@dataclass
class Plan:
    root: Path
    lab: Lab
    profile: Profile
    sandbox: Sandbox
    sources: dict  # lang -> solution notebook
    checks: list  # the lab's hidden checks (rocmlab.harness.Check), in the trusted harness
    seeds: dict = field(default_factory=dict)  # learner -> the seed of an earlier grading (a regrade)
    unstarted: int = 0  # submissions no job has begun yet: kernels are started ahead for them only
    references: dict = field(default_factory=dict)  # slot -> its reference kernel's options (.reference)
    ahead: bool = False  # a kernel is started ahead for a submission yet to come too (the live worker)


def execute_submission(plan: Plan, nb, result: StudentResult, slot: int):
    """Restore, execute in the sandbox, then let the harness check the answers in the kernel;
    returns the executed notebook with each test cell's score from the harness."""
    lab, profile = plan.lab, plan.profile
    prepared, notes = restore_cells(nb, plan.sources[result.lang])
    for note in notes:
        result.flag("tampered", note)
    result.seed = plan.seeds.get(result.student, secrets.randbelow(2**31))
    run = plan.sandbox.new_run(slot, profile.cell_timeout_s, runs_left=None if plan.ahead else plan.unstarted)
    try:
        copy_learner_files(Path(result.file), lab, run.work)
        if lab.data_dir.is_dir():
            shutil.copytree(
                lab.data_dir, run.work / "data", dirs_exist_ok=True, ignore=shutil.ignore_patterns(HIDDEN_DATA)
            )
        source = run.private / "input" / f"{lab.id}.ipynb"
        output = run.private / "output" / f"{lab.id}.ipynb"
        write_notebook(prepared, source)
        executed, outcome = run.execute(
            source,
            output,
            profile.parameters,
            profile.cell_timeout_s,
            profile.timeout_s,
            harness=harness_options(
                lab.checks,
                result.seed,
                output.with_suffix(".checks.json"),
                profile.cell_timeout_s,
                profile.parameters,
                slot_reference(plan, slot),
            ),
        )
        executed = executed or prepared
    finally:
        run.cleanup()
    read_flags(executed, outcome, result)
    result.cells = [cell for cell in outcome.cells if cell["graded"] or cell["error"]]
    result.checks = check_results(outcome.harness, plan.checks, f"no check ran: {outcome.reason or outcome.status}")
    score_tests(executed, result.checks, result.lang)
    return executed


def lab_imports(nb) -> list[str]:
    """The top-level modules the lab's own code cells import (its heavy ones are loaded ahead)."""
    names = set()
    for cell in nb.cells:
        if cell.cell_type != "code" or grading(cell).get("solution"):
            continue
        try:
            tree = python_ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return sorted(names)


def fill_tests(plan: Plan, result: StudentResult, grades: dict) -> None:
    """Each test cell's score from the gradebook, with the rules its checks found broken."""
    for grade_id, max_points in cell_points(plan.sources[result.lang]).items():
        points, max_points = grades.get(grade_id, (0.0, max_points))
        test = GradedTest(grade_id, float(max_points), float(points or 0.0))
        test.passed = test.points >= test.max_points
        test.rules = [
            {
                **{k: r[k] for k in ("name", "rule", "points", "max_points", "passed")},
                "detail": r.get("detail", ""),
                "grading_error": bool(r.get("error")),
            }
            for r in result.checks
            if r["grade_id"] == grade_id
        ]
        test.message = "; ".join(
            r["rule"][result.lang] for r in test.rules if not r["passed"] and not r["grading_error"]
        )
        result.tests.append(test)


def grade_class(
    root: Path,
    lab: Lab,
    submissions: list[Submission],
    out: Path,
    *,
    progress=print,
    seeds: dict | None = None,
    extra_hidden: list[Path] = (),
    **options,
) -> list[StudentResult]:
    """``rocmlab grade``: the class graded by one ClassGrader, which hides the submissions' folder
    from every kernel; the gradebook, feedback, grades.csv and summary.json written into ``out``."""
    hidden = list(extra_hidden)
    if submissions:
        hidden.append(Path(os.path.commonpath([os.path.abspath(os.path.dirname(s.path)) for s in submissions])))
    with ClassGrader(root, lab, out, extra_hidden=hidden, **options) as grader:
        results = grader.grade(submissions, seeds, progress)
        write_outputs(lab, grader.plan.profile, grader.course, results, out, grader.sandbox.isolation)
    return results


class ClassGrader:
    """One lab's grading, opened once and used for a class or for one learner at a time (the live
    worker): the lab's solution notebooks and parsed checks, the sandbox (each slot's worker,
    zygote and a kernel started ahead), the gradebook in ``out/course``, and nbgrader's shared
    gradebook engines. Every ``grade`` call runs each learner's notebook in a run of its own: its
    own kernel (forked or started), folders and tmpfs, under the other grader user of its slot than
    the run before; only the calling thread writes the gradebook. Close it (or use it as a context
    manager); a grading that raises closes it, as its runs may be half done.

    ``extra_hidden``: more folders covered in every kernel; a submission must lie below one of the
    hidden folders (``covers``), as other learners' files lie beside it. ``ahead``: keep a kernel
    started ahead for a submission that has not come yet (the live worker) rather than only for the
    submissions of the call."""

    def __init__(
        self,
        root: Path,
        lab: Lab,
        out: Path,
        *,
        profile_name: str = SMOKE,
        jobs: int = 1,
        db_url: str | None = None,
        limits: Limits | None = None,
        extra_hidden: list[Path] = (),
        unsafe: bool = False,
        ahead: bool = False,
    ):
        profile = lab.profile(profile_name)
        backend = choose_backend(None)
        if backend == "none" and not unsafe:
            raise CommandFailed(f"{no_sandbox('the gradebook and every submission')}; --unsafe grades anyway")
        check_sandbox_gives(lab, backend)
        check_model_cache(profile.parameters, other_user=is_root())
        check_adapter_cache(profile.requires, other_user=is_root())
        out.mkdir(parents=True, exist_ok=True)
        sources = {lang: solution_notebook(lab, lang) for lang in LANGUAGES}
        checks = lab_checks(lab.checks, cell_points(sources["en"]))
        hidden, expose = course_view(root, out, *extra_hidden)
        if db_url and db_url.startswith("sqlite:///"):
            hidden.append(Path(db_url[len("sqlite:///") :]).parent)
        self.hidden = [Path(p).resolve() for p in hidden]
        self.jobs = max(1, jobs)
        self._open = contextlib.ExitStack()
        self._open.enter_context(shared_gradebook_engines())
        try:
            self.sandbox = self._open.enter_context(
                contextlib.closing(
                    Sandbox(
                        limits,
                        hide=hidden,
                        expose=expose,
                        slots=self.jobs,
                        backend=backend,
                        env=sandbox_env(root),
                        prestart=True,
                        preimport=lab_imports(sources["en"]),
                        reference=needs_reference(checks),
                    )
                )
            )
            # the sandbox's workers start meanwhile
            self.course = Course(root, lab, out / "course", db_url)
            self.course.create_assignment(sources["en"])
        except BaseException:
            self._open.close()
            raise
        self.plan = Plan(root, lab, profile, self.sandbox, sources, checks, ahead=ahead)
        self.closed = self._said_no_cgroup = False

    def __enter__(self) -> ClassGrader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def covers(self, path: Path) -> bool:
        """Whether ``path`` lies below a folder hidden from every kernel of this grader."""
        path = Path(path).resolve()
        return any(path == h or h in path.parents for h in self.hidden)

    @property
    def broken(self) -> bool:
        """Closed, or a slot's zygote has ended (its kernels would start the slow way from then on)."""
        return self.closed or any(not server.alive for server in self.sandbox.fork_servers)

    def close(self) -> None:
        """End every kernel, worker and zygote, give the grader users back, close the gradebook's engines."""
        self.closed = True
        self._open.close()

    def grade(
        self, submissions: list[Submission], seeds: dict | None = None, progress=print, *, ahead: bool | None = None
    ) -> list[StudentResult]:
        """Each submission run in a job slot, the calling thread recording the results in the
        gradebook as they come; ``seeds``: learner -> the seed of an earlier grading; ``ahead``:
        whether a submission is known to come after these (None: as the grader was opened), so
        that a kernel is started ahead for it."""
        if self.closed:
            raise RuntimeError(f"the grader of {self.plan.lab.id} is closed")
        self.plan.seeds = dict(seeds or {})
        if ahead is not None:
            self.plan.ahead = ahead
        if self.sandbox.backend == "none":
            progress(
                "warning: --unsafe: no sandbox: no network, PID or mount isolation"
                + ("" if self.sandbox.switch_user else "; kernels run as this user")
                + "; time, memory, process and output limits still apply"
            )
        if self.sandbox.no_cgroup and not self._said_no_cgroup:  # once per grader (the live worker's: many calls)
            progress(f"note: {self.sandbox.no_cgroup}")
            self._said_no_cgroup = True
        python_ast.guard_threads()  # the job slots' threads format learners' exceptions (traceback parses)
        pool = ThreadPoolExecutor(max_workers=self.jobs)
        try:
            return grade_in_sandbox(self.plan, self.course, submissions, self.jobs, pool, progress)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            self.close()  # ends the kernels of runs still going, so their workers return at once
            raise
        finally:
            pool.shutdown(wait=True)


def grade_in_sandbox(
    plan: Plan, course, submissions: list[Submission], jobs: int, pool, progress
) -> list[StudentResult]:
    """Each submission run in a job slot of ``pool``, the calling thread recording the results as they come."""
    lab, sources = plan.lab, plan.sources
    slots: queue.Queue = queue.Queue()
    for slot in range(max(1, jobs)):
        slots.put(slot)
    plan.unstarted, begun = len(submissions), threading.Lock()

    def run_one(sub: Submission):
        with begun:
            plan.unstarted -= 1
        result = StudentResult(safe_text(sub.student), safe_text(sub.path))
        started = time.monotonic()
        nb = load_submission(sub, lab, result)
        executed = None
        if nb is not None:
            slot = slots.get()
            try:
                executed = execute_submission(plan, nb, result, slot)
            except Exception as exc:  # noqa: BLE001 (one learner's odd notebook never stops the class)
                result.status, executed = "invalid", None
                result.flag("invalid", f"could not be prepared or run: {type(exc).__name__}: {str(exc)[:300]}")
            finally:
                slots.put(slot)
        result.duration_s = round(time.monotonic() - started, 2)
        return result, executed

    results = []
    futures = [pool.submit(run_one, sub) for sub in submissions]
    for future in as_completed(futures):
        result, executed = future.result()
        if valid_id(result.student):  # an invalid id names no gradebook row and no folder
            try:
                course.record(result.student, executed if result.status == "graded" else None)
            except RuntimeError as exc:  # nbgrader refused this notebook: zero it, say why, go on
                result.status, executed = "invalid", None
                result.flag("invalid", str(exc)[:500])
                course.record(result.student, None)
            result.score, result.max_score, grades = course.scores(result.student)
        else:
            grades = {}
            result.max_score = sum(p for g, p in cell_points(sources["en"]).items() if not is_optional(g))
        fill_tests(plan, result, grades)
        results.append(result)
        progress(
            f"graded {result.student:<20} {result.score:g}/{result.max_score:g} "
            f"{','.join(result.flags)} ({result.duration_s:.1f}s)"
        )
        for error in grading_errors([result]):
            progress(f"grading error {error['student']}: {error['error']}")
    return sorted(results, key=lambda r: r.student)


def grading_errors(results: list[StudentResult]) -> list[dict]:
    """The checks that failed themselves (``harness.GradingError``), per learner: the grader's
    faults, for the instructor to fix and regrade; no learner lost a rule to them."""
    return summary_grading_errors([{"student": r.student, "checks": r.checks} for r in results])


def summary_grading_errors(students: list[dict]) -> list[dict]:
    """``grading_errors`` of the learners' entries of a ``summary.json`` (a merge of shards)."""
    return [
        {"student": entry["student"], "grade_id": c["grade_id"], "check": c["name"], "error": c["error"]}
        for entry in students
        for c in entry.get("checks") or []
        if c.get("error")
    ]


def write_outputs(
    lab: Lab, profile: Profile, course: Course, results: list[StudentResult], out: Path, isolation: dict
) -> None:
    for result in results:
        if not valid_id(result.student):
            continue
        path = out / "feedback" / result.student / f"{lab.id}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(feedback_html(lab, result), encoding="utf-8")
    course.export_csv(out / "grades.csv")
    summary = {
        "lab": lab.id,
        "version": lab.version,
        "profile": profile.name,
        "graded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "gradebook": safe_url(course.db_url),
        "sandbox": isolation,
        "students": [asdict(r) for r in results],
        "flag_counts": {f: sum(f in r.flags for r in results) for f in FLAGS},
        "grading_errors": grading_errors(results),
    }
    write_json_atomic(out / "summary.json", summary)
