"""The trusted grading harness: a lab's hidden checks, run outside the learner's kernel.

A lab's checks live in ``solutions/<lab>/checks.py`` (instructor only; never built into a
student notebook). Each is a function marked with ``@check``: one rule, its points, and a short
message in both languages that names the rule::

    @check("01-backend-1", points=1, en="an empty string is not a version", zh="空字符串不算版本")
    def empty_string(learner, variant):
        got = learner.eval("backend_of(SimpleNamespace(version=SimpleNamespace(hip=h, cuda=None)))", h="")
        assert got == "cpu"

After the notebook has run in its sandboxed kernel, the harness (in the worker, a process the
kernel cannot reach) calls each check with a ``Learner``, a narrow channel to that kernel:
``eval`` an expression over the learner's names with values the check chose, ``call`` an answer
function, ``get`` a variable, ``file`` a file of the work folder, ``run`` a function of the lab's
kernel-side module (``in_kernel.py``, ``KernelModule``) over the learner's names. The kernel answers with plain
data only (``rocmlab.lab.answers``); the check compares it here, with this interpreter's own
``==``, numpy and torch, which no learner code has touched. A ``variant`` gives each check
random inputs from a seed drawn per learner and run, recorded for regrades.

The points of a test cell's checks add up to the cell's points; nbgrader's gradebook gets the
sum of the passed ones as the cell's autograded score (``grading.cells.score_tests``).

A check that needs the lab's model or runtime for its reference (the stock model's logits, the
course's own data as the solution loads it) takes a third argument, ``reference``: the same
channel to a second, trusted kernel that ran the lab's solution (``rocmlab.execution.reference_kernel``)
and never sees learner code. It asks both the same question on the same inputs and compares the
answers here: differential checking. Anything the reference fails to answer is a ``GradingError``.

A check that must see the learner's work as files, not as the kernel that made them (a launch of
the course's scripts over the learner's files, e.g. lab 04's torchrun runs), takes ``fresh``: a
channel like ``Learner.run`` to a fresh kernel (``Fresh``). The checks that take it run after all
the others; before the fresh kernel starts, the worker shuts the learner's kernel down and ends
every process of the learner's run (``rocmlab.execution.worker.FreshKernels``). The fresh kernel
starts in the same sandbox run and work folder and has run none of the learner's cells: a cell that
patched the course's launcher, ``subprocess`` or ``json``, or a process left to rewrite files,
cannot touch what it answers.

A launch of the learner's files (torchrun ranks) can take longer than one request may (``PROBE_TIMEOUT_S``)
and than the learner's answer budget allows. The check makes it with ``fresh.launch`` instead of
``fresh.run``: the request gets its own time allowance, outside the answer budget. The lab declares it in
its ``checks.py`` as two top-level literals, ``LAUNCHES`` (how many launches one learner's run makes) and
``LAUNCH_LIMIT_S`` (the seconds one launch may take), capped here by ``MAX_LAUNCHES`` and
``MAX_LAUNCH_S``; they are read from the file's text without running it (``launch_allowance``), and
the worker's time budget for the run includes them. A launch past its allowance is the learner's
failure (``LaunchTimeExceeded``): the fresh kernel runs nothing but the learner's files and the
course's code, and the lab's bound holds its reference's launch several times over, so what runs
past it is the learner's code hanging or crawling. One launch more than the lab declared is the
check's fault (a ``GradingError``).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import math
import random
import re
import time
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import python_ast
from .lab.answers import ANSWER_MIME, Raised, decode, encode

PROBE_TIMEOUT_S = 60
RECOVER_S = 10  # after an interrupt, for the kernel to finish the request and serve again
CHECK_ALLOWANCE_S = 10  # of the harness's time budget per check
# a learner's kernel has this much time for all its answers together (a floor, or so much per
# check): a slow kernel cannot hold a grading slot for minutes; past it, the remaining checks fail
ANSWER_FLOOR_S = 120
ANSWER_PER_CHECK_S = 4
MAX_ANSWER_CHARS = 64 * 2**20
FRESH_START_S = 60  # of the harness's time budget, for ending the learner's run and starting a fresh kernel
MAX_LAUNCHES = 8  # ``fresh.launch``es of one learner's run, whatever the lab declares (``LAUNCHES``)
MAX_LAUNCH_S = 300  # seconds of one ``fresh.launch``, whatever the lab declares (``LAUNCH_LIMIT_S``)
NAME = re.compile(r"[A-Za-z_][\w.]*")
NOTHING = object()  # no answer came (an answer of None is JSON null)


KERNEL_MODULE = "in_kernel.py"  # beside checks.py: the lab's kernel-side helpers


@dataclass(frozen=True)
class KernelModule:
    """A lab's kernel-side helpers (``solutions/<lab>/in_kernel.py``): plain functions a check
    runs in a kernel (``Learner.run``), over a copy of the learner's names, so that a name the
    module does not define is the notebook's. Its text travels with each request (the worker and
    the kernel may not see the course); a kernel compiles it once (``rocmlab.lab.answers``)."""

    source: str
    filename: str
    functions: frozenset = field(init=False, repr=False)

    def __post_init__(self):
        try:
            tree = python_ast.parse(self.source, self.filename)
        except SyntaxError as exc:
            raise ValueError(f"{self.filename}: not Python: {exc}") from exc
        defined = frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_"))
        object.__setattr__(self, "functions", defined)

    def request(self, function: str) -> dict:
        if function not in self.functions:
            raise GradingError(f"{self.filename} defines no public function {function!r}")
        return {"run": function, "module": {"source": self.source, "filename": self.filename}}


def kernel_module(checks_file: Path) -> KernelModule | None:
    """The kernel-side module beside ``checks_file``, or None when the lab has none."""
    path = Path(checks_file).with_name(KERNEL_MODULE)
    return KernelModule(path.read_text(encoding="utf-8"), str(path)) if path.is_file() else None


@dataclass
class Check:
    grade_id: str
    name: str
    points: float
    rule: dict  # {"en": ..., "zh": ...}
    function: object = field(repr=False, compare=False, default=None)
    counts_with: tuple = ()  # the checks whose rule this one qualifies: it counts only if they pass
    wants_reference: bool = False  # the function takes ``reference`` (the trusted reference kernel)
    wants_fresh: bool = False  # the function takes ``fresh`` (a fresh kernel of the learner's run): it runs last
    kernel: KernelModule | None = field(repr=False, compare=False, default=None)  # its lab's ``in_kernel.py``


def check(grade_id: str, *, points: float, en: str, zh: str, counts_with: str | tuple = ()):
    """Mark a function of ``checks.py`` as one graded rule of the test cell ``grade_id``.
    ``counts_with``: the check (or checks) whose rule this one qualifies, e.g. "an empty table
    gives {}" qualifies "{gpu: TFLOPS / watts}": on empty evidence a rule about absence holds for
    any code that does nothing, so it counts only together with the rule it qualifies."""
    with_ = (counts_with,) if isinstance(counts_with, str) else tuple(counts_with)

    def mark(function):
        rule = {"en": en, "zh": zh}
        parameters = inspect.signature(function).parameters
        function.rocmlab_check = Check(
            grade_id,
            function.__name__,
            float(points),
            rule,
            function,
            with_,
            wants_reference="reference" in parameters,
            wants_fresh="fresh" in parameters,
        )
        return function

    return mark


@dataclass
class Mistake:
    """A classic mistake a check exists to catch: ``code`` redefines one or more of the learner's
    answer functions the wrong way. ``rocmlab build --verify`` proves that it fails the check it
    is listed on and at least one visible test of the student notebook."""

    check: str  # the name of the check it is listed on
    rule: dict  # {"en": ..., "zh": ...}: what the mistake is
    code: str


def mistake(*, en: str, zh: str, code: str):
    """List, on a ``@check`` (write it above), a classic mistake that the check must fail."""

    def mark(function):
        if not hasattr(function, "rocmlab_check"):
            raise TypeError(f"@mistake goes above @check on {function.__name__}")
        name = function.rocmlab_check.name
        function.rocmlab_mistakes = [
            Mistake(name, {"en": en, "zh": zh}, code),
            *getattr(function, "rocmlab_mistakes", []),
        ]
        return function

    return mark


def mistakes_of(checks: list[Check]) -> list[Mistake]:
    """The mistakes listed on ``checks``, in the checks' order."""
    return [m for c in checks for m in getattr(c.function, "rocmlab_mistakes", [])]


class NoAnswer(Exception):
    """The kernel gave no usable answer (timed out, died, or sent something unreadable)."""


class AnswerTimeExhausted(NoAnswer):
    """The kernel used up the time it had for all its answers (``answer_budget_s``)."""


class LaunchTimeExceeded(NoAnswer):
    """A ``fresh.launch`` ran past the lab's allowance for one launch: the learner's code hung or crawled."""


class GradingError(Exception):
    """The check itself failed (its setup, its reference, its temp folder): a fault of the
    grader, reported to the instructor, never a broken rule of the learner's."""


@contextmanager
def own_work(what: str):
    """Code a check runs for itself, after the learner answered (a reference, a temp folder):
    whatever it raises is a ``GradingError``."""
    try:
        yield
    except GradingError:
        raise
    except Exception as exc:
        raise GradingError(f"{what}: {type(exc).__name__}: {str(exc)[:200]}") from exc


class LearnerRaised(AssertionError):
    """The learner's code raised where the check expected a value."""

    def __init__(self, raised: Raised):
        super().__init__(f"raised {raised.type}")
        self.raised = raised


class Learner:
    """The check's view of the learner's kernel: requests out, plain data back."""

    def __init__(self, channel, kernel: KernelModule | None = None):
        self._channel = channel
        self.kernel = kernel  # the lab's kernel-side module (``run``); none: the checks' own
        self.requests = 0
        self.answers = 0  # answers that came back, values or exceptions
        self.values = 0  # answers that were values, not exceptions
        self.unanswered: list[NoAnswer] = []  # requests that got no answer (even if a check caught it)
        self.closed = ""  # why this kernel takes no more requests (it was shut down for the fresh kernel)

    def eval(self, expr: str, **values):
        """``expr`` (one expression) evaluated in the kernel over a copy of the learner's names plus
        ``values``; its value as plain data. Raises ``LearnerRaised`` if it raised. Code of more than
        one expression is a function of the lab's ``in_kernel.py``, asked with ``run``."""
        answer = self._ask(expr, values)
        if isinstance(answer, Raised):
            raise LearnerRaised(answer)
        return answer

    def raised(self, expr: str, **values) -> Raised | None:
        """What ``expr`` raised in the kernel, or None when it returned."""
        answer = self._ask(expr, values)
        return answer if isinstance(answer, Raised) else None

    def run(self, function: str, *args, **values):
        """``function(*args, **values)`` of the lab's kernel-side module (``in_kernel.py``), run in
        the kernel over a copy of the learner's names; its value as plain data. Raises
        ``LearnerRaised`` if it raised, ``GradingError`` if the module has no such function."""
        answer = self._run(function, args, values)
        if isinstance(answer, Raised):
            raise LearnerRaised(answer)
        return answer

    def run_raised(self, function: str, *args, **values) -> Raised | None:
        """What ``function`` of the lab's kernel-side module raised in the kernel, or None when it returned."""
        answer = self._run(function, args, values)
        return answer if isinstance(answer, Raised) else None

    def _run(self, function: str, args: tuple, values: dict):
        if self.kernel is None:
            raise GradingError(f"run({function!r}): no {KERNEL_MODULE} came with the checks")
        return self._send({**self.kernel.request(function), "args": encode(tuple(args))}, values)

    def call(self, function: str, *args, **kwargs):
        """``function(*args, **kwargs)`` in the kernel: the learner's answer to those inputs."""
        if not NAME.fullmatch(function):
            raise ValueError(f"not a function name: {function!r}")
        return self.eval(f"{function}(*__args, **__kwargs)", __args=tuple(args), __kwargs=dict(kwargs))

    def get(self, name: str):
        """The value of the learner's variable ``name``."""
        if not NAME.fullmatch(name):
            raise ValueError(f"not a variable name: {name!r}")
        return self.eval(name)

    def file(self, path: str, limit: int = 16 * 2**20) -> bytes:
        """The bytes of ``path``, relative to the notebook's work folder, as the kernel reads them."""
        return self.eval("open(__path, 'rb').read(__limit)", __path=str(path), __limit=int(limit))

    def _ask(self, expr: str, values: dict):
        return self._send({"expr": expr}, values)

    def recall(self, answer):
        """``answer``, which this kernel gave an earlier check (a launch shared by several rules),
        used again: it counts as an answer of the check now running, so that a rule it breaks is
        the learner's, not a failed setup."""
        self.answers += 1
        self.values += not isinstance(answer, Raised)
        return answer

    def close(self, why: str) -> None:
        """Take no more requests: any later one is the check's fault (a ``GradingError``)."""
        self.closed = why

    def _send(self, request: dict, values: dict):
        if self.closed:
            raise GradingError(f"asked a kernel after {self.closed}")
        self.requests += 1
        request = {**request, "values": {k: encode(v) for k, v in values.items()}}
        try:
            reply = self._channel.ask(request)
        except NoAnswer as exc:
            self.unanswered.append(exc)
            raise
        self.answers += 1
        answer = decode(reply)
        self.values += not isinstance(answer, Raised)
        return answer


class Reference:
    """The check's view of the trusted reference kernel: the lab's solution, run once per worker
    and asked the same questions as the learner's kernel. It answers with plain data like the
    learner's; anything it does not answer (it raised, timed out, never started) is the grader's
    fault: a ``GradingError``, never a broken rule."""

    def __init__(self, channel=None, unavailable: str = "", kernel: KernelModule | None = None, own: bool = False):
        self._asked = Learner(channel, kernel) if channel is not None else None
        self.own = own  # the run's own kernel (``OWN_KERNEL``), not a kernel of its own
        self.unavailable = unavailable or ("" if channel is not None else "no reference kernel for this run")

    def eval(self, expr: str, **values):
        return self._answer(expr, lambda asked: asked.eval(expr, **values))

    def run(self, function: str, *args, **values):
        """The reference solution's answer from the lab's kernel-side ``function`` (``Learner.run``)."""
        return self._answer(function, lambda asked: asked.run(function, *args, **values))

    call = Learner.call  # through this class's eval
    get = Learner.get

    def _answer(self, what: str, ask):
        if self._asked is None:
            raise GradingError(f"the reference kernel: {self.unavailable}")
        try:
            return ask(self._asked)
        except LearnerRaised as exc:
            raise GradingError(f"the reference kernel raised {exc.raised.type} on {what[:80]!r}") from exc
        except NoAnswer as exc:
            raise GradingError(f"the reference kernel gave no answer to {what[:80]!r}: {exc}") from exc

    def close(self, why: str) -> None:
        """Take no more requests where the reference is the learner's own kernel (``OWN_KERNEL``),
        shut down for the fresh kernel; a reference kernel of its own stays."""
        if self._asked is not None and self.own:
            self._asked.close(why)

    def _take_kernel(self, kernel: KernelModule | None) -> None:
        if self._asked is not None and self._asked.kernel is None:
            self._asked.kernel = kernel


class Fresh:
    """The check's view of a fresh kernel of the learner's run: ``run`` and ``run_raised`` as the
    learner's (``Learner.run``: the lab's ``in_kernel`` functions, plain data both ways, the same
    answer budget), in a kernel that starts, at its first request, only after every other check ran,
    the learner's kernel was shut down and every process of the learner's run ended (``opener``,
    given by the worker). It has run none of the learner's cells: what it answers comes from the
    learner's files. Whatever the learner's files do in it (raise, hang) is the learner's; a kernel
    that does not start is a ``GradingError``. ``launch``: a request with its own time allowance
    (``allowance``: ``(launches, seconds each)``, the lab's ``launch_allowance``)."""

    def __init__(
        self,
        opener=None,
        unavailable: str = "",
        kernel: KernelModule | None = None,
        before=None,
        allowance: tuple[int, float] = (0, 0.0),
    ):
        self._opener = opener  # () -> a channel to the fresh kernel (``KernelChannel``)
        self._before = before  # called before it starts: the learner's kernel is no longer asked
        self.failed = "" if opener is not None else (unavailable or "no fresh kernel for this run")
        self.channel = None
        self.asked = Learner(self, kernel)
        self.allowance = allowance
        self.launches = 0
        self._launch_s = 0.0  # while a launch is asked: its allowance

    def launch(self, function: str, *args, **values):
        """``run``, with the lab's allowance for one launch as its time limit instead of a request's,
        charged to no answer budget; past it, ``LaunchTimeExceeded`` (the learner's). At most the
        lab's ``LAUNCHES`` per run: one more is a ``GradingError``."""
        count, limit_s = self.allowance
        if self.launches >= count:
            raise GradingError(
                f"launch {self.launches + 1} of this run: its checks.py declares LAUNCHES = {count} "
                f"(at most {MAX_LAUNCHES}) and LAUNCH_LIMIT_S"
            )
        self.launches += 1
        self._launch_s = limit_s
        try:
            return self.asked.run(function, *args, **values)
        finally:
            self._launch_s = 0.0

    @property
    def started(self) -> bool:
        return self.channel is not None

    def run(self, function: str, *args, **values):
        return self.asked.run(function, *args, **values)

    def run_raised(self, function: str, *args, **values) -> Raised | None:
        return self.asked.run_raised(function, *args, **values)

    def recall(self, answer):
        return self.asked.recall(answer)

    def ask(self, request: dict):  # the channel ``self.asked`` sends through
        if self.channel is None:
            self._open()
        if self._launch_s:
            return self.channel.launch(request, self._launch_s)
        return self.channel.ask(request)

    def _open(self) -> None:
        if self.failed:
            raise GradingError(f"the fresh kernel: {self.failed}")
        if self._before is not None:
            self._before()
        try:
            self.channel = self._opener()
        except Exception as exc:
            self.failed = f"it did not start: {type(exc).__name__}: {str(exc)[:300]}"
            raise GradingError(f"the fresh kernel: {self.failed}") from exc


class Variant:
    """A check's random inputs, from the run's seed and the check's name (the same on a regrade)."""

    def __init__(self, seed: int, name: str):
        self.seed, self.name = seed, name
        self.key = [seed, zlib.crc32(name.encode())]
        self.random = random.Random(f"{seed}/{name}")

    def numpy(self):
        import numpy as np

        return np.random.default_rng(self.key)

    def torch(self):
        import torch

        return torch.Generator().manual_seed(self.torch_seed)

    @property
    def torch_seed(self) -> int:
        """63 bits hashed from the seed and the check's name together: torch's CPU generator
        starts its stream from the seed's low 32 bits only, so each of them must depend on both
        (``seed * 2**32 + crc32(name)`` gave every learner the same tensors)."""
        digest = hashlib.blake2b(f"{self.seed}/{self.name}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") >> 1


# ---------------------------------------------------------------- the channel to a kernel


class KernelChannel:
    """Requests as ``execute_request``s to a running kernel through a jupyter_client client; the
    answer is the first ``ANSWER_MIME`` display for that request. Any client (blocking or async)
    works; a kernel that stops answering is given up on, and every later request fails at once."""

    def __init__(self, client, manager=None, timeout_s: float = PROBE_TIMEOUT_S, budget_s: float = math.inf):
        self.client, self.manager, self.timeout_s = client, manager, timeout_s
        self.budget_s, self.spent_s = budget_s, 0.0  # the kernel's time for all its answers, and used
        self.launch_s = 0.0  # time spent in launches (``launch``), outside the budget
        self.broken = ""

    def ask(self, request: dict):
        if self.broken:
            raise NoAnswer(self.broken)
        left = self.budget_s - self.spent_s
        if left <= 0:
            raise AnswerTimeExhausted(self._exhausted())
        started, timeout_s = time.monotonic(), min(self.timeout_s, left)
        past = AnswerTimeExhausted(self._exhausted()) if timeout_s < self.timeout_s else None
        try:
            return self._ask(request, timeout_s, past)
        finally:
            self.spent_s += time.monotonic() - started

    def launch(self, request: dict, limit_s: float):
        """``ask`` with ``limit_s`` (a launch's allowance) as its limit, charged to no answer budget."""
        if self.broken:
            raise NoAnswer(self.broken)
        started = time.monotonic()
        past = LaunchTimeExceeded(
            f"the launch ran past its allowance of {limit_s:g} s (the lab's LAUNCH_LIMIT_S): "
            "your code hung or ran far slower than the reference"
        )
        try:
            return self._ask(request, limit_s, past)
        finally:
            self.launch_s += time.monotonic() - started

    def _exhausted(self) -> str:
        return f"answer time exhausted: the kernel used the {self.budget_s:g} s it has for all its answers"

    def _ask(self, request: dict, timeout_s: float, past: NoAnswer | None = None):
        """The answer; ``past``: raised when no answer came within ``timeout_s`` and the kernel still serves."""
        code = f'__import__("rocmlab.lab.answers", fromlist=["serve"]).serve({json.dumps(request)!r})'
        msg_id = self.client.execute(code, silent=False, store_history=False, allow_stdin=False, stop_on_error=False)
        answer, done = self._collect(msg_id, time.monotonic() + timeout_s)
        if not done:
            why = self.broken or f"no answer within {timeout_s:g} s (interrupted)"
            if not self.broken:  # interrupted: the kernel may serve the next checks again
                self._interrupt()
                if not self._collect(msg_id, time.monotonic() + RECOVER_S)[1]:
                    self.broken = self.broken or f"the kernel did not answer within {timeout_s:g} s"
            if not self.broken and past is not None:
                raise past
            raise NoAnswer(why)
        if answer is NOTHING:
            raise NoAnswer("the kernel finished the request without an answer")
        return answer

    def _collect(self, msg_id: str, deadline: float):
        from jupyter_core.utils import run_sync

        answer = NOTHING
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = run_sync(_maybe_async(self.client.get_iopub_msg))(timeout=min(left, 1.0))
            except Exception:  # noqa: BLE001 (queue.Empty: poll again, and check the kernel lives)
                if not self._alive():
                    self.broken = "the kernel stopped"
                    return answer, False
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            content = msg.get("content") or {}
            if msg["msg_type"] == "display_data" and answer is NOTHING:
                answer = _answer_of(content)
            elif msg["msg_type"] == "status" and content.get("execution_state") == "idle":
                return answer, True
        return answer, False

    def _alive(self) -> bool:
        from jupyter_core.utils import run_sync

        if self.manager is None:
            return True
        try:
            return bool(run_sync(_maybe_async(self.manager.is_alive))())
        except Exception:  # noqa: BLE001
            return False

    def _interrupt(self) -> None:
        from jupyter_core.utils import run_sync

        if self.manager is not None:
            try:
                run_sync(_maybe_async(self.manager.interrupt_kernel))()
            except Exception:  # noqa: BLE001 (it is given up on either way)
                pass


def _maybe_async(function):
    from jupyter_core.utils import ensure_async

    async def call(*args, **kwargs):
        return await ensure_async(function(*args, **kwargs))

    return call


def _answer_of(content: dict):
    """The answer a display carries (None is an answer), or ``NOTHING``."""
    data = content.get("data")
    if not isinstance(data, dict) or ANSWER_MIME not in data:
        return NOTHING
    if len(json.dumps(data[ANSWER_MIME])) > MAX_ANSWER_CHARS:
        return {"$rocmlab": "object", "type": "answer too large"}
    return data[ANSWER_MIME]


# ---------------------------------------------------------------- loading and running checks


BESIDE = object()  # ``load_checks``' ``kernel`` and ``constants``: the lab's own, beside ``filename``


class LabConstants(dict):
    """``LAB_CONSTANTS``: name -> value of the literal constants the lab's ``lab.py`` defines."""

    def __missing__(self, name):
        raise KeyError(f"lab.py assigns no literal constant {name!r} once at its top level (LAB_CONSTANTS)")


def load_checks(
    source: str,
    filename: str,
    files: dict | None = None,
    parameters: dict | None = None,
    kernel=BESIDE,
    constants=BESIDE,
    lab_text=BESIDE,
) -> list[Check]:
    """The checks a ``checks.py`` defines, in order. ``files``: the lab's hidden data (name ->
    text), which the checks read as ``HIDDEN_FILES``; ``parameters``: the run's parameters
    (``lab_parameters``), read as ``PARAMETERS``, never from the learner's namespace;
    ``kernel``: the lab's ``KernelModule`` (or None); ``constants``: ``lab.py``'s literal
    constants (``lab_constants``), read as ``LAB_CONSTANTS`` (``CATEGORIES = LAB_CONSTANTS["CATEGORIES"]``:
    one copy, the notebook's, never the kernel's); ``lab_text``: ``lab.py``'s text, read as
    ``LAB_SOURCE`` (the course's scripts a check launches: the worker may not see the course, so a
    check never reads a file beside it). By default all three are the lab's beside ``filename``."""
    kernel = kernel_module(Path(filename)) if kernel is BESIDE else kernel
    constants = lab_constants(Path(filename)) if constants is BESIDE else constants
    lab_text = lab_source(Path(filename)) if lab_text is BESIDE else lab_text
    namespace = {
        "__name__": "rocmlab_checks",
        "__file__": filename,
        "HIDDEN_FILES": dict(files or {}),
        "PARAMETERS": dict(parameters or {}),
        "LAB_CONSTANTS": LabConstants(constants or {}),
        "LAB_SOURCE": lab_text or "",
    }
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 (the course's own checks file)
    checks = [v.rocmlab_check for v in namespace.values() if isinstance(getattr(v, "rocmlab_check", None), Check)]
    for item in checks:
        item.kernel = kernel
    return checks


def problems(checks: list[Check], cell_points: dict[str, float]) -> list[str]:
    """What is wrong between a lab's checks and its test cells (``grade_id`` -> points)."""
    found, by_cell, names = [], {}, {c.name for c in checks}
    for item in checks:
        by_cell.setdefault(item.grade_id, []).append(item)
        for other in item.counts_with:
            if other not in names or other == item.name:
                found.append(f"check {item.name}: counts_with names {other!r}, not another check of the file")
        if item.grade_id not in cell_points:
            found.append(f"check {item.name}: no test cell has grade_id {item.grade_id!r}")
        if not (item.rule.get("en", "").strip() and item.rule.get("zh", "").strip()):
            found.append(f"check {item.name}: its rule needs a message in en and zh")
        if not item.points > 0:
            found.append(f"check {item.name}: points must be positive, got {item.points:g}")
    for grade_id, points in cell_points.items():
        total = sum(c.points for c in by_cell.get(grade_id, []))
        if not by_cell.get(grade_id):
            found.append(f"test cell {grade_id}: no check grades it")
        elif not math.isclose(total, points, abs_tol=1e-9):
            found.append(f"test cell {grade_id}: its checks give {total:g} points, the cell has {points:g}")
    return found


@dataclass
class CheckResult:
    grade_id: str
    name: str
    points: float
    max_points: float
    rule: dict
    detail: str = ""  # for the instructor: why it failed (never shown to the learner)
    error: str = ""  # a grading error: the check itself failed, not the learner (``GradingError``)

    @property
    def passed(self) -> bool:
        return self.points >= self.max_points and not self.error


def run_checks(
    checks: list[Check],
    learner: Learner,
    seed: int,
    progress=None,
    reference: Reference | None = None,
    fresh: Fresh | None = None,
) -> list[CheckResult]:
    """Each check's verdict on the learner's answers, in the lab's order; ``reference``: the trusted
    reference kernel the checks that take one are given (none: those checks are grading errors);
    ``fresh``: the fresh kernel the checks that take one are given, which are run after all the
    others (none: grading errors)."""
    results, returned = {}, {}  # check name -> its result; whether the learner's code returned a value in it
    reference = reference or Reference()
    kernel = next((c.kernel for c in checks if c.kernel is not None), None)
    learner.kernel = learner.kernel or kernel
    reference._take_kernel(kernel)
    fresh = fresh or Fresh()
    fresh.asked.kernel = fresh.asked.kernel or kernel
    asked = (learner, fresh.asked)
    for item in [c for c in checks if not c.wants_fresh] + [c for c in checks if c.wants_fresh]:
        values_before = _tally(asked)[1]
        detail, error = _verdict(item, asked, seed, reference, fresh)
        returned[item.name] = _tally(asked)[1] > values_before
        results[item.name] = CheckResult(item.grade_id, item.name, item.points, item.points, item.rule, detail, error)
        if progress:
            progress(item, not (detail or error))
    ordered = [results[c.name] for c in checks]
    for result in ordered:
        if result.detail or result.error:
            result.points = 0.0
        elif not returned[result.name] and not _works(result.grade_id, ordered, returned):
            result.points, result.detail = 0.0, ERRORS_ALONE
    _count_qualifiers(checks, ordered)
    return ordered


def _tally(asked) -> tuple[int, int, int]:
    """Answers, values and unanswered requests of the kernels a check asks (the learner's, the fresh one)."""
    return (
        sum(a.answers for a in asked),
        sum(a.values for a in asked),
        sum(len(a.unanswered) for a in asked),
    )


ERRORS_ALONE = "an error rule counts once the exercise returns right answers on valid inputs"


def _count_qualifiers(checks: list[Check], results: list[CheckResult]) -> None:
    """A rule that qualifies others (``counts_with``) keeps its points only while they pass."""
    by_name = {r.name: r for r in results}
    changed = True
    while changed:
        changed = False
        for item, result in zip(checks, results, strict=True):
            broken = [n for n in item.counts_with if n in by_name and not by_name[n].passed]
            if result.passed and broken:
                result.points, result.detail = 0.0, f"counts together with {', '.join(broken)}, which did not pass"
                changed = True


def _verdict(item: Check, asked: tuple, seed: int, reference: Reference, fresh: Fresh) -> tuple[str, str]:
    """(why the learner's answer broke the rule, why the check itself failed); both empty: passed.
    Only what a kernel of the learner's run answered (``asked``: the learner's, the fresh one) can
    break a rule: an exception before any answer of this check came (its setup), or inside
    ``own_work``, is a grading error."""
    answers_before, _, unanswered_before = _tally(asked)
    extra = {"reference": reference} if item.wants_reference else {}
    if item.wants_fresh:
        extra["fresh"] = fresh
    try:
        item.function(asked[0], Variant(seed, item.name), **extra)
    except (AnswerTimeExhausted, LaunchTimeExceeded) as exc:
        return str(exc), ""
    except NoAnswer as exc:
        return f"no answer: {exc}", ""
    except LearnerRaised as exc:
        return f"your code raised {exc.raised.type}", ""
    except GradingError as exc:
        return "", f"check {item.name}: {str(exc)[:300]}"
    except AssertionError as exc:
        if _tally(asked)[0] == answers_before:
            return "", f"check {item.name}: its setup failed an assertion: {str(exc)[:200]}"
        return (f"wrong: {str(exc)[:300]}" if str(exc) else "wrong answer"), ""
    except Exception as exc:  # noqa: BLE001 (an answer the check could not use: e.g. Opaque in arithmetic)
        if _tally(asked)[0] == answers_before:
            return "", f"check {item.name}: its setup raised {type(exc).__name__}: {str(exc)[:200]}"
        return f"unusable answer: {type(exc).__name__}: {str(exc)[:200]}", ""
    if _tally(asked)[2] > unanswered_before:  # the check caught it; a rule unasked is not kept
        exc = [*asked[0].unanswered, *asked[1].unanswered][-1]
        return (str(exc) if isinstance(exc, (AnswerTimeExhausted, LaunchTimeExceeded)) else f"no answer: {exc}"), ""
    return "", ""


def _works(grade_id: str, results: list[CheckResult], returned: dict) -> bool:
    """Some check of the cell passed on values the learner's code returned: a stub that always
    raises does not earn the cell's error rules."""
    return any(r.grade_id == grade_id and not (r.detail or r.error) and returned[r.name] for r in results)


OWN_KERNEL = "own kernel"  # ``harness_options(reference=...)``: the run's notebook is the course's own


def run_harness(client, manager, config: dict, reference=None, fresh=None) -> dict:
    """The worker's entry: load the checks sent with the run, ask the kernel, return the record
    the grader reads (``{"seed", "checks": [...]}``, or ``{"error"}``). ``reference``: a channel
    to the worker's reference kernel, or why there is none (``rocmlab.execution.reference_kernel``);
    with ``config["reference"]`` ``OWN_KERNEL`` (``rocmlab run``: the
    course's own notebooks) the run's kernel is its own reference. ``fresh``: what starts the run's
    fresh kernel for the checks that take ``fresh`` (``rocmlab.execution.worker.FreshKernels``:
    ``open(manager)`` ends the learner's kernel and run, then gives ``(client, manager)`` of a new
    kernel; ``close()``), or None."""
    seed = int(config["seed"])
    try:
        kernel = config.get("kernel")
        checks = load_checks(
            config["source"],
            config.get("filename", "checks.py"),
            config.get("files"),
            config.get("parameters"),
            KernelModule(kernel["source"], kernel["filename"]) if kernel else None,
            config.get("constants") or {},
            config.get("lab_source") or "",
        )
        allowance = tuple(config.get("launches") or launch_allowance(config["source"], config.get("filename", "")))
    except Exception as exc:  # noqa: BLE001 (a broken checks file grades nothing: say why)
        return {"seed": seed, "error": f"{config.get('filename')}: {type(exc).__name__}: {exc}", "checks": []}
    timeout_s = float(config.get("probe_timeout_s", PROBE_TIMEOUT_S))
    channel = KernelChannel(
        client, manager, timeout_s, float(config.get("answer_budget_s", answer_budget_s(len(checks))))
    )
    learner = Learner(channel)
    checked = _reference(client, manager, config, reference)
    fresh_kernel = _fresh(fresh, manager, channel, timeout_s, (learner, checked), allowance)
    try:
        results = run_checks(checks, learner, seed, reference=checked, fresh=fresh_kernel)
    finally:
        if fresh is not None and fresh_kernel.started:
            fresh.close()
    spent_s = channel.spent_s + (fresh_kernel.channel.spent_s if fresh_kernel.started else 0.0)
    return {
        "seed": seed,
        "requests": learner.requests + fresh_kernel.asked.requests,
        "answer_s": round(spent_s, 2),
        "answer_budget_s": channel.budget_s,
        **({"fresh_start_s": round(fresh.started_s, 2)} if fresh_kernel.started else {}),
        **({"launch_s": round(fresh_kernel.channel.launch_s, 2)} if fresh_kernel.launches else {}),
        "checks": [_as_dict(r) for r in results],
    }


FRESH_CLOSES = "the learner's kernel was shut down for the fresh kernel (ask it before fresh.run)"


def _fresh(kernels, manager, channel: KernelChannel, timeout_s: float, closing: tuple, allowance: tuple) -> Fresh:
    """The checks' ``fresh``: its kernel, when first asked, has what is left of the learner's answer
    budget, and ``allowance`` (``launch_allowance``) for its launches."""
    if kernels is None:
        return Fresh(unavailable="this run has no way to start one", allowance=allowance)
    learner, reference = closing

    def before():
        learner.close(FRESH_CLOSES)
        reference.close(FRESH_CLOSES)

    def opener():
        client, started = kernels.open(manager)
        return KernelChannel(client, started, timeout_s, max(0.0, channel.budget_s - channel.spent_s))

    return Fresh(opener, before=before, allowance=allowance)


def _reference(client, manager, config: dict, given) -> Reference:
    if config.get("reference") == OWN_KERNEL:
        return Reference(
            KernelChannel(client, manager, float(config.get("probe_timeout_s", PROBE_TIMEOUT_S))), own=True
        )
    if isinstance(given, str) or given is None:
        return Reference(unavailable=given or "")
    return Reference(given)


def answer_budget_s(checks: int) -> float:
    """The time a learner's kernel has for all the answers to a lab's ``checks``."""
    return float(max(ANSWER_FLOOR_S, ANSWER_PER_CHECK_S * checks))


def _as_dict(result: CheckResult) -> dict:
    return {**asdict(result), "passed": result.passed}


def read_results(path: Path) -> dict | None:
    """The record ``run_harness`` wrote for a run, or None when it never ran."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def hidden_files(checks_file: Path) -> dict[str, str]:
    """The lab's hidden data beside its checks (``data/*_hidden.*``), for ``HIDDEN_FILES``."""
    from .course.catalog import HIDDEN_DATA

    return {p.name: p.read_text(encoding="utf-8") for p in sorted((checks_file.parent / "data").glob(HIDDEN_DATA))}


def lab_parameters(checks_file: Path, overrides: dict | None = None) -> dict:
    """The parameters a run of the lab sets: the literal values of its ``lab.py`` parameters
    cell (``course.parameters``), then ``overrides`` (the profile's ``parameters``, as papermill
    injects them). The checks read them here: any later cell of the learner's may rebind the kernel's."""
    from .course.parameters import lab_py_parameters

    lab_py = checks_file.parent / "lab.py"
    if not lab_py.exists():  # checks without a lab (a test's): only what the caller gives
        return dict(overrides or {})
    return {**lab_py_parameters(lab_py), **dict(overrides or {})}


def lab_constants(checks_file: Path) -> dict:
    """The literal constants of the lab's ``lab.py`` beside ``checks_file`` (outside its parameters
    cell, each assigned once: ``course.parameters.lab_py_constants``), for ``LAB_CONSTANTS``."""
    from .course.parameters import lab_py_constants

    lab_py = Path(checks_file).parent / "lab.py"
    return lab_py_constants(lab_py) if lab_py.exists() else {}


def lab_source(checks_file: Path) -> str:
    """The text of the lab's ``lab.py`` beside ``checks_file`` ("" where there is none), for ``LAB_SOURCE``."""
    lab_py = Path(checks_file).parent / "lab.py"
    return lab_py.read_text(encoding="utf-8") if lab_py.exists() else ""


def harness_options(
    checks_file: Path,
    seed: int,
    out: Path,
    cell_timeout_s: float,
    parameters: dict | None = None,
    reference: dict | str | None = None,
) -> dict:
    """The engine option that makes a run end with the lab's checks (``papermill_engine``); the
    checks and the lab's kernel-side module travel as text, as the worker may not see the course. ``parameters``: the profile's
    (``Profile.parameters``), over the parameters cell's own values. ``reference``: the worker's
    reference kernel (``rocmlab.execution.reference_kernel.reference_options``), or ``OWN_KERNEL``."""
    source = checks_file.read_text(encoding="utf-8")
    kernel = kernel_module(checks_file)
    probe_timeout_s = min(PROBE_TIMEOUT_S, float(cell_timeout_s))  # a request waits no longer than a cell
    checks = source.count("@check(")
    answers_s = answer_budget_s(checks)
    starting_s = float(reference.get("timeout_s", 0)) if isinstance(reference, dict) else 0.0
    fresh_s = FRESH_START_S if takes_fresh(source, str(checks_file)) else 0.0
    launches, launch_s = launch_allowance(source, str(checks_file))
    return {
        "source": source,
        "files": hidden_files(checks_file),
        "kernel": {"source": kernel.source, "filename": kernel.filename} if kernel else None,
        "constants": lab_constants(checks_file),
        "lab_source": lab_source(checks_file),
        "parameters": lab_parameters(checks_file, parameters),
        "filename": str(checks_file),
        "seed": int(seed),
        "out": str(Path(out).absolute()),  # the worker runs papermill in the notebook's folder
        "probe_timeout_s": float(probe_timeout_s),
        "answer_budget_s": answers_s,
        "launches": [launches, launch_s],
        # beyond the notebook's own limit: every answer, a last interrupted request, and the
        # harness's own work per check; past it the worker ends the run and no check counts
        # and, the first time, the reference kernel's run of the solution
        # and, where some check takes ``fresh``, ending the learner's run and starting that kernel,
        # and the allowance of the launches the lab declares (each may end in an interrupt)
        "budget_s": answers_s
        + RECOVER_S
        + 30
        + CHECK_ALLOWANCE_S * checks
        + starting_s
        + fresh_s
        + launches * (launch_s + RECOVER_S),
        **({"reference": reference} if reference else {}),
    }


def takes_fresh(source: str, filename: str = "checks.py") -> bool:
    """Whether some function of a checks file takes ``fresh`` (read, not run: the worker's budget)."""
    tree = python_ast.parse(source, filename)
    functions = (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return any(a.arg == "fresh" for f in functions for a in [*f.args.args, *f.args.kwonlyargs])


def launch_allowance(source: str, filename: str = "checks.py") -> tuple[int, float]:
    """``(launches, seconds each)`` a checks file allows its ``fresh.launch``es: its top-level literals
    ``LAUNCHES`` and ``LAUNCH_LIMIT_S`` (read, not run: the worker's budget), capped by ``MAX_LAUNCHES``
    and ``MAX_LAUNCH_S``; ``(0, 0.0)`` where it declares neither. ``LabError`` for one without the other,
    or a value that is not a positive number."""
    from .errors import LabError

    declared = {}
    for node in python_ast.parse(source, filename).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("LAUNCHES", "LAUNCH_LIMIT_S"):
                try:
                    declared[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    declared[node.targets[0].id] = None
    if not declared:
        return 0, 0.0
    count, limit_s = declared.get("LAUNCHES"), declared.get("LAUNCH_LIMIT_S")
    if not (type(count) is int and count > 0):
        raise LabError(f"{filename}: LAUNCHES must be a positive integer literal (with LAUNCH_LIMIT_S), got {count!r}")
    if not (type(limit_s) in (int, float) and limit_s > 0):
        raise LabError(f"{filename}: LAUNCH_LIMIT_S must be a positive number literal (with LAUNCHES), got {limit_s!r}")
    return min(count, MAX_LAUNCHES), float(min(limit_s, MAX_LAUNCH_S))


def lab_checks(checks_file: Path, cell_points: dict[str, float], parameters: dict | None = None) -> list[Check]:
    """A lab's checks, loaded and matched to its test cells; LabError naming the file otherwise.
    ``parameters``: a profile's, over the parameters cell's (``lab_parameters``)."""
    from .errors import LabError

    try:
        source = checks_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise LabError(f"{checks_file}: cannot read the lab's checks: {exc}") from exc
    run_parameters = lab_parameters(checks_file, parameters)
    try:
        checks = load_checks(source, str(checks_file), hidden_files(checks_file), run_parameters)
    except Exception as exc:
        raise LabError(f"{checks_file}: the checks do not load: {type(exc).__name__}: {exc}") from exc
    found = problems(checks, cell_points)
    if found:
        raise LabError(f"{checks_file}: " + "; ".join(found))
    return checks
