"""Kernels forked from a zygote that has ipykernel and the lab's heavy modules loaded.

Starting a graded kernel is mostly imports (ipykernel, numpy: about 0.2 s of CPU each time), and a
class starts one kernel per learner. Where a class is graded as root, each slot has one zygote
instead: ``python -m rocmlab.sandbox.forkserver`` inside a ``bwrap`` with the slot's view of the
machine (read-only, no network, hidden paths covered), or, in the namespace fallback, in a mount
namespace of its own with the view its worker has (hidden paths covered). For each kernel the
slot's worker asks it over a Unix socket in the slot's root-only folder, and the fork:

- starts a session and leaves the zygote's PID, network, IPC and UTS namespaces;
- forks the kernel, PID 1 of the new ones, and sends the worker its pid and a pidfd;
- waits for it, sends it the signals the worker asks for over the same socket (a SIGKILL ends
  everything in the kernel's namespace), and kills it if the worker ends first or closes the socket.

The kernel takes ``rocmlab.sandbox.entry.kernel_entry``'s steps: its own mount namespace with
empty temp folders and the sandbox's folder covered except the run's work and socket folders,
its own /proc, loopback, the limits, the run's grader user, no_new_privs.

The zygote is root, not dumpable, and outside every kernel's namespaces: a kernel sees neither
its process nor its socket. What a kernel shares with the zygote is memory laid out before the
fork (address-space layout, Python's hash seed; numpy's random state is drawn again), which
tells a learner nothing about another learner's kernel, a process of another user.
``ForkProvisioner`` is the worker's side, a jupyter_client kernel provisioner (``kernel.json``
names it).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from pathlib import Path

from jupyter_client.provisioning import LocalProvisioner
from traitlets import Integer, Unicode

from ..processes import die_with_parent
from .cgroups import join_through
from .entry import enter_slot_view, kernel_entry, load_kernel

PROVISIONER_NAME = "rocmlab-fork"
CONNECT_TIMEOUT_S = 60
MAX_CGROUP_FILES = 4  # cgroup v1: one cgroup.procs per controller (memory, pids, freezer)
REQUEST = {"policy": str, "connection_file": str, "env": dict, "cwd": str}  # what a worker sends
CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x04000000, 0x08000000, 0x20000000, 0x40000000


# ---------------------------------------------------------------- host side


class ForkServer:
    """One slot's zygote, started in its ``bwrap`` (``argv``) and ended with ``close``."""

    def __init__(self, argv: list[str], socket_path: Path, env: dict, log: Path):
        self.socket_path, self.log = socket_path, log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self) -> str:
        """Its exit status and the last lines it wrote (after it ended)."""
        lines = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        return f"exit status {self.proc.poll()}" + "".join(f" | {line}" for line in lines)

    def close(self) -> None:
        """End the zygote; its forks' parent-death signals end them (``Sandbox.close`` first ends
        every process of its grader users, which a learner's code cannot escape)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class ForkedKernel:
    """``subprocess.Popen``'s interface (what jupyter_client and the engine call) for a kernel that
    is not this process's child. Its pidfd tells when it ended but not its status, which is its
    parent's: ``returncode`` is minus the first signal sent from here, else 0. Signals go over
    ``control`` to the kernel's parent, which sends them on: a worker in a PID namespace of its
    own (the namespace fallback) cannot signal a process outside it. Closing ``control`` kills it."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int, pidfd: int, control: socket.socket):
        self.pid, self.pidfd, self.control, self.returncode = pid, pidfd, control, None
        self._signal = 0

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.pidfd], [], [], 0)[0]:
            self.returncode = -self._signal
            self._close()
        return self.returncode

    def _close(self) -> None:
        os.close(self.pidfd)
        self.control.close()

    def __del__(self):
        if self.returncode is None:
            self._close()

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            select.select([self.pidfd], [], [], left)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            self._signal = self._signal or signum
            with contextlib.suppress(OSError):  # its parent has gone: so has the kernel
                self.control.sendall(struct.pack("i", signum))

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def fork_kernel(
    socket_path: str, zygote: int, request: dict, cgroup: list[int] = (), timeout_s: float = CONNECT_TIMEOUT_S
) -> ForkedKernel:
    """Ask the slot's zygote for a kernel, waiting while it still loads its modules; a clear error
    at once when it has ended. ``zygote``: its pid (its ``bwrap``'s), or 0 where the worker cannot
    see it (the namespace fallback's worker has a PID namespace of its own): then a zygote that
    ended before it listened shows as the timeout. ``cgroup``: descriptors of the kernel's own
    cgroup's ``cgroup.procs`` files, which the kernel writes itself into before anything else."""
    deadline = time.monotonic() + timeout_s
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with _closed_on_error(conn):
        while True:
            try:
                conn.connect(socket_path)
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if isinstance(exc, ConnectionRefusedError) or (zygote and _ended(zygote)):
                    raise RuntimeError(f"the kernel fork server at {socket_path} has ended") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the kernel fork server at {socket_path} did not start in {timeout_s} s"
                    ) from None
                time.sleep(0.02)
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], list(cgroup))
        message, fds, _flags, _addr = socket.recv_fds(conn, 4096, 1)
        if not fds:
            raise RuntimeError(
                f"the kernel fork server at {socket_path} gave no kernel: {message.decode(errors='replace')}"
            )
    return ForkedKernel(json.loads(message)["pid"], fds[0], conn)


@contextlib.contextmanager
def _closed_on_error(conn: socket.socket):
    try:
        yield
    except BaseException:
        conn.close()
        raise


def _ended(pid: int) -> bool:
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([pidfd], [], [], 0)[0])
    finally:
        os.close(pidfd)


class ForkProvisioner(LocalProvisioner):
    """jupyter_client's local provisioner, with the kernel forked by the slot's zygote; the
    kernelspec's ``argv`` ends with the run's policy file and the connection file."""

    socket = Unicode(help="the zygote's Unix socket").tag(config=True)
    zygote = Integer(help="the pid of the zygote (its bwrap's), 0 where the worker cannot see it").tag(config=True)

    async def launch_kernel(self, cmd: list[str], **kwargs):
        env = {k: v for k, v in kwargs["env"].items() if k != "JPY_PARENT_PID"}  # ipykernel's parent is not us
        policy, connection_file = cmd[-2:]
        self.cwd = str(kwargs.get("cwd") or os.getcwd())  # papermill changes folder instead
        cgroup = [
            os.open(path, os.O_WRONLY)
            for path in json.loads(Path(policy).read_text(encoding="utf-8")).get("cgroup", [])
        ]
        try:
            self.process = fork_kernel(
                self.socket,
                self.zygote,
                {"policy": policy, "connection_file": connection_file, "env": env, "cwd": self.cwd},
                cgroup,
            )
        finally:
            for fd in cgroup:
                os.close(fd)
        self.pid, self.pgid = self.process.pid, None  # signals go through the pidfd
        return self.connection_info


# ---------------------------------------------------------------- inside the zygote's bwrap


def serve_forks(socket_path: str) -> int:
    """The zygote's loop: one kernel per connection, answered with its pid and a pidfd."""
    # What is loaded now is shared with every fork until written to; a garbage collection in a
    # fork would write to every object it tracks, copying their pages. Frozen, it leaves them.
    gc.freeze()
    PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    # A kernel whose parent ended comes to this process, and Linux reaps both at once (SIGCHLD
    # ignored): a run's cleanup never waits on a zombie of its grader user.
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
        server.bind(socket_path + ".new")
        os.chmod(socket_path + ".new", 0o600)
        server.listen(8)
        os.rename(socket_path + ".new", socket_path)  # a worker never finds it before the listen
        while True:
            conn, _ = server.accept()
            with conn:
                _answer(server, conn)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """A worker's request line, and the descriptors sent with it (its kernel's cgroup)."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, MAX_CGROUP_FILES)
    while data and not data.endswith(b"\n"):
        more = conn.recv(1 << 16)
        if not more:
            break
        data += more
    return json.loads(data), fds


def _answer(server: socket.socket, conn: socket.socket) -> None:
    cgroup = []
    try:
        request, cgroup = _receive(conn)
        wrong = [key for key, kind in REQUEST.items() if not isinstance(request.get(key), kind)]
        if wrong:
            raise ValueError(f"expected {', '.join(f'{k} ({REQUEST[k].__name__})' for k in wrong)}")
        peer_pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        worker = os.pidfd_open(peer_pid)
    except (OSError, ValueError, AttributeError) as exc:
        _close_all(cgroup)
        conn.sendall(f"bad request: {exc}".encode())
        return
    if os.fork() == 0:
        code = 1
        try:
            server.close()
            code = forked_kernel(request, worker, conn, cgroup)
        except BaseException as exc:  # noqa: BLE001 (a failed start: said in the log and to the worker)
            traceback.print_exc()
            with contextlib.suppress(OSError):
                conn.sendall(f"cannot start the kernel: {type(exc).__name__}: {exc}".encode())
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(worker)
    _close_all(cgroup)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def forked_kernel(request: dict, worker: int, conn: socket.socket, cgroup: list[int] = ()) -> int:
    """In the zygote's child: new namespaces, and the kernel as PID 1 of them, whose pid and pidfd
    go to the worker (a SIGKILL to it ends everything in its namespace); this process waits.
    The kernel first joins its own cgroup through ``cgroup``'s descriptors (this process stays in
    the zygote's: a kernel killed for its memory never takes its watcher along)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    die_with_parent(signal.SIGKILL)
    policy = json.loads(Path(request["policy"]).read_text(encoding="utf-8"))
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS):
        raise OSError(ctypes.get_errno(), "cannot give the kernel its own namespaces")
    kernel = os.fork()
    if kernel:
        _close_all(cgroup)
        pidfd = os.pidfd_open(kernel)
        with conn:
            socket.send_fds(conn, [json.dumps({"pid": kernel}).encode()], [pidfd])
            return _watch(kernel, pidfd, worker, conn)
    for fd in cgroup:
        join_through(fd)
    _close_all(cgroup)
    conn.close()
    os.close(worker)
    die_with_parent(signal.SIGKILL)
    _reseed()
    os.environ.clear()
    os.environ.update(request["env"])
    return kernel_entry(policy, request["connection_file"], cwd=request["cwd"])


def _watch(kernel: int, pidfd: int, worker: int, control: socket.socket) -> int:
    """Wait for the kernel, sending it the signals its worker asks for over ``control``; kill it if
    the worker ends first or closes ``control``. Its exit code."""
    while pidfd not in (ready := select.select([pidfd, worker, control], [], [])[0]):
        asked = control.recv(4, socket.MSG_WAITALL) if control in ready else b""
        signum = struct.unpack("i", asked)[0] if len(asked) == 4 and worker not in ready else signal.SIGKILL
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            signal.pidfd_send_signal(pidfd, signum)
        if signum == signal.SIGKILL:
            break
    code = os.waitstatus_to_exitcode(os.waitpid(kernel, 0)[1])
    return code if code >= 0 else 128 - code


def _reseed() -> None:
    """A fork copies the zygote's random state: each kernel draws its own (``random`` reseeds itself)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def main(argv: list[str]) -> int:
    """``python -m rocmlab.sandbox.forkserver [--slot-view POLICY --parent PID] SOCKET MODULE...``:
    the zygote, with the modules loaded that its kernels will have (``entry.PREIMPORTABLE``),
    serving forks on ``SOCKET``. ``--slot-view``: first take the slot's view from its worker's
    policy file (the namespace fallback, in a mount namespace of its own; bubblewrap gives it the
    view instead) and end with ``--parent``, the grader, as bwrap's ``--die-with-parent`` does."""
    parser = argparse.ArgumentParser(prog="python -m rocmlab.sandbox.forkserver")
    parser.add_argument("--slot-view", metavar="POLICY")
    parser.add_argument("--parent", type=int, metavar="PID")
    parser.add_argument("socket")
    parser.add_argument("modules", nargs="*")
    args = parser.parse_args(argv)
    if args.parent:
        die_with_parent(signal.SIGKILL, args.parent)
    if args.slot_view:
        enter_slot_view(json.loads(Path(args.slot_view).read_text(encoding="utf-8")))
    load_kernel(args.modules)
    return serve_forks(args.socket)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
