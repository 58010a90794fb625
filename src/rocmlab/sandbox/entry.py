"""What runs inside the sandbox, before any learner code: ``python -m rocmlab.sandbox.entry``.

``worker POLICY``: the slot's papermill worker, as root in its namespaces (loopback up, hidden
paths covered, the paths the kernel needs put back). ``kernel POLICY CONNECTION`` (and
``kernel-inside`` under bubblewrap): the kernel's own start, which applies the limits, gives it
private temp folders, drops to the grader user (or, without root or namespaces, restricts itself
with Landlock) and starts ipykernel in the same process.
A slot's kernel fork server (``python -m rocmlab.sandbox.forkserver``) runs ``kernel_entry`` in
each fork: the same steps; in the namespace fallback the zygote first takes the slot's view
(``enter_slot_view``), as its worker does. ``rocmlab.sandbox.limits`` plans and starts these; the policy file it writes is
all they read.
"""

from __future__ import annotations

import ctypes
import fcntl
import importlib
import json
import os
import platform
import resource
import signal
import socket
import struct
import sys
from pathlib import Path

from .paths import DEVICES, GPU_DEVICES, PRIVATE_TEMP, allowed_view, closed_ways, under_private_temp

# Loaded before the learner's code only if the lab imports them (the top-level name), each as what
# it imports ahead: libraries without display side effects at import. matplotlib's font list, built
# when font_manager is imported, costs about 0.3-0.8 s of CPU per kernel; its backend is chosen from
# MPLBACKEND when matplotlib is imported, so that is set first to what ipykernel sets when it starts.
PREIMPORTABLE = {
    "numpy": "numpy",
    "scipy": "scipy",
    "pandas": "pandas",
    "torch": "torch",
    "matplotlib": "matplotlib.font_manager",
}
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def bring_loopback_up() -> None:
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def hide_paths(paths: list[str]) -> None:
    """Cover each folder with an empty read-only tmpfs and each file with /dev/null (this mount ns only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND = 1, 2, 4, 8, 4096
    for path in paths:
        if os.path.isdir(path):
            rc = libc.mount(
                b"tmpfs", path.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k,mode=000"
            )
        elif os.path.exists(path):
            rc = libc.mount(b"/dev/null", path.encode(), None, MS_BIND, None)
        else:
            continue
        if rc != 0:
            raise OSError(ctypes.get_errno(), f"cannot hide {path}")


def _bind(source: str, target: str) -> None:
    MS_BIND, MS_REC = 4096, 16384
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None) != 0:
        raise OSError(ctypes.get_errno(), f"cannot bind {source} to {target}")


def expose_paths(paths: list[Path], scratch: Path) -> None:
    """Make ``paths`` reachable by the grader user: a closed folder above them (e.g. /root holding
    pyenv) is covered with a tmpfs that holds only the way down to each (this mount ns only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for n, (folder, below) in enumerate(closed_ways(paths).items()):
        keeps = []
        for m, path in enumerate(below):
            keep = scratch / f"keep{n}-{m}"
            keep.mkdir(mode=0o700, exist_ok=True)
            _bind(path, str(keep))
            keeps.append((keep, path))
        if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", 0, b"size=64k,mode=0711") != 0:
            raise OSError(ctypes.get_errno(), f"cannot cover {folder}")
        for keep, path in keeps:
            Path(path).mkdir(mode=0o711, parents=True, exist_ok=True)
            _bind(str(keep), path)


def apply_limits(limits: dict, uid: int | None) -> None:
    if limits["memory_mb"] > 0:  # 0: no address-space limit (GPU runtimes reserve huge virtual ranges)
        mem = limits["memory_mb"] * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    size = limits["max_file_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    procs = limits["max_processes"]
    if uid is None:  # our own uid: the count includes the user's other processes
        import psutil

        procs += sum(1 for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == os.getuid())
    resource.setrlimit(resource.RLIMIT_NPROC, (procs, procs))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    PR_SET_NO_NEW_PRIVS = 38
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("failed to drop privileges")


def enter_slot_view(policy: dict) -> None:
    """The namespace fallback's view of a slot (this process's own mount namespace): the allow-list
    of the machine that bubblewrap gives its kernels, with the sandbox's folder writable, and the
    hidden paths covered where they lie in it. Its worker and its zygote take it."""
    scratch = Path(policy["scratch"])
    enter_allowed_view(policy["expose"], [str(scratch.parent)], scratch)
    os.chdir(scratch)
    hide_paths(policy["hide"])


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    enc = lambda v: None if v is None else v.encode()  # noqa: E731
    if libc.mount(enc(source), target.encode(), enc(fstype), flags, enc(data)) != 0:
        raise OSError(ctypes.get_errno(), f"cannot mount {source or fstype} on {target}")


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


def _shown(root: str, path: str) -> str:
    return root + path


def _bind_into(root: str, source: str, path: str, *, writable: bool = False) -> None:
    target = root + path
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        Path(target).touch()
    _mount(source, target, None, MS_BIND | MS_REC)
    if not writable:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _minimal_dev(root: str) -> None:
    """/dev with the usual device files (and the GPU's), its links, and an empty /dev/shm."""
    dev = root + "/dev"
    os.makedirs(dev, mode=0o755, exist_ok=True)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=0755,size=64k")
    for device in (*DEVICES, *GPU_DEVICES):
        if os.path.exists(device):
            _bind_into(root, device, device, writable=True)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{dev}/{name}")
    os.makedirs(f"{dev}/shm")
    _mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=16m")  # each kernel gets its own


def enter_allowed_view(expose: list[str], writable: list[str], scratch: Path) -> None:
    """This mount namespace's root becomes an allow-list of the machine (``paths.allowed_view``,
    as bubblewrap builds it): a tmpfs holding the system's folders and ``expose`` read-only, a
    minimal /dev, /proc, empty temp folders and ``writable`` (the sandbox's folder)."""
    root = str(scratch / "view")
    os.makedirs(root, mode=0o700, exist_ok=True)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    _minimal_dev(root)
    _bind_into(root, "/proc", "/proc", writable=True)
    for tmp in filter(os.path.isdir, PRIVATE_TEMP):
        if not os.path.isdir(root + tmp):
            os.makedirs(root + tmp, mode=0o755)
        os.chmod(root + tmp, 0o1777)
    for kind, source, path in allowed_view(expose):
        if kind == "symlink":
            os.makedirs(os.path.dirname(root + path), mode=0o755, exist_ok=True)
            os.symlink(source, root + path)
        else:
            _bind_into(root, source, path)
    for path in writable:
        _bind_into(root, path, path, writable=True)
    _pivot_root(root)


def _pivot_root(root: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    MNT_DETACH = 2
    os.chdir(root)
    if libc.syscall(SYS_PIVOT_ROOT[platform.machine()], b".", b".") != 0:
        raise OSError(ctypes.get_errno(), f"cannot make {root} the root")
    if libc.umount2(b".", MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "cannot leave the machine's root")
    os.chdir("/")


def worker_entry(policy: dict) -> int:
    """``python -m rocmlab.sandbox.entry worker POLICY``: a ``rocmlab.execution.worker`` worker, as root, in the namespaces."""
    if policy["isolate"]:
        bring_loopback_up()
        enter_slot_view(policy)
    else:
        os.chdir(policy["scratch"])
    from ..execution.worker import block_unused_imports, serve
    from .cgroups import kill_all

    block_unused_imports()
    return serve(kill_cgroups=kill_all)


def private_temp_folders(
    work: str, expose: list[str], cover: list[str] = (), keep: list[str] = (), temp: dict | None = None
) -> None:
    """This kernel's own mount namespace with empty /tmp, /var/tmp, /dev/shm and /run/lock (the namespace
    fallback and forked kernels; bubblewrap does this itself); its work folder, which lives under
    /tmp, and the exposed paths below them (a checkout in /tmp) are put back. ``cover``: more
    folders emptied the same way; ``keep``: more folders put back. ``temp``: a temp folder's own
    folder in the run's space, bound there instead of a new tmpfs (what the kernel writes there
    counts against its space)."""
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWNS, MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV = 0x00020000, 16384, 1 << 18, 2, 4
    if libc.unshare(CLONE_NEWNS) != 0 or libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "cannot make a private mount namespace for the kernel")
    kept = {path: os.open(path, os.O_PATH) for path in [work, *keep, *(p for _, p in under_private_temp(expose))]}
    spaces = {tmp: os.open(folder, os.O_PATH) for tmp, folder in (temp or {}).items() if os.path.isdir(tmp)}
    try:
        for tmp in [*PRIVATE_TEMP, *cover]:
            if tmp in spaces:
                _bind(f"/proc/self/fd/{spaces[tmp]}", tmp)
            elif os.path.isdir(tmp) and libc.mount(
                b"tmpfs", tmp.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777"
            ):
                raise OSError(ctypes.get_errno(), f"cannot give the kernel a private {tmp}")
        for path, fd in kept.items():
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, mode=0o711 if path == work else 0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                Path(path).touch()
            _bind(f"/proc/self/fd/{fd}", path)
    finally:
        for fd in [*kept.values(), *spaces.values()]:
            os.close(fd)


def mount_own_proc() -> None:
    """A /proc that shows this PID namespace only (a forked kernel, PID 1 of its own)."""
    MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
    if ctypes.CDLL(None, use_errno=True).mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None):
        raise OSError(ctypes.get_errno(), "cannot mount the kernel's own /proc")


def load_kernel(preimport: list[str]) -> None:
    """Import ipykernel without its debugger (importing debugpy costs about 0.35 s of every
    kernel's start, and a graded kernel is never debugged), after the lab's heavy modules of
    ``PREIMPORTABLE`` (no name reaches the learner's namespace): a kernel started ahead, or forked
    from a zygote, has them loaded when the learner's notebook comes."""
    sys.modules["debugpy"] = None
    if "matplotlib" in preimport:
        os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)
    for name in preimport:
        if name in PREIMPORTABLE:
            importlib.import_module(PREIMPORTABLE[name])
    importlib.import_module("ipykernel.kernelapp")


def start_ipykernel(connection_file: str) -> int:
    """ipykernel in this process (one interpreter start per kernel, or none when forked)."""
    from ipykernel import kernelapp

    # Plain tracebacks: the grader reads only a failure's cell line, name and value, and IPython's
    # default (Context) costs about 0.2 s of CPU for a fresh kernel's first failing test.
    sys.argv = [sys.argv[0], "-f", connection_file, "--InteractiveShell.xmode=Plain"]
    kernelapp.launch_new_instance(argv=sys.argv[1:])
    return 0


def detach_output() -> None:
    """The kernel's stdin, stdout and stderr become /dev/null. Inherited, they are its worker's
    log or its zygote's, which hold other kernels' output: a kernel could open them again
    through /proc/self/fd. What the kernel prints goes to the notebook over its sockets."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def kernel_entry(policy: dict, connection_file: str, cwd: str = "") -> int:
    """Limits, then the grader user, then ipykernel, in ``cwd`` (else the folder it started in),
    with only the environment the policy allows. A forked kernel (``policy["forked"]``) is PID 1
    of its own namespaces: it also gets its own /proc, and the sandbox's folder is covered."""
    uid, gid = policy["uid"], policy["gid"]
    home = policy["home"]
    if uid is not None:  # the runtime folder is root-only: hand the kernel its own copy
        copy = Path(home) / ".connection.json"
        copy.write_bytes(Path(connection_file).read_bytes())
        os.chown(copy, uid, gid)
        copy.chmod(0o600)
        connection_file = str(copy)
    forked = policy.get("forked", {})
    cwd = cwd or os.getcwd()
    if (policy["isolate"] or forked) and home:
        cover, keep = forked.get("cover", []), forked.get("keep", [])
        private_temp_folders(home, policy.get("expose", []), cover, keep, policy.get("temp"))
    if forked:
        mount_own_proc()
        bring_loopback_up()
    # after the last mount: entered before, the folder would be the covered one, another mount
    # than its own absolute path (a rename from one spelling to the other fails with EXDEV)
    os.chdir(cwd)
    apply_limits(policy["limits"], uid)
    detach_output()
    if uid is not None:
        drop_privileges(uid, gid)
    if forked:  # the change of user cleared it
        from ..processes import die_with_parent

        die_with_parent(signal.SIGKILL)
    if home:
        os.environ.update({"HOME": home, "TMPDIR": home})
    keep_only_allowed_environment(policy.get("environment"))
    if policy.get("landlock"):
        restrict_with_landlock(policy["landlock"], connection_file)
    load_kernel(policy.get("preimport", []))
    return start_ipykernel(connection_file)


def keep_only_allowed_environment(allowed: list[str] | None) -> None:
    """The kernel's environment becomes the variables ``allowed`` names (``runs.Policy.environment``):
    the grader's own (its PWD, tokens, paths of its checkouts) never reach learner code. None: a
    policy written before the list existed, kept as it is."""
    if allowed is None:
        return
    for name in set(os.environ) - set(allowed):
        del os.environ[name]


def restrict_with_landlock(view: dict, connection_file: str) -> None:
    """The kernel's own Landlock ruleset (``rocmlab.sandbox.landlock``): it still reads its connection
    file, which lives in the run's private folder."""
    from .landlock import Ruleset

    Ruleset(
        read=[*view["read"], connection_file],
        write=view["write"],
        devices=view["devices"],
        listed=view.get("listed", []),
    ).apply()


def enter_bubblewrap(policy: dict, policy_path: str, connection_file: str) -> int:
    """Start this kernel again inside its ``bwrap``, with its connection file (named only now)."""
    argv = kernel_argv(policy, policy_path, connection_file)
    os.execv(argv[0], argv)
    return 1  # not reached


def kernel_argv(policy: dict, policy_path: str, connection_file: str) -> list[str]:
    """The kernel's command line (``connection_file`` may be jupyter's ``{connection_file}``): with
    bubblewrap, ``bwrap`` itself starts ``kernel-inside``, saving a Python start per kernel.

    ``-P``: the kernel starts in the learner's work folder, whose files must not shadow the
    modules this entry point imports while it still runs with the grader's rights."""
    entry = [sys.executable, "-P", "-m", "rocmlab.sandbox.entry"]
    if not policy.get("bwrap"):
        return [*in_own_cgroup(policy), *entry, "kernel", policy_path, connection_file]
    # ipykernel polls its parent's pid, which its own PID namespace cannot see: --die-with-parent instead
    argv = [*policy["bwrap"], "--unsetenv", "JPY_PARENT_PID", "--ro-bind", connection_file, connection_file]
    return [*in_own_cgroup(policy), *argv, *entry, "kernel-inside", policy_path, connection_file]


# Writes "0" (this process) into each cgroup.procs file named before "--", then execs the rest:
# bwrap and all it starts are in the kernel's cgroup, which is no longer visible inside bwrap's view.
JOIN_THEN_EXEC = 'while [ "$1" != -- ]; do echo 0 > "$1" || exit 1; shift; done; shift; exec "$@"'


def in_own_cgroup(policy: dict) -> list[str]:
    """The command line's prefix that puts a kernel started on its own into its cgroup (a forked
    kernel joins through descriptors its worker passes, ``rocmlab.sandbox.forkserver``)."""
    if not policy.get("cgroup") or policy.get("forked"):
        return []
    return ["/bin/sh", "-c", JOIN_THEN_EXEC, "rocmlab-cgroup", *policy["cgroup"], "--"]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("worker", "kernel", "kernel-inside"):
        print("usage: python -m rocmlab.sandbox.entry {worker|kernel} POLICY [CONNECTION]", file=sys.stderr)
        return 2
    policy = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    if argv[0] == "worker":
        return worker_entry(policy)
    if argv[0] == "kernel" and policy.get("bwrap"):
        return enter_bubblewrap(policy, argv[1], argv[2])
    return kernel_entry(policy, argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
