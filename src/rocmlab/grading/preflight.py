"""What must hold before any learner code runs, for ``rocmlab grade`` and ``rocmlab check``:
the paths a sandboxed kernel sees of the course, the model cache (the course model, lab 03's
adapter) readable by its user, and a sandbox backend that gives the kernel what the lab ``needs``.

A kernel that cannot read the model, or whose ranks cannot reach each other, loses points for
every learner, the perfect one included, so each stops the run with what fixes it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..course.catalog import LOOPBACK_TCP
from ..errors import CommandFailed
from ..root import ROOT_VARIABLE
from ..sandbox.limits import BACKEND_VARIABLE
from ..sandbox.limits import LOOPBACK_TCP as GIVES_LOOPBACK_TCP

MATRIX = Path("env") / "matrix.toml"


def model_cache() -> Path:
    """The cache root the grader's kernels are given (``$ROCMLAB_CACHE`` for them)."""
    from ..assets.cache import cache_root

    return cache_root().resolve()


def course_view(root: Path, *also_hidden: Path) -> tuple[list[Path], list[Path]]:
    """(hide, expose) for a sandbox: the whole course root and this user's home are hidden (the
    solutions, .git, results/, grades/, earlier gradebooks); the kernel still gets the release
    matrix and the model cache (the interpreter and the rocmlab package are always exposed)."""
    hide = [Path(root), Path.home(), *also_hidden]
    expose = [Path(root) / MATRIX, model_cache()]
    return hide, expose


def sandbox_env(root: Path | None) -> dict:
    """What a sandboxed kernel is told: the model cache, and the course root, whose release matrix
    it may read (a lab's ``releases.load_matrix()``; the rest of the root is hidden)."""
    env = {"ROCMLAB_CACHE": str(model_cache())}
    if root is not None:
        env[ROOT_VARIABLE] = str(root)
    return env


def uses_tiny_model(parameters: dict) -> bool:
    from ..assets.tiny_model import MODEL_NAME

    return any(value == MODEL_NAME for value in parameters.values())


def unreadable(path: Path, other_user: bool, top: Path | None = None) -> str:
    """Why ``path`` (a file or a folder, and what is in it) cannot be read by the kernel's user:
    another user (``other_user``, the grader users of a root run) or this one. "" when it can.
    The folders above ``top`` are not checked: the sandbox opens the way to ``top`` itself (a
    cache under /root)."""
    parts = [p for p in reversed(path.parents) if top is None or top == p or top in p.parents]
    for folder in parts:
        if other_user and not folder.stat().st_mode & stat.S_IXOTH:
            return f"{folder} cannot be entered by other users"
    for current, dirs, files in os.walk(path):
        for name in [current, *(os.path.join(current, f) for f in files)]:
            mode = os.stat(name).st_mode
            need = (stat.S_IROTH | stat.S_IXOTH) if stat.S_ISDIR(mode) else stat.S_IROTH
            if other_user and mode & need != need:
                return f"{name} is mode {stat.S_IMODE(mode):04o}"
            if not other_user and not os.access(name, os.R_OK):
                return f"{name} is not readable"
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(current, d))]
    return ""


def check_model_cache(parameters: dict, other_user: bool) -> None:
    """Raise ``CommandFailed`` when a lab run with ``parameters`` needs the offline model and the
    kernel's user could not read it."""
    if not uses_tiny_model(parameters):
        return
    from ..assets.tiny_model import model_dir, read_valid_manifest

    target = model_dir(model_cache())
    _require_readable(
        target,
        read_valid_manifest(target) is not None,
        "the offline model",
        "rocmlab assets build-model",
        other_user,
        rebuild=", or rebuild it with `rocmlab assets build-model --force`, which builds it world-readable",
    )


def no_sandbox(at_risk: str) -> str:
    """Why no grading may start where no sandbox backend works (``choose_backend`` gives "none"):
    learner code would run with the grader's rights over ``at_risk``; and the fixes."""
    return (
        f"no sandbox here: learner code would run with your rights, over {at_risk}. Install bubblewrap "
        "(`apt-get install bubblewrap`; in a container, allow user namespaces), grade as root, or grade on a "
        "Linux kernel with Landlock ABI 6 (6.12 or later; in a container, a seccomp profile that allows its "
        "system calls)"
    )


def lacks_loopback_tcp(needs, backend: str) -> bool:
    """Whether a lab's ``needs`` name loopback TCP and the sandbox ``backend`` gives a kernel none."""
    return LOOPBACK_TCP in needs and not GIVES_LOOPBACK_TCP[backend]


def check_sandbox_gives(lab, backend: str) -> None:
    """Raise ``CommandFailed`` when ``lab`` needs loopback TCP (its ``needs``) and the sandbox
    ``backend`` gives a kernel none: every learner's ranks would fail to rendezvous."""
    if not lacks_loopback_tcp(lab.needs, backend):
        return
    raise CommandFailed(
        f"lab {lab.id} cannot be graded on the {backend} sandbox backend: its ranks talk over TCP on "
        f'127.0.0.1 ({lab.folder / "lab.toml"}: needs = ["{LOOPBACK_TCP}"]), and a {backend} kernel may bind '
        "and connect no TCP socket, so every learner, the reference solution included, would lose those "
        "checks; nobody was graded. Grade it as root, or where bubblewrap works (`apt-get install "
        "bubblewrap`; a container must allow user namespaces), whose kernels get a network namespace of "
        f"their own with loopback; where a better backend works but another was forced, unset "
        f"{BACKEND_VARIABLE} or set {BACKEND_VARIABLE}=bubblewrap (or =namespaces, as root)"
    )


_LEARNER_NO_LOOPBACK = {
    "en": (
        "rocmlab check cannot check lab {lab} on this machine: the lab starts several processes (ranks) "
        "that talk to each other over TCP on 127.0.0.1, and the sandbox the check uses here ({backend}) "
        "lets your notebook open no TCP connection, so every test of the ranks would fail whatever your "
        "code. Nothing was run. Run the notebook itself (Run All) to see its visible tests, or run "
        "rocmlab check on a machine where bubblewrap works. Your grade is not affected: the lab is graded "
        "only in a sandbox that gives the ranks their loopback network."
    ),
    "zh": (
        "rocmlab check 无法在这台机器上检查实验 {lab}：该实验会启动多个进程（rank），它们通过 127.0.0.1 上的 "
        "TCP 互相通信；而这里自检使用的沙箱 {backend} 不允许 notebook 建立任何 TCP 连接，所以无论代码"
        "对错，rank 相关的测试都会失败。什么都没有运行。请直接在 notebook 中运行全部单元（Run All）查看可见"
        "测试，或在能使用 bubblewrap 的机器上运行 rocmlab check。这不影响你的成绩：该实验只在给 rank 提供"
        "回环网络的沙箱中评分。"
    ),
}
_LEARNER_FORCED = {
    "en": " ({variable}={backend} is set in your environment: unset it to let the check pick a better sandbox.)",
    "zh": "（你的环境设置了 {variable}={backend}：取消它，自检即可选用更合适的沙箱。）",
}


def check_learner_sandbox_gives(lab_id: str, needs, backend: str, lang: str) -> None:
    """``check_sandbox_gives`` for a learner's self-check of lab ``lab_id``, whose ``needs`` come
    from its lab.toml or, for a notebook checked alone, its metadata: ``CommandFailed`` in the
    notebook's language (``lang``, "zh" or else English), saying which lab, why its ranks cannot
    run here, and what the learner can do instead."""
    if not lacks_loopback_tcp(needs, backend):
        return
    lang = lang if lang in _LEARNER_NO_LOOPBACK else "en"
    message = _LEARNER_NO_LOOPBACK[lang].format(lab=lab_id, backend=backend.capitalize())
    if os.environ.get(BACKEND_VARIABLE) == backend:
        message += _LEARNER_FORCED[lang].format(variable=BACKEND_VARIABLE, backend=backend)
    raise CommandFailed(message)


def check_adapter_cache(requires, other_user: bool) -> None:
    """Raise ``CommandFailed`` when the profile's ``requires`` names lab 03's QC adapter and the
    kernel's user could not read it: a sandboxed kernel cannot write the cache to train it."""
    if not requires.qc_adapter:
        return
    from ..assets.tiny_model import MODEL_NAME
    from ..lab.qc_adapter import adapter_dir, read_manifest

    target = adapter_dir(MODEL_NAME, cache_dir=model_cache())
    found = read_manifest(target) is not None
    _require_readable(target, found, "lab 03's QC adapter", "python -m rocmlab.lab.qc_adapter", other_user)


def _require_readable(target: Path, found: bool, what: str, build: str, other_user: bool, rebuild: str = "") -> None:
    """The cached asset ``what`` in ``target``: present (``found``), else build it with ``build``;
    readable by the kernel's user, else the chmod that fixes it."""
    if not found:
        raise CommandFailed(
            f"{what} is not in the cache ({target}): build it first with `{build}` "
            "(set ROCMLAB_CACHE for another cache folder)"
        )
    problem = unreadable(target, other_user, top=model_cache())
    if problem:
        who = "the sandbox's grader users" if other_user else "this user"
        raise CommandFailed(
            f"{what} cannot be read by {who}: {problem}; every cell that loads it would fail "
            "(in grading: for every learner, the perfect one included). "
            f"Fix it with `chmod -R a+rX {target}` (and a+x on the folders above it){rebuild}"
        )
