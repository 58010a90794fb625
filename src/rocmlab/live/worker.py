"""``rocmlab live worker``: a grading worker of the live workshop. It claims one attempt at a time
from the live queue (the SQLite file on this server, or the live service's HTTP API with the
worker token on Kubernetes), grades it with ``rocmlab grade``'s own path (sandboxed, the trusted
harness, the learner's kept seed), and records the result with ``complete``.

While it grades, a thread renews the lease; a worker killed mid-grade stops renewing, its lease
runs out and another worker regrades the attempt (once: the late result of the first is refused).
SIGTERM or SIGINT stops it: the attempt under way is given back to the queue at once and the
sandbox is removed.

A failure of the grading system never costs a learner an attempt: before it claims anything, the
worker checks every lab it may be handed with ``rocmlab grade``'s own preflight (the model cache,
lab 03's adapter, readable by the sandbox's users) and refuses to start, naming the lab and the
fix; an attempt that fails for any reason but the learner's notebook is recorded ``not counted``
(rocmlab.live.queue). Each attempt has a hard time budget (``budget_s``, from its claim):
past it the grading is stopped and the attempt failed (counted: the notebook used the time). Several workers on one machine never share a grader user: each grading run
holds its ``rocmlab-grader-N`` users through their file locks (rocmlab.sandbox.grader_users.claim_users).
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import signal
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path

from .. import processes
from ..course.catalog import SMOKE, discover, select
from ..errors import CommandFailed, InputError, LabError
from ..grading.preflight import check_adapter_cache, check_model_cache, check_sandbox_gives
from ..grading.submissions import StudentResult
from ..hub.settings import LiveWorkers, usable_cores
from ..sandbox.limits import THREAD_VARIABLES, choose_backend, is_root
from .attempted import untouched_in
from .attempts import Attempt, CheckOutcome, GradeResult
from .graders import OPEN_LABS, OpenGraders, import_grading_modules
from .queue import LeaseLost, LiveQueue, new_worker_id

RENEW_FRACTION = 3  # the lease is renewed every lease_s / RENEW_FRACTION seconds
DEFAULT_BUDGET_S = 600.0  # the longest one attempt may hold a worker (issue 48: one held it 12 minutes)


class OverBudget(Exception):
    """The attempt ran past its time budget."""


def preflight(root: Path, lab_ids, profile: str = SMOKE) -> list[str]:
    """The ids of the labs this worker may be handed, each checked as ``rocmlab grade`` checks it
    before any learner code runs; CommandFailed naming the lab and the fix when one cannot be
    graded here (so that no learner's attempt fails on it)."""
    labs = select(discover(root), list(lab_ids)) if lab_ids else discover(root)
    backend = choose_backend(None)
    for lab in labs:
        try:
            check_sandbox_gives(lab, backend)
        except CommandFailed as exc:
            raise CommandFailed(f"live worker: the worker does not start: {exc}") from None
        requirements = lab.profile(profile)
        try:
            check_model_cache(requirements.parameters, other_user=is_root())
            check_adapter_cache(requirements.requires, other_user=is_root())
        except CommandFailed as exc:
            raise CommandFailed(
                f"live worker: lab {lab.id} cannot be graded here, so the worker does not start: {exc}. "
                "If the cache is there, the worker was started without it: a worker the hub runs has the hub's "
                "ROCMLAB_CACHE (start the hub with `sudo -E`); one started by hand under `sudo` needs "
                "`sudo --preserve-env=ROCMLAB_CACHE rocmlab live worker ...`"
            ) from None
    return [lab.id for lab in labs]


def share_threads(environ=None, cores: int | None = None) -> str:
    """Give each kernel's thread pools (OpenMP, OpenBLAS, MKL) this machine's cores shared among the
    live workers that run on it (``ROCMLAB_LIVE_WORKERS``, else the hub's default), as a batch
    ``rocmlab grade --jobs N`` shares them among its N slots; a variable already set is kept. A
    worker's grader has one slot and would otherwise give each kernel every core: with two workers
    on two cores, lab 07's torch kernels ran four busy threads on two cores and cost a third more
    CPU than the batch's (benchmarks/live_load.py). Returns the share."""
    env = os.environ if environ is None else environ
    workers = LiveWorkers.from_environment(env, cores).count or 1
    threads = str(max(1, (cores or usable_cores()) // workers))
    for name in THREAD_VARIABLES:
        env.setdefault(name, threads)
    return threads


def grade_result(result: StudentResult, untouched=frozenset()) -> GradeResult:
    """What the queue records of one learner's graded submission (the batch grader's own figures);
    ``untouched``: the exercises left as released (not attempted)."""
    checks = [
        CheckOutcome(
            grade_id=str(c["grade_id"]),
            check=str(c["name"]),
            passed=bool(c["passed"]),
            points=float(c["points"]),
            max_points=float(c["max_points"]),
            message=dict(c["rule"]),
            attempted=str(c["grade_id"]) not in untouched,
            graded=not c.get("error"),
        )
        for c in result.checks
    ]
    return GradeResult(
        score=float(result.score),
        max_score=float(result.max_score),
        checks=checks,
        flags=list(result.flags),
        seed=result.seed,
        lang=result.lang,
        notes=list(result.notes),
    )


def grade_attempt(graders: OpenGraders, attempt: Attempt, notebook: Path, next_waits: bool = True) -> GradeResult:
    """Grade one attempt's notebook as ``rocmlab grade`` grades that learner, on their seed, with the
    lab's grader kept open by this worker; ``next_waits``: another attempt of the lab is queued."""
    result = graders.grade(attempt.lab, attempt.learner, notebook, attempt.seed, next_waits=next_waits)
    lang = result.lang or attempt.lang
    return grade_result(result, untouched_in(graders.root, attempt.lab, lang, notebook, attempt.learner))


class HttpQueue:
    """The live service's worker API (``api/worker/...``), with the worker token: the same
    ``claim``/``renew``/``complete``/``fail``/``release`` as LiveQueue. A claimed attempt's
    files are unpacked into ``scratch`` and its ``source`` points at the notebook there."""

    def __init__(self, url: str, token: str, scratch: Path, timeout_s: float = 30):
        if not token:
            raise InputError("--service needs the worker token (ROCMLAB_LIVE_WORKER_TOKEN)")
        self.url, self.token, self.scratch, self.timeout_s = url.rstrip("/") + "/", token, scratch, timeout_s

    def _post(self, path: str, body: dict) -> tuple[int, dict | None]:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            if exc.code == 409:
                raise LeaseLost(detail) from None
            raise CommandFailed(f"live service {path}: HTTP {exc.code}: {detail}") from None

    def claim(self, worker_id: str, lease_s: float, labs=()) -> Attempt | None:
        status, body = self._post("api/worker/claim", {"worker": worker_id, "lease_s": lease_s, "labs": list(labs)})
        if status == 204 or not body:
            return None
        data = body["attempt"]
        data["checks"] = [CheckOutcome.from_dict(c) for c in data["checks"]]
        attempt = Attempt(**{k: v for k, v in data.items() if k in Attempt.__dataclass_fields__})
        folder = self.scratch / f"attempt-{attempt.id}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(body["files"])), mode="r:gz") as archive:
            archive.extractall(folder, filter="data")  # no links out, no absolute paths
        attempt.source = str(folder / Path(attempt.source).name)
        return attempt

    def renew(self, attempt_id: int, worker_id: str, lease_s: float) -> None:
        self._post(f"api/worker/attempts/{attempt_id}/renew", {"worker": worker_id, "lease_s": lease_s})

    def complete(self, attempt_id: int, worker_id: str, result: GradeResult) -> None:
        self._post(f"api/worker/attempts/{attempt_id}/complete", {"worker": worker_id, **asdict(result)})

    def fail(self, attempt_id: int, worker_id: str, error: str, *, counted: bool = True) -> None:
        self._post(f"api/worker/attempts/{attempt_id}/fail", {"worker": worker_id, "error": error, "counted": counted})

    def release(self, attempt_id: int, worker_id: str) -> None:
        self._post(f"api/worker/attempts/{attempt_id}/release", {"worker": worker_id})


class Renewer:
    """Renews a lease every ``lease_s / RENEW_FRACTION`` seconds in a thread until stopped."""

    def __init__(self, queue, attempt_id: int, worker_id: str, lease_s: float):
        self.queue, self.attempt_id, self.worker_id, self.lease_s = queue, attempt_id, worker_id, lease_s
        self.stopped = threading.Event()
        self.lost = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.wait(self.lease_s / RENEW_FRACTION):
            try:
                self.queue.renew(self.attempt_id, self.worker_id, self.lease_s)
            except LeaseLost:
                self.lost = True
                return
            except Exception:  # noqa: BLE001 (a failed renewal is retried; the lease has room for two)
                continue

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)


class Worker:
    """One grading worker: ``run`` claims and grades until stopped (``max_attempts``, ``idle_exit_s``
    for tests and benchmarks)."""

    def __init__(
        self,
        queue,
        root: Path,
        *,
        worker_id: str | None = None,
        lease_s: float = 300,
        poll_s: float = 1.0,
        profile: str = SMOKE,
        unsafe: bool = False,
        hide=(),
        log=None,
        budget_s: float = DEFAULT_BUDGET_S,
        open_labs: int = OPEN_LABS,
    ):
        self.queue, self.root = queue, root
        # covered in every kernel: the queue's folder (every learner's spooled submissions and results)
        self.hide = tuple(hide) or ((queue.path.resolve().parent,) if isinstance(queue, LiveQueue) else ())
        self.worker_id = worker_id or new_worker_id()
        self.lease_s, self.poll_s, self.profile, self.unsafe = lease_s, poll_s, profile, unsafe
        self.log = log or (lambda message: print(message, flush=True))  # flushed: a SIGKILL loses no line
        self.stopping = threading.Event()
        self.budget_s = budget_s
        self.graders = OpenGraders(root, profile=profile, unsafe=unsafe, hide=self.hide, keep=open_labs, log=self.log)

    def run(self, max_attempts: int | None = None, idle_exit_s: float | None = None) -> int:
        """Grade until stopped; the number of attempts this worker recorded. The labs' graders
        stay open while it runs and are closed when it returns, however it returns."""
        graded, idle_since = 0, time.monotonic()
        try:
            while not self.stopping.is_set() and (max_attempts is None or graded < max_attempts):
                attempt = self.queue.claim(self.worker_id, self.lease_s, labs=self.graders.labs)
                if attempt is None:
                    if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                        break
                    self.stopping.wait(self.poll_s)
                    continue
                graded += self.grade_one(attempt)
                idle_since = time.monotonic()
        finally:
            self.graders.close()
        return graded

    def grade_one(self, attempt: Attempt) -> int:
        """Grade one claimed attempt and record it; 1 if this worker's result was recorded."""
        started = time.monotonic()
        try:
            with Renewer(self.queue, attempt.id, self.worker_id, self.lease_s), budget(self.budget_s):
                result = grade_attempt(self.graders, attempt, Path(attempt.source), self.next_waits(attempt.lab))
        except (SystemExit, KeyboardInterrupt):
            self.queue.release(attempt.id, self.worker_id)
            raise
        except Exception as exc:  # noqa: BLE001 (one attempt that cannot be graded never stops the worker)
            return self.record_failure(attempt, exc)
        try:
            self.queue.complete(attempt.id, self.worker_id, result)
        except LeaseLost as exc:
            self.log(f"attempt {attempt.id}: result dropped, {exc}")
            return 0
        self.log(
            f"graded attempt {attempt.id} {attempt.learner} {attempt.lab} "
            f"{result.score:g}/{result.max_score:g} ({time.monotonic() - started:.1f}s)"
        )
        return 1

    def next_waits(self, lab: str) -> bool:
        """Whether another attempt of ``lab`` waits in the queue (then a kernel is started ahead for
        it). The live service's HTTP API does not say: there one always is."""
        waiting = getattr(self.queue, "waiting", None)
        return waiting is None or waiting(lab) > 0

    def record_failure(self, attempt: Attempt, exc: Exception) -> int:
        """Fail the attempt; counted only when the learner's notebook caused it (it ran past the
        budget, or it is not a notebook that can be graded), never for the grading system's fault."""
        # a lab this checkout lacks is ours, though a LabError is an InputError
        learners = isinstance(exc, OverBudget) or (isinstance(exc, InputError) and not isinstance(exc, LabError))
        why = f"{type(exc).__name__}: {str(exc)[:500]}"
        if not learners:
            why += " (a failure of the grading system: this attempt is not counted, submit again)"
        self.log(f"attempt {attempt.id} ({attempt.learner} {attempt.lab}) could not be graded: {why}")
        try:
            self.queue.fail(attempt.id, self.worker_id, why, counted=learners)
        except LeaseLost:
            return 0
        return 1


class budget:
    """Raise OverBudget in the main thread once ``seconds`` have passed (SIGALRM); nothing where
    signals cannot be had (another thread: the tests' in-process workers)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.armed = threading.current_thread() is threading.main_thread() and seconds > 0

    def _expired(self, _signum, _frame):
        raise OverBudget(f"the grading ran past the time budget of {self.seconds:g} s per attempt")

    def __enter__(self):
        if self.armed:
            self.previous = signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)


def open_queue(queue_path: str | None, service: str | None, token: str, scratch: Path):
    if bool(queue_path) == bool(service):
        raise InputError("live worker: give either --queue FILE (this server) or --service URL (Kubernetes)")
    if queue_path:
        if not Path(queue_path).is_file():
            raise InputError(f"--queue {queue_path}: no live queue there (the live service makes it at hub start)")
        return LiveQueue(queue_path)
    return HttpQueue(service, token, scratch)


def worker_main(
    root: Path,
    *,
    queue_path,
    service,
    token,
    lease_s,
    poll_s,
    profile,
    unsafe,
    max_attempts,
    idle_exit_s,
    labs=(),
    budget_s=DEFAULT_BUDGET_S,
    open_labs=None,
):
    """The CLI's ``rocmlab live worker``."""
    checked = preflight(root, labs, profile)
    print(f"live worker: {len(checked)} lab(s) can be graded here ({', '.join(checked)})", flush=True)
    import_grading_modules()  # before the first claim: no learner waits for it
    threads = share_threads()  # before any grader starts a zygote, whose environment it is
    print(f"live worker: {threads} thread(s) per kernel ({', '.join(THREAD_VARIABLES)})", flush=True)
    processes.exit_on_sigterm()  # SIGTERM raises SystemExit: the attempt is given back, the sandbox removed
    with tempfile.TemporaryDirectory(prefix="rocmlab-live-worker-") as scratch:
        queue = open_queue(queue_path, service, token, Path(scratch))
        hide = [] if queue_path else [Path(scratch)]  # the queue's folder is hidden by Worker itself
        worker = Worker(
            queue,
            root,
            lease_s=lease_s,
            poll_s=poll_s,
            profile=profile,
            unsafe=unsafe,
            hide=hide,
            budget_s=budget_s,
            open_labs=open_labs or OPEN_LABS,
        )
        print(f"live worker {worker.worker_id}: grading from {queue_path or service}", flush=True)
        try:
            graded = worker.run(max_attempts=max_attempts, idle_exit_s=idle_exit_s)
        except KeyboardInterrupt:
            graded = None
        print(
            f"live worker {worker.worker_id}: stopped ({graded if graded is not None else 'interrupted'})", flush=True
        )
    return 0
