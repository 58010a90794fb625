"""Executing labs in a profile, in parallel, one result record per lab and environment (``command``
is ``rocmlab run``)."""

from __future__ import annotations

import json
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from ..course.catalog import GPU, HIDDEN_DATA, MULTI_GPU, SMOKE, Lab, Profile
from ..course.notebooks import solution_notebook, write_notebook
from ..errors import CommandFailed, InputError, LabError
from ..harness import OWN_KERNEL, harness_options
from .course_assets import asset_builds, needed_assets
from .fingerprint import Fingerprint, fingerprint
from .outcome import Outcome
from .results import Record, RecordError, read_record, write_record
from .schedule import run_by_need
from .worker import Spec, close_all_workers, run_notebook

LOCAL_ENV = "local"


@dataclass
class Target:
    """Where and how labs run: the environment's name, its interpreter and what it has."""

    name: str
    python: str
    fingerprint: Fingerprint

    @property
    def gpus(self) -> int:
        return len(self.fingerprint.gpus)


def local_target() -> Target:
    return Target(LOCAL_ENV, sys.executable, fingerprint())


def env_target(name: str, root: Path | None = None) -> Target:
    """A release-matrix environment of the course at ``root``, created by ``rocmlab env create NAME``."""
    from ..freshness.environments import python_for

    python = str(python_for(name, root))
    proc = subprocess.run([python, "-m", "rocmlab.execution.fingerprint"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise CommandFailed(
            f"environment {name!r}: cannot read its fingerprint with {python}: {proc.stderr.strip()[-500:]}"
        )
    try:
        found = Fingerprint.from_data(
            json.loads(proc.stdout), f"environment {name!r}: {python} -m rocmlab.execution.fingerprint"
        )
    except (json.JSONDecodeError, ValueError) as exc:
        raise CommandFailed(f"environment {name!r}: its fingerprint is not one: {exc}") from None
    return Target(name, python, found)


def choose_profile(lab: Lab, requested: str, gpus: int) -> tuple[Profile | None, str]:
    """The profile to run and, when the lab must be skipped, why."""
    if requested == "auto":
        for name in (MULTI_GPU, GPU):
            profile = lab.profiles.get(name)
            if profile and gpus >= max(profile.requires.gpus, 1):
                return profile, ""
        return lab.profiles[SMOKE], ""
    if requested not in lab.profiles:
        return None, f"lab has no {requested!r} profile"
    profile = lab.profiles[requested]
    if gpus < profile.requires.gpus:
        return None, f"profile {requested} needs {profile.requires.gpus} GPU(s), this environment has {gpus}"
    return profile, ""


class Progress:
    """One line per state change, and a heartbeat naming the labs still running."""

    def __init__(self, total: int, stream=sys.stderr, heartbeat_s: float = 30.0):
        self.total, self.stream, self.heartbeat_s = total, stream, heartbeat_s
        self.started = time.monotonic()
        self.running: dict[str, float] = {}
        self.done = 0
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _say(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f}s] {text}", file=self.stream, flush=True)

    def note(self, key: str, text: str) -> None:
        with self.lock:
            self._say(f"{key}: {text.strip()}")

    def start(self, key: str) -> None:
        with self.lock:
            self.running[key] = time.monotonic()
            self._say(f"start   {key}")

    def finish(self, key: str, status: str, seconds: float, runs: int = 1) -> None:
        with self.lock:
            self.running.pop(key, None)
            self.done += runs
            self._say(f"{status:<7} {key} ({seconds:.1f}s) [{self.done}/{self.total}]")

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            with self.lock:
                if self.running:
                    now = time.monotonic()
                    names = ", ".join(f"{k} {now - t:.0f}s" for k, t in self.running.items())
                    self._say(f"running {names}")

    def close(self) -> None:
        self._stop.set()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _input_notebook(root: Path, lab: Lab, lang: str, student: bool, work: Path) -> Path:
    target = work / f"{lab.id}.input.ipynb"
    if student:
        built = root / "labs" / lang / lab.id / f"{lab.id}.ipynb"
        if not built.is_file():
            raise LabError(f"{built}: missing; run `rocmlab build {lab.id}` first")
        shutil.copyfile(built, target)
    else:
        write_notebook(solution_notebook(lab, lang), target)
    return target


def run_lab(
    root: Path,
    lab: Lab,
    profile_name: str,
    target: Target,
    out: Path,
    *,
    lang: str = "en",
    student: bool = False,
    allow_errors: bool = False,
    notebook: Path | None = None,
    repeat: int = 1,
    on_run=None,
) -> tuple[Record, Outcome | None]:
    """Execute one lab ``repeat`` times and write its record (and executed notebook) under ``out/<env>/``.

    ``notebook`` overrides the input (the solution, or with ``student`` the built student version).
    With ``repeat`` > 1 the record is ``flaky`` when some runs passed and some did not, and keeps
    each run's outcome; the notebook of every run that did not pass is kept as ``<lab>.run<K>.ipynb``.
    ``on_run(k, None)`` is called before run k (1-based) and ``on_run(k, outcome)`` after it.
    Returns the record and the last run's outcome.
    """
    if repeat < 1:
        raise InputError(f"--repeat: expected a positive number, got {repeat}")
    env_dir = out / target.name
    record_path = env_dir / f"{lab.id}.json"
    profile, reason = choose_profile(lab, profile_name, target.gpus)
    started = _now()
    if profile is None:
        record = Record(
            lab.id,
            lab.version,
            profile_name,
            target.name,
            "skipped",
            started,
            reason=reason,
            fingerprint=target.fingerprint,
            student=student,
        )
        write_record(record, record_path)
        return record, None
    _clear_repeat_notebooks(env_dir, lab)
    runs = []
    for k in range(1, repeat + 1):
        if on_run:
            on_run(k, None)
        outcome = _run_once(root, lab, profile, target, env_dir, lang, student, allow_errors, notebook)
        if on_run:
            on_run(k, outcome)
        kept = f"{lab.id}.run{k}.ipynb" if repeat > 1 and outcome.status != "passed" else ""
        if kept:
            shutil.copyfile(env_dir / f"{lab.id}.ipynb", env_dir / kept)
        runs.append((outcome, kept))
    record = _record(lab, profile.name, target, started, runs, student)
    record.checks_sandbox = CHECKS_SANDBOX if lab.checks.is_file() else ""
    write_record(record, record_path)
    return record, runs[-1][0]


def _run_once(root, lab, profile, target, env_dir, lang, student, allow_errors, notebook) -> Outcome:
    # As a learner runs it: the notebook and its data in a folder outside any course repository,
    # no ROCMLAB_ROOT (what the lab needs comes from the rocmlab package or from beside it).
    work = Path(tempfile.mkdtemp(prefix=f"rocmlab-{lab.id}-"))
    if lab.data_dir.is_dir():
        shutil.copytree(lab.data_dir, work / "data", ignore=shutil.ignore_patterns(HIDDEN_DATA))
    spec = Spec(
        input=str(notebook or _input_notebook(root, lab, lang, student, work)),
        output=str(env_dir / f"{lab.id}.ipynb"),
        cwd=str(work),
        parameters=profile.parameters,
        cell_timeout_s=profile.cell_timeout_s,
        timeout_s=profile.timeout_s,
        allow_errors=allow_errors,
        python=target.python,
    )
    if lab.checks.is_file():
        checks_out = env_dir / f".{lab.id}.checks.json"
        seed = secrets.randbelow(2**31)
        # the course's own notebook (solution, student version, a listed mistake): its kernel is
        # its own reference; a learner's is graded against a reference kernel (rocmlab grade)
        spec.engine_options["harness"] = harness_options(
            lab.checks, seed, checks_out, profile.cell_timeout_s, profile.parameters, OWN_KERNEL
        )
    outcome = run_notebook(spec)
    if lab.checks.is_file() and not student:
        judge_checks(outcome)
    if outcome.status == "passed" or allow_errors:
        shutil.rmtree(work, ignore_errors=True)
    else:
        outcome.reason += f" (its working folder is kept: {work})"
    return outcome


def judge_checks(outcome: Outcome) -> None:
    """A solution run passes only when the lab's hidden checks pass on it too."""
    if outcome.status != "passed":
        return
    record = outcome.harness or {"error": "the checks did not run"}
    failed = [c for c in record.get("checks", []) if not c["passed"]]
    if record.get("error") or failed:
        why = record.get("error") or "; ".join(f"{c['name']}: {c.get('error') or c['detail']}" for c in failed[:3])
        outcome.status = "failed"
        outcome.reason = f"hidden checks (seed {record.get('seed')}): {why}"[:1000]


def _clear_repeat_notebooks(env_dir: Path, lab: Lab) -> None:
    for old in env_dir.glob(f"{lab.id}.run*.ipynb"):
        old.unlink()


# rocmlab run executes the course's own notebook (solution or student version) as the user who runs
# it, and the harness asks that notebook's kernel, in the run's own worker (the checks that take
# ``fresh``, after it was shut down, a fresh kernel of the same run: rocmlab.harness.Fresh); grading a learner
# (rocmlab grade, build --verify, the live workers) is sandboxed (rocmlab.sandbox.limits).
CHECKS_SANDBOX = (
    "unsandboxed, as this user, in the notebook's own kernel (a check that takes fresh: in a fresh kernel after it)"
)


def _record(lab: Lab, profile: str, target: Target, started: str, runs: list, student: bool) -> Record:
    """One record for all runs of a lab: the last run's details, the verdict over every run."""
    last, _ = runs[-1]
    statuses = [outcome.status for outcome, _ in runs]
    status = last.status
    if len(runs) > 1 and "passed" in statuses and any(s != "passed" for s in statuses):
        status = "flaky"
    failure = next((o for o, _ in reversed(runs) if o.status != "passed"), None)
    shown = failure if status == "flaky" else last
    return Record(
        lab.id,
        lab.version,
        profile,
        target.name,
        status,
        started,
        duration_s=round(statistics.median(o.duration_s for o, _ in runs), 2),
        reason=shown.reason,
        failing_cell=shown.failing_cell,
        warnings=_unique_warnings(o.warnings for o, _ in runs),
        fingerprint=target.fingerprint,
        notebook=f"{lab.id}.ipynb",
        student=student,
        repeats=[_run_summary(k, o, kept) for k, (o, kept) in enumerate(runs, start=1)] if len(runs) > 1 else [],
    )


def _run_summary(k: int, outcome: Outcome, notebook: str) -> dict:
    return {
        "run": k,
        "status": outcome.status,
        "duration_s": round(outcome.duration_s, 2),
        "reason": outcome.reason,
        "failing_cell": outcome.failing_cell,
        "notebook": notebook,
    }


def _unique_warnings(per_run) -> list[dict]:
    seen, found = set(), []
    for warnings in per_run:
        for w in warnings:
            key = (w.get("category"), w.get("message"), w.get("filename"), w.get("lineno"))
            if key not in seen:
                seen.add(key)
                found.append(w)
    return found


def stages_needed(lab: Lab, profile: str, target: Target, builds: dict) -> int:
    """How many of ``builds`` (in build order) the lab must wait for: up to the last one that the
    profile which would run names in its ``requires``."""
    chosen, _ = choose_profile(lab, profile, target.gpus)
    needed = needed_assets(chosen.requires) if chosen else []
    return max((i + 1 for i, key in enumerate(builds) if key in needed), default=0)


def run_labs(
    root: Path,
    labs: list[Lab],
    profile: str,
    target: Target,
    out: Path,
    *,
    jobs: int = 1,
    lang: str = "en",
    student: bool = False,
    repeat: int = 1,
    stream=sys.stderr,
    builds: dict | None = None,
) -> list[Record]:
    """Run ``labs``, each ``repeat`` times, with up to ``jobs`` labs at once; the records in lab order.

    ``builds``, by asset key in build order (by default an :class:`AssetBuild` in the target's
    interpreter for each course asset the cache lacks: the model, then lab 03's adapter), run one
    after another in one of the ``jobs`` slots while the labs that need none of them run; a lab
    that needs them starts the moment the last one it needs is ready.
    """
    progress = Progress(len(labs) * repeat, stream)
    if any(lab.checks.is_file() for lab in labs):
        progress.note("checks", f"the labs' hidden checks run {CHECKS_SANDBOX} (rocmlab grade sandboxes them)")
    if builds is None:
        builds = asset_builds(target.python, progress.note)
    stopping = Stopping(builds)

    def one(lab: Lab) -> Record:
        def on_run(k: int, outcome: Outcome | None) -> None:
            if outcome is None:
                stopping.refuse_new_runs()
            key = lab.id if repeat == 1 else f"{lab.id} run {k}/{repeat}"
            if outcome is None:
                progress.start(key)
            else:
                progress.finish(key, outcome.status, outcome.duration_s)

        record, outcome = run_lab(
            root, lab, profile, target, out, lang=lang, student=student, repeat=repeat, on_run=on_run
        )
        if outcome is None:
            progress.finish(lab.id, record.status, 0.0, runs=repeat)
        return record

    def unmet(lab: Lab, error: Exception) -> Record:
        reason = f"needs a course asset that could not be built: {error}"
        record = Record(
            lab.id,
            lab.version,
            profile,
            target.name,
            "failed",
            _now(),
            reason=reason[:1000],
            fingerprint=target.fingerprint,
            student=student,
        )
        write_record(record, out / target.name / f"{lab.id}.json")
        progress.finish(lab.id, "failed", 0.0, runs=repeat)
        return record

    order = longest_first(labs, profile, out / target.name)  # a lab that waits for no build starts in this order
    try:
        records = run_by_need(
            one,
            order,
            jobs,
            needs=lambda lab: stages_needed(lab, profile, target, builds),
            stages=[partial(_prepare, key, build, progress) for key, build in builds.items()],
            unmet=unmet,
            stop=stopping.start,
        )
    finally:
        stopping.done.set()
        progress.close()
    by_lab = {record.lab: record for record in records}
    return [by_lab[lab.id] for lab in labs]


def longest_first(labs: list[Lab], profile: str, env_dir: Path) -> list[Lab]:
    """The order to start the labs in: the longest by its last record in ``env_dir`` (same profile)
    first, so that no long lab starts last and runs alone; a lab without such a record comes first
    of all (its time is unknown), and labs keep their order among equals."""

    def last_seconds(lab: Lab) -> float:
        try:
            record = read_record(env_dir / f"{lab.id}.json")
        except RecordError:
            return float("inf")
        return record.duration_s if record.profile == profile else float("inf")

    return sorted(labs, key=lambda lab: -last_seconds(lab))


def _prepare(key: str, build, progress: Progress) -> None:
    progress.start(key)
    started = time.monotonic()
    try:
        build.run()
    except Exception:
        progress.finish(key, "failed", time.monotonic() - started, runs=0)
        raise
    progress.finish(key, "ready", time.monotonic() - started, runs=0)


class RunStopped(Exception):
    """A lab's next run was not started: the whole run is being stopped (Ctrl-C, SIGTERM)."""


class Stopping:
    """How an interrupted ``run_labs`` stops (``start``, from ``run_by_need``): the asset builds are
    stopped, no lab starts another run (``refuse_new_runs``), and every worker is ended, again and
    again until the labs' threads are done (``done``): a thread past the refusal may still start
    one, which would otherwise run its whole lab while the interrupted process waits for it."""

    REAP_EVERY_S = 0.2

    def __init__(self, builds: dict):
        self.builds = builds
        self.requested = threading.Event()
        self.done = threading.Event()

    def start(self) -> None:
        self.requested.set()
        for build in self.builds.values():
            build.stop()
        close_all_workers()
        threading.Thread(target=self._reap, name="rocmlab-run-stop", daemon=True).start()

    def _reap(self) -> None:
        while not self.done.wait(self.REAP_EVERY_S):
            close_all_workers()

    def refuse_new_runs(self) -> None:
        if self.requested.is_set():
            raise RunStopped("the run is being stopped")
