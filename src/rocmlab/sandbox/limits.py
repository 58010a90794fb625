"""Limits around untrusted notebook code (grading a class, a learner's self-check).

A run goes through ``rocmlab.execution.worker`` like any other; this module only changes *how* its
worker and kernel are started:

- each parallel job slot has one worker (papermill), reused for the slot's runs; it starts
  through a launcher script: as root it gets its own network,
  PID and mount namespaces (``unshare``); inside, loopback is brought up (kernel and worker
  talk over 127.0.0.1), the paths the kernel must not see (solutions, gradebook, other
  submissions) are covered with empty read-only tmpfs mounts; each run asks the worker's
  papermill engine (``rocmlab.execution.papermill_engine``) to cap each cell's output and to interrupt a
  cell that runs past its limit instead of stopping;
- the kernel starts through a kernelspec whose command applies the resource limits
  (address space, processes, file size), switches to an unprivileged grader user (one per
  parallel job, because RLIMIT_NPROC counts per real uid), sets no_new_privs and then starts
  ipykernel. The worker stays root, so the kernel cannot touch the input, output or outcome
  files, which live in root-only folders.

Where bubblewrap (``bwrap``) is installed, it is the isolation instead, as root or as any user
(an instructor grading without root): each run's kernel starts inside its own ``bwrap``, with
no network at all (``--unshare-net``; the worker talks to it over Unix sockets in the run's
folder, ZMQ's ``ipc`` transport), its own PID, IPC and UTS namespaces, ``--die-with-parent``,
the whole file system read-only, private ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/run/lock``, the hidden
paths covered and only the run's work folder writable. As root it still drops to the slot's
grader user. A class graded as root forks its kernels from one zygote per slot instead, in a
``bwrap`` of the same view, each fork in its own namespaces (``rocmlab.sandbox.forkserver``). The
namespace code above is the fallback where bubblewrap is missing.

Without either (no bubblewrap, not root: a grading pod on Kubernetes, whose default seccomp
profile forbids user namespaces) each kernel restricts itself with Landlock (``rocmlab.sandbox.landlock``)
where the Linux kernel has it (ABI 6, Linux 6.12): backend ``"landlock"``, an allow list of what the kernel may read
(the interpreter, the system folders, the exposed paths) and write (its run's work folder), no
TCP, no signal to a process outside its sandbox; it keeps the grader's uid. Without any of them
only the resource limits apply: ``Sandbox.backend`` is ``"none"`` and ``rocmlab grade`` refuses
to run unless told ``--unsafe``. ``Sandbox.isolation``
says which guarantees hold, and the grading summary records it. What runs inside, before any
learner code, is ``rocmlab.sandbox.entry``; one run's limits, policy file and folders are
``rocmlab.sandbox.runs``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from .. import processes
from ..errors import InputError
from ..processes import is_root
from . import bubblewrap, landlock, mounts
from .bubblewrap import bubblewrap_works
from .cgroups import KERNELS, procs_files
from .cgroups import Limits as CgroupLimits
from .entry import PREIMPORTABLE, kernel_argv
from .grader_users import UnsafeLockFolder, claim_users, release_users
from .paths import (
    DEVICES,
    closed_ancestor,
    interpreter_paths,
    split_hidden,
    under_private_temp,
)
from .runs import KERNEL_NAME, Limits, Policy, Run, kernel_variables

if TYPE_CHECKING:
    from ..execution.worker import Worker

# The thread pools a kernel's numerical libraries size from these (OpenMP: torch too; OpenBLAS;
# MKL). Unset, each of ``slots`` kernels starts one thread per core, and on a busy machine the
# idle ones spin: importing numpy costs a kernel twice the CPU on 2 cores.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
BACKENDS = ("bubblewrap", "namespaces", "landlock", "none")
BACKEND_VARIABLE = "ROCMLAB_SANDBOX"  # a backend to use instead of the best one here
# Whether a kernel may bind and connect TCP sockets on 127.0.0.1 (a lab's ``needs = ["loopback-tcp"]``):
# bubblewrap's ``--unshare-net`` (its network.c brings lo up) and the namespace fallback (its entry
# brings lo up) give it a network namespace of its own with loopback; Landlock's net rules name ports, not addresses, so loopback cannot be allowed alone and all
# TCP is denied; without a sandbox it has the machine's.
LOOPBACK_TCP = {"bubblewrap": True, "namespaces": True, "landlock": False, "none": True}
# What a Landlock kernel may read besides the interpreter and the exposed paths (one that holds a
# hidden path is left out), and the GPU device files it may use.
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/opt/rocm")
GPU_DEVICES = ("/dev/kfd", "/dev/dri")
# Model caches the grader's environment names (the gpu profiles' real models): read-only for a
# Landlock kernel, as bubblewrap's read-only view shows them.
MODEL_CACHE_VARIABLES = ("HF_HOME", "HF_HUB_CACHE")


# ------------------------------------------------------------------ host side


def namespaces_work() -> bool:
    """True when ``unshare`` can give us network, PID and mount namespaces here."""
    if not is_root() or not shutil.which("unshare"):
        return False
    return processes.succeeds(["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child", "true"])


class Sandbox:
    """Creates runs for up to ``slots`` parallel jobs under one root-owned base folder."""

    def __init__(
        self,
        limits: Limits | None = None,
        hide: list[Path] | None = None,
        slots: int = 1,
        isolate: bool | None = None,
        switch_user: bool | None = None,
        expose: list[Path] | None = None,
        backend: str | None = None,
        env: dict | None = None,
        prestart: bool = False,
        preimport: list[str] = (),
        reference: bool = False,
    ):
        """``hide``: paths the kernel must not see, except ``expose`` (and the interpreter) below
        them; ``isolate``: False for none; ``backend``: one of ``BACKENDS``, else the best here;
        ``env``: more variables for the kernels; ``prestart``: each run of a slot starts the
        kernel of the slot's next run (a class: the kernel start overlaps the previous notebook).

        With ``prestart`` two kernels of a slot live at once, so each slot alternates between two
        grader users: a running learner's kernel never shares its uid with the next learner's.
        ``preimport``: modules of ``PREIMPORTABLE`` each kernel imports before ipykernel starts (in
        the sandbox, as the grader user), so that a prestarted kernel has the lab's heavy imports done.
        ``reference``: each slot gets one more grader user, for its reference kernel
        (``reference_run``): no learner's kernel shares a uid with it, so none can signal it."""
        self.limits = limits or Limits()
        self.env = dict(env or {})
        self.base = Path(tempfile.mkdtemp(prefix="rocmlab-sandbox-"))
        os.chmod(self.base, 0o711)
        self.backend = backend or choose_backend(isolate)
        self.isolate = self.backend == "namespaces"  # the worker in unshare's namespaces
        self.switch_user = is_root() if switch_user is None else switch_user
        confined = self.backend == "bubblewrap" or self.isolate
        if self.switch_user and not confined and any(closed_ancestor(p) for p in interpreter_paths()):
            self.switch_user = False  # the grader user could not even start Python here
        self.problems: list[str] = []
        self.prestart = prestart
        self.preimport = [m for m in preimport if m in PREIMPORTABLE]
        self._turns = 2 if prestart else 1
        self._stride = self._turns + bool(reference)  # grader users per slot
        self._references: dict[int, Run] = {}
        self._pending: dict[int, Run] = {}
        self._runs_started: dict[int, int] = {}
        self.grader_users = []
        if self.switch_user:
            try:
                self.grader_users = claim_users(max(1, slots) * self._stride)
            except UnsafeLockFolder:
                shutil.rmtree(self.base, ignore_errors=True)
                raise
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                self.problems.append(f"kernels run as this user: {exc}")
                self.switch_user = False
        self.users = [(user.uid, user.gid) for user in self.grader_users]
        # as root each run gets its own tmpfs, which kernels started before it must see
        self.own_space = is_root() and self.backend in ("bubblewrap", "namespaces")
        if self.own_space:
            mounts.sweep(str(self.base.parent / "rocmlab-sandbox-"))  # left by a grader that was killed
            mounts.share(self.base)
        self.cgroup_limits = kernel_cgroup_limits(self.limits)
        # the grader says it (``isolation``); two sandboxes of one process name their cgroups apart
        self.no_cgroup = kernel_cgroups_missing(self.cgroup_limits, self._cgroup_name("probe"))
        hidden = [Path(p).resolve() for p in (hide or [])]
        caches = [c for c in model_caches() if not any(h == c.resolve() or h in c.resolve().parents for h in hidden)]
        self.expose = [*interpreter_paths(), *(expose or []), *caches]
        self.threads = thread_budget(max(1, slots))
        self.hide = [str(p) for p in split_hidden([Path(p) for p in (hide or [])], self.expose)]
        self.workers = [self._new_worker(slot) for slot in range(max(1, slots))]
        self.fork_servers, self._ended = [], []
        if prestart:  # a class: the workers load papermill while the grader sets up its gradebook
            for worker in self.workers:
                worker.start()
            if fork_server_applies(self.backend, self.switch_user):
                self.fork_servers = [self._start_fork_server(slot) for slot in range(len(self.workers))]

    @property
    def isolation(self) -> dict:
        confined = self.backend != "none"
        version = landlock.abi() if self.backend == "landlock" else 0
        return {
            "backend": self.backend,
            "network": confined,  # landlock: TCP; UDP and raw sockets are left to the pod's NetworkPolicy
            "loopback_tcp": LOOPBACK_TCP[self.backend],
            "private_tmp": confined,
            "hidden_paths": self.hide if confined else [],
            "unprivileged_user": self.switch_user,
            "grader_users": [user.name for user in self.grader_users],
            "forked_kernels": bool(self.fork_servers),
            "kernel_cgroup": None
            if self.no_cgroup
            else {"memory_max_mb": self.cgroup_limits.memory_bytes // 2**20, "pids_max": self.cgroup_limits.tasks},
            "no_kernel_cgroup": self.no_cgroup,
            **({"landlock_abi": version} if self.backend == "landlock" else {}),
            "limits": asdict(self.limits),
            "problems": self.problems,
        }

    def _uid_gid(self, slot: int, turn: int = 0) -> tuple[int | None, int | None]:
        return self.users[slot * self._stride + turn] if self.switch_user else (None, None)

    def _new_worker(self, slot: int) -> Worker:
        """The slot's worker: started on its first run, through a launcher in a root-only folder."""
        from ..execution.worker import Worker

        folder = self.base / f"slot{slot}"
        folder.mkdir(mode=0o700)
        uid, gid = self._uid_gid(slot)
        policy = folder / "policy.json"
        policy.write_text(
            json.dumps(
                asdict(
                    Policy(
                        asdict(self.limits),
                        uid,
                        gid,
                        "",
                        self.isolate,
                        self.hide,
                        0,
                        str(folder),
                        expose=[str(p) for p in self.expose],
                    )
                )
            ),
            encoding="utf-8",
        )
        launcher = folder / "python"
        isolated = "exec unshare --net --pid --fork --mount-proc --kill-child --propagation slave -- "
        prefix = isolated if self.isolate else "exec "
        launcher.write_text(
            f"#!/bin/sh\n{prefix}{sys.executable} -m rocmlab.sandbox.entry worker {policy}\n", encoding="utf-8"
        )
        launcher.chmod(0o700)
        return Worker(str(launcher))

    def _start_fork_server(self, slot: int):
        """The slot's zygote (``rocmlab.sandbox.forkserver``) with the slot's view: in a ``bwrap``, or
        in the namespace fallback a mount namespace of its own that takes its worker's view. The
        sandbox's folder is there; each kernel covers it again but for its own run."""
        from ..execution.worker import kernel_environment
        from .forkserver import ForkServer

        folder = self.base / f"slot{slot}"
        socket_path = folder / "zygote.sock"
        zygote = [sys.executable, "-P", "-m", "rocmlab.sandbox.forkserver"]
        if self.isolate:
            view = ["unshare", "--mount", "--propagation", "slave", "--", *zygote]
            view += ["--slot-view", str(folder / "policy.json"), "--parent", str(os.getpid())]
        else:
            view = [*self._bwrap_view(own_pids=False), "--perms", "0711", "--dir", str(self.base)]
            view += ["--bind", str(self.base), str(self.base), "--chdir", "/", *zygote]
        # the font list matplotlib builds when the zygote loads it goes into the slot's folder, which
        # each forked kernel covers; not the grading user's own matplotlib settings
        zygote_env = {**self.threads, "MPLCONFIGDIR": str(folder / "matplotlib"), **self.env}
        env = kernel_environment(f"zygote-{slot}", zygote_env)
        return ForkServer([*view, str(socket_path), *self.preimport], socket_path, env, folder / "zygote.log")

    def new_run(self, slot: int, cell_timeout_s: int, runs_left: int | None = None) -> Run:
        """The slot's next run (made ahead when ``prestart``); with ``prestart`` it also makes the
        run after it, whose kernel starts while this one runs. Runs of a slot are used in turn.

        ``runs_left``: how many runs may still come after this one (None: unknown). No run is made
        ahead once the other slots' runs made ahead are enough for them: at the end of a class a
        kernel started for nobody costs as much CPU as a learner's (without the fork server)."""
        run = self._pending.pop(slot, None)
        if run is not None and run.cell_timeout_s != cell_timeout_s:
            run.cleanup()  # made for other limits: its kernel (if started) ends with the worker's sweep
            run = None
        if run is None:
            run = self._make_run(slot, cell_timeout_s)
        if self.prestart and (runs_left is None or runs_left > len(self._pending)):
            run.upcoming = self._pending[slot] = self._make_run(slot, cell_timeout_s)
        return run

    def reference_run(self, slot: int, cell_timeout_s: int) -> tuple[Run, bool]:
        """The slot's run for its reference kernel (``rocmlab.execution.reference_kernel``), made
        once, under the slot's own reference user, kept until the sandbox closes; whether it is new."""
        if self._stride == self._turns:
            raise ValueError("this sandbox was made without reference=True")
        run = self._references.get(slot)
        if run is not None:
            return run, False
        run = self._references[slot] = self._make_run(slot, cell_timeout_s, turn=self._turns)
        return run, True

    def _make_run(self, slot: int, cell_timeout_s: int, turn: int | None = None) -> Run:
        if turn is None:
            turn = self._runs_started.get(slot, 0) % self._turns
            self._runs_started[slot] = self._runs_started.get(slot, 0) + 1
        folder = Path(tempfile.mkdtemp(prefix=f"run{slot}-", dir=self.base))
        os.chmod(folder, 0o711)
        private = folder / "private"
        private.mkdir(mode=0o700)
        space = folder / "space"  # all the kernel may write: apart from the grader's files in private
        if self.own_space:
            mounts.own_space(space, self.limits.disk_mb)
        else:
            space.mkdir(mode=0o711)
        work = space / "work"
        work.mkdir(mode=0o700)
        uid, gid = self._uid_gid(slot, turn)
        cgroup = "" if self.no_cgroup else self._cgroup_name(folder.name)
        ipc = space / "ipc"  # bubblewrap: the kernel's Unix sockets, which it creates
        ipc.mkdir(mode=0o700)
        if uid is not None:
            os.chown(work, uid, gid)
            os.chown(ipc, uid, gid)
        env = self._run_env(work, private)
        policy = Policy(asdict(self.limits), uid, gid, str(work), self.isolate, self.hide, cell_timeout_s, str(private))
        policy.environment = kernel_variables(env)
        policy.temp = mounts.temp_folders(space) if self.own_space else {}
        policy.preimport = self.preimport
        policy.expose = [str(p) for p in self.expose]
        if cgroup:
            policy.cgroup = procs_files(KERNELS.create(cgroup, self.cgroup_limits))
        policy_path = private / "policy.json"
        if self._forks(slot):
            policy.forked = {
                "cover": [] if under_private_temp([str(self.base)]) else [str(self.base)],
                "keep": [str(ipc)],
            }
        elif self.backend == "bubblewrap":
            view = self._bwrap_view(temp=policy.temp)
            policy.bwrap = bubblewrap.run_argv(view, self.base, private, work, ipc, policy_path)
        elif self.backend == "landlock":
            policy.landlock = self._landlock_view(work, ipc)
        policy_path.write_text(json.dumps(asdict(policy)), encoding="utf-8")
        self._write_kernelspec(private, policy_path, asdict(policy), slot)
        options = self.limits.engine_options()
        if self.backend in ("bubblewrap", "landlock") or policy.forked:  # no network shared with the worker
            options["ipc_path"] = str(ipc / "k")  # Unix sockets in the run's folder
        run = Run(folder, private, work, self.workers[slot], env, uid, options, cell_timeout_s)
        run.space = space if self.own_space else None
        run.cgroup = cgroup
        return run

    def _cgroup_name(self, run: str) -> str:
        """``<grader pid>-<sandbox>-<run>``: the pid tells a later grader whether it may remove it."""
        return f"{os.getpid()}-{self.base.name.removeprefix('rocmlab-sandbox-')}-{run}"

    def _run_env(self, work: Path, private: Path) -> dict:
        """What a run's worker and kernel are told: its folders, offline model hubs, thread pools,
        the lab's variables (``env``)."""
        return {
            "JUPYTER_PATH": str(private / "jupyter"),
            "JUPYTER_RUNTIME_DIR": str(private / "runtime"),
            "HOME": str(work),
            "IPYTHONDIR": str(work / ".ipython"),
            "MPLCONFIGDIR": str(work / ".matplotlib"),
            "TMPDIR": str(work),
            "XDG_CACHE_HOME": str(work / ".cache"),
            "NO_PROXY": "*",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            **self.threads,
            **self.env,
        }

    def _forks(self, slot: int) -> bool:
        """Whether the slot's kernels are forked: not once its zygote has ended (then, as without
        one, each kernel starts in its own ``bwrap``; the summary's problems say so)."""
        if not self.fork_servers:
            return False
        server = self.fork_servers[slot]
        if not server.alive and server not in self._ended:
            self._ended.append(server)
            self.problems.append(f"slot {slot}: the kernel fork server ended: {server.log_tail()}")
        return server.alive

    def _landlock_view(self, work: Path, ipc: Path) -> dict:
        """A Landlock kernel's allow list. Landlock cannot take back part of what it grants, so a
        system folder that holds a hidden path (a course below /usr) is left out; a hidden path
        below an exposed one stays readable, and the summary's problems name it."""
        hidden = [Path(p) for p in self.hide]

        def holds_hidden(path: Path) -> list[Path]:
            return [h for h in hidden if h == path or path in h.parents]

        read = [p for p in SYSTEM_READ if not holds_hidden(Path(p))]
        read += [str(p) for p in model_caches() if not holds_hidden(p) and not any(h in p.parents for h in hidden)]
        for path in self.expose:
            for inside in holds_hidden(Path(path)):
                problem = f"landlock: {inside} is below {path}, which the kernel needs: it stays readable"
                if problem not in self.problems:
                    self.problems.append(problem)
        read += [str(p) for p in self.expose]
        # the import path entry that holds an exposed package (a checkout's src/ on sys.path, from an
        # editable install's .pth): Python lists it to import the package, in the kernel as in any
        # process it starts (`python -m rocmlab.doctor`). Only names can be listed below it (src/
        # holds the package and its egg-info), never a file read; an entry that holds an exposed
        # file alone (the course root, its release matrix) is not listed
        packages = [Path(p) for p in self.expose if (Path(p) / "__init__.py").is_file()]
        listed = sorted({str(p.parent) for p in packages if str(p.parent) in sys.path} - set(read) - set(self.hide))
        # the device files a bubblewrap kernel's /dev holds (/dev/null written to by any subprocess.DEVNULL)
        devices = [*DEVICES, *GPU_DEVICES]
        return {"read": read, "write": [str(work), str(ipc)], "devices": devices, "listed": listed}

    def _bwrap_view(self, own_pids: bool = True, temp: dict | None = None) -> list[str]:
        return bubblewrap.view_argv(
            self.expose, self.hide, own_user=not is_root(), own_pids=own_pids, temp=temp, size_mb=self.limits.disk_mb
        )

    def _write_kernelspec(self, private: Path, policy_path: Path, policy: dict, slot: int) -> Path:
        jupyter = private / "jupyter"
        spec_dir = jupyter / "kernels" / KERNEL_NAME
        spec_dir.mkdir(parents=True)
        spec = {
            "argv": kernel_argv(policy, str(policy_path), "{connection_file}"),
            "display_name": "rocmlab sandbox",
            "language": "python",
            "metadata": {"debugger": False},
        }
        if policy["forked"]:  # the argv only names the policy and connection files to the zygote
            from .forkserver import PROVISIONER_NAME

            server = self.fork_servers[slot]
            spec["metadata"]["kernel_provisioner"] = {
                "provisioner_name": PROVISIONER_NAME,
                "config": {"socket": str(server.socket_path), "zygote": 0 if self.isolate else server.proc.pid},
            }
        if self.backend == "bubblewrap":  # a signal would reach bwrap, not the kernel inside it
            spec["interrupt_mode"] = "message"
        (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
        return jupyter

    def close(self) -> None:
        for worker in self.workers:
            # what still runs is learner code or a kernel started ahead: killed, not asked (saves
            # about 2 s per slot at the end of a class); kill_user below waits for them
            worker.close(kill=True, grace_s=0)
        for uid, _ in self.users:  # a forked kernel's parent reaps it at once, while its zygote lives
            processes.kill_user(uid)
        for server in self.fork_servers:
            server.close()
        for run in [*self._pending.values(), *self._references.values()]:  # made ahead, or a reference's
            run.release()
        if not self.no_cgroup:  # a run its caller never cleaned up still has one
            for name in KERNELS.names():
                if name.startswith(self._cgroup_name("")):
                    KERNELS.kill(name)
        release_users(self.grader_users)  # sweeps again: only then may another run have them
        if self.own_space:
            mounts.unmount(self.base)
        shutil.rmtree(self.base, ignore_errors=True)


def fork_server_applies(backend: str, switch_user: bool) -> bool:
    """Kernels are forked from a zygote where a class is graded as root under bubblewrap or the
    namespace fallback: the fork needs root's rights to leave the zygote's namespaces and drop to a
    grader user. Elsewhere (an instructor without root, Landlock, one learner's check) each kernel
    is a process of its own."""
    return backend in ("bubblewrap", "namespaces") and switch_user and is_root()


def kernel_cgroup_limits(limits: Limits) -> CgroupLimits:
    """A kernel's own cgroup: its memory is what its processes may map together (``memory_mb``)
    and what it may write into its run's own tmpfs (``disk_mb``, charged to whoever writes it);
    its tasks, the grader user's ``max_processes``. 0: no memory ceiling, as ``memory_mb``."""
    memory = (limits.memory_mb + limits.disk_mb) * 2**20 if limits.memory_mb else 0
    return CgroupLimits(memory_bytes=memory, tasks=limits.max_processes)


def kernel_cgroups_missing(limits: CgroupLimits, probe: str) -> str:
    """Why graded kernels get no cgroup of their own here, and what bounds them instead; "" where
    they get one (root, and a cgroup ``probe`` with these limits could be made and removed).
    Removes first the kernels' cgroups of graders that have ended."""
    instead = "each kernel is bounded by its rlimits alone (address space and file size per process, processes per grader user) and its space's size"
    if not is_root():
        return f"no cgroup per kernel (that needs root): {instead}"
    if not KERNELS.version():
        return f"no cgroup per kernel (no cgroup hierarchy with {' and '.join(KERNELS.controllers)} under {KERNELS.root}): {instead}"
    for name in KERNELS.names():
        if _grader_ended(name):  # left by a grader that was killed
            KERNELS.kill(name)
    try:
        KERNELS.create(probe, limits)
    except OSError as exc:
        return f"no cgroup per kernel (cannot write one under {KERNELS.root}: {exc}): {instead}"
    finally:
        KERNELS.kill(probe)
    return ""


def _grader_ended(cgroup: str) -> bool:
    """Whether the grader that named a kernel's cgroup ``<pid>-...`` has ended."""
    pid = cgroup.split("-")[0]
    return pid.isdigit() and not psutil.pid_exists(int(pid))


def model_caches() -> list[Path]:
    """The model caches the grader's environment names (``MODEL_CACHE_VARIABLES``), which its
    kernels read as the grader would, unless hidden."""
    return [Path(os.environ[name]) for name in MODEL_CACHE_VARIABLES if os.environ.get(name)]


def thread_budget(slots: int) -> dict:
    """Each of ``slots`` parallel kernels gets an equal share of this machine's cores for its
    thread pools; a variable the grader's own environment sets is kept as it is."""
    threads = str(max(1, (os.cpu_count() or 1) // slots))
    return {name: os.environ.get(name, threads) for name in THREAD_VARIABLES}


# ------------------------------------------------------------------ inside the namespaces


def choose_backend(isolate: bool | None) -> str:
    """The best backend here, or the one ``$ROCMLAB_SANDBOX`` names (a benchmark or a check of a
    fallback on a machine that has better: an InputError when that one does not work here)."""
    if isolate is False:
        return "none"
    wanted = os.environ.get(BACKEND_VARIABLE)
    if wanted:
        return _wanted_backend(wanted)
    if bubblewrap_works():
        return "bubblewrap"
    if namespaces_work():
        return "namespaces"
    return "landlock" if landlock.abi() >= landlock.SANDBOX_ABI else "none"


def _wanted_backend(name: str) -> str:
    works = {
        "bubblewrap": bubblewrap_works,
        "namespaces": namespaces_work,
        "landlock": lambda: landlock.abi() >= landlock.SANDBOX_ABI,
    }
    if name not in works:
        raise InputError(f"${BACKEND_VARIABLE}={name!r}: expected one of {', '.join(works)}")
    if not works[name]():
        raise InputError(f"${BACKEND_VARIABLE}={name!r}: that sandbox does not work on this machine")
    return name
