"""Spawners of the rocmlab hub: local processes with per-user limits, the course delivered on spawn.

``CourseSpawner`` runs each user's server as that Unix user (PAM accounts, needs root);
``DemoCourseSpawner`` runs every server as the hub's own user with a home under the hub's data
folder (the ``--demo`` mode: no isolation between users). Both

- set resource limits in the child before it execs (``RLIMIT_AS`` per process, ``RLIMIT_NPROC``
  per Unix user where users are real), inherited by every kernel the server starts, and give it a
  private ``/tmp`` and its own log (what the child does: ``rocmlab.hub.server_child``);
- copy the built student notebooks of the chosen labs (from ``labs_dir``: the smoke build
  ``labs/<lang>/``, or the hub's render of another profile) into the home on spawn (never over a
  learner's existing folder) and, for instructors, the solution notebooks into the course
  root's ``source/`` where nbgrader's formgrader generates and releases them;
- with real accounts, create a missing home owned by its user, and (``private_homes``) close a
  home others may enter (Debian's useradd makes them 755), so learners cannot read each
  other's answers;
- with real accounts, end every process of a learner's account when their server stops;
- where systemd runs the machine, put each learner's server in a scope of its own with a memory,
  CPU and task ceiling for all it starts (``rocmlab.hub.scopes``);
- share the GPUs (every server sees all), spread them (each server sees the least used one), or
  give each learner slices of their own (``rocmlab.hub.devices``, ``rocmlab.hub.slices``);
- point the server at the role's Jupyter config (learners get no formgrader) and at the shared
  nbgrader config (course id, exchange root, course root or student id).
"""

from __future__ import annotations

import asyncio
import grp
import os
import pwd
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, SimpleLocalProcessSpawner
from jupyterhub.traitlets import ByteSpecification
from traitlets import Bool, Float, Integer, List, Unicode

from ..sandbox.cgroups import LEARNERS, Limits, join, procs_files
from . import loopback
from .delivery import as_user, deliver_as_user, deliver_lab
from .exchange_layout import ExchangeOwners, ensure_learner
from .labs import COURSE_ID
from .language import set_lab_language, ui_environment
from .scopes import ScopeLimits, confine, systemd_runs_here
from .server_child import (
    PRIVATE_TEMP,
    SERVER_LOG,
    cache_environment,
    limit_resources,
    own_log,
    private_paths,
    private_tmp,
    show_only,
    tmpfs_options,
)
from .slices import SliceHolder

# Deliveries run here, never in the event loop's default executor (which stopping servers and
# ending their processes use): one learner's FIFOs and start/cancel cycles hold at most one thread.
DELIVERY_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rocmlab-delivery")
CONFIG_FOLDER = Path("env") / "jupyterhub"  # in the course repository: nbgrader_config.py, jupyter/<role>/
ROLES = ("instructor", "learner")


def prepare_home(home: Path, owner: tuple[int, int] | None, private: bool) -> None:
    """The home exists; with a real ``owner`` a new one is theirs (mode 700), and with ``private`` a
    home of theirs that others may enter is closed to group and others. A home the user does not
    own (a shared or system folder) is never changed."""
    if owner is None:
        home.mkdir(parents=True, exist_ok=True)
        return
    if not home.exists():
        home.mkdir(parents=True, mode=0o700)
        os.chown(home, *owner)
    status = home.stat()
    if private and status.st_uid == owner[0] and status.st_mode & 0o077:
        home.chmod(status.st_mode & 0o700)


def kfd_gpu_count(topology: Path = Path("/sys/class/kfd/kfd/topology/nodes")) -> int:
    """GPUs the ROCm kernel driver lists (nodes with a non-zero gpu_id; CPUs have 0)."""
    count = 0
    for gpu_id in topology.glob("*/gpu_id"):
        try:
            count += gpu_id.read_text().strip() not in ("", "0")
        except OSError:
            continue
    return count


def spread_gpu(assigned: dict, user: str, count: int) -> int:
    """The GPU index of ``user``'s server under the spread policy: theirs if already assigned,
    else the one the fewest running servers use (lowest index on a tie); recorded in ``assigned``."""
    if user not in assigned:
        loads = [0] * count
        for gpu in assigned.values():
            loads[gpu] += 1
        assigned[user] = loads.index(min(loads))
    return assigned[user]


class CourseSpawner(SliceHolder, LocalProcessSpawner):
    """Real Unix accounts: the server runs as the user, in the user's home; traits set by jupyterhub_config.py."""

    course_repo = Unicode(help="the rocmlab checkout: labs/, solutions/, autograder/").tag(config=True)
    lang = Unicode("en", help="language of the delivered notebooks (en or zh)").tag(config=True)
    labs = List(Unicode(), help="lab ids delivered to every home on spawn").tag(config=True)
    labs_dir = Unicode(
        "",
        help="folder of the built student notebooks delivered, one sub-folder per lab "
        "(default: <course_repo>/labs/<lang>; `rocmlab hub --profile gpu` renders "
        "its own)",
    ).tag(config=True)
    instructor_group = Unicode("instructors", help="hub group (or Unix group) of instructors").tag(config=True)
    course_id = Unicode(COURSE_ID, help="nbgrader course id").tag(config=True)
    exchange_root = Unicode(help="nbgrader exchange root shared by all users").tag(config=True)
    course_folder = Unicode("course", help="instructor's nbgrader course root, relative to the home").tag(config=True)
    max_processes = Integer(0, help="RLIMIT_NPROC for the user's processes (0: none)").tag(config=True)
    private_homes = Bool(
        True, help="close each real home to group and others on spawn (learners cannot read each other's answers)"
    ).tag(config=True)
    hub_marker = Unicode("", help="value of ROCMLAB_HUB_ID in every server's environment").tag(config=True)
    gpu_policy = Unicode(
        "shared",
        help="shared: every server sees every GPU; spread: each server sees one GPU "
        "(ROCR_VISIBLE_DEVICES), the one the fewest running servers use",
    ).tag(config=True)
    gpu_count = Integer(0, help="GPUs of this machine for the spread policy (0: none)").tag(config=True)
    _gpu_of: dict = {}  # user -> GPU index of their running server, shared by the hub's spawners
    end_learner_processes = Bool(
        True,
        help="when a learner's server stops, or is found to have exited on its own, end every process "
        "of their Unix account (what they started in the background or detached outlives the server "
        "otherwise); instructors' are kept",
    ).tag(config=True)
    exchange_uid = Integer(
        -1, help="owner of the exchange's folders (the hub's uid; -1: leave the exchange alone)"
    ).tag(config=True)
    exchange_gid = Integer(-1, help="group of the exchange's folders (the instructors')").tag(config=True)
    private_tmp = Bool(
        True,
        help="give each server a mount namespace with its own empty /tmp, /var/tmp, /dev/shm and /run/lock "
        "(needs root; where the kernel refuses, TMPDIR and the caches in the home remain)",
    ).tag(config=True)
    own_logs = Bool(True, help="each server logs to ~/.rocmlab-server.log, owned by its user").tag(config=True)
    delivery_timeout_s = Float(
        30, help="seconds one lab's delivery into a home may take (a FIFO or a hung file system there)"
    ).tag(config=True)
    scope_memory_max = ByteSpecification(
        0, help="systemd: MemoryMax of a learner's whole server, kernels included (0: none)"
    ).tag(config=True)
    scope_cpu_percent = Integer(0, help="systemd: CPUQuota of a learner's server, 100 per core (0: none)").tag(
        config=True
    )
    scope_tasks_max = Integer(0, help="systemd: TasksMax of a learner's server (0: none)").tag(config=True)
    tmpfs_max = ByteSpecification(
        0,
        help="size of each private tmpfs (/tmp, /var/tmp, /dev/shm, /run/lock) of a server (0: a quarter of the memory ceiling)",
    ).tag(config=True)
    _cleaned = True  # False while a started server's account has not been cleaned up after
    _delivering: dict = {}  # user -> threading.Event of their delivery in flight (set: cancelled)
    _cancel_delivery = None

    def home(self) -> Path:
        return Path(pwd.getpwnam(self.user.name).pw_dir)

    account_is_the_learners_own = True  # ending its processes ends only this learner's

    def owner(self) -> tuple[int, int] | None:
        entry = pwd.getpwnam(self.user.name)
        return entry.pw_uid, entry.pw_gid

    _instructor = None  # the role, decided on the hub's loop when the server starts (the thread
    # that prepares the home must not touch the hub's database session)

    def is_instructor(self) -> bool:
        if self._instructor is not None:
            return self._instructor
        if self.instructor_group in {group.name for group in self.user.groups}:
            return True
        try:
            return self.user.name in grp.getgrnam(self.instructor_group).gr_mem
        except KeyError:
            return False

    def role(self) -> str:
        return "instructor" if self.is_instructor() else "learner"

    def course_root(self) -> Path:
        return self.home() / self.course_folder

    def get_env(self):
        env = super().get_env()
        env.update(self.course_env())
        return env

    def course_env(self) -> dict:
        """What the user's server and nbgrader need to know about the course and the user's role."""
        configs = Path(self.course_repo) / CONFIG_FOLDER
        env = {
            "ROCMLAB_HUB_ROLE": self.role(),
            "ROCMLAB_HUB_ID": self.hub_marker,
            "ROCMLAB_ROOT": self.course_repo,
            "ROCMLAB_COURSE_ID": self.course_id,
            "ROCMLAB_EXCHANGE": self.exchange_view(),
            **cache_environment(self.home()),
            "JUPYTER_CONFIG_PATH": os.pathsep.join([str(configs / "jupyter" / self.role()), str(configs)]),
            "PATH": os.pathsep.join([str(Path(self.cmd[0]).parent), os.environ.get("PATH", "/usr/bin:/bin")]),
        }
        if self.is_instructor():
            env["ROCMLAB_COURSE_ROOT"] = str(self.course_root())
        if self.gpu_policy == "spread" and self.gpu_count > 0:
            env["ROCR_VISIBLE_DEVICES"] = str(spread_gpu(CourseSpawner._gpu_of, self.user.name, self.gpu_count))
        env.update(ui_environment(self.lang))
        return env

    def exchange_view(self) -> str:
        """The user's nbgrader exchange root: a learner's own view (rocmlab.hub.exchange_layout),
        an instructor's the exchange itself."""
        if self.is_instructor() or self.exchange_gid < 0:
            return self.exchange_root
        from .exchange_layout import VIEWS

        return str(Path(self.exchange_root).parent / VIEWS / self.user.name)

    def ensure_exchange(self) -> None:
        """A learner's own inbound and feedback folders and view (the hub makes those of the
        learner group at start; this covers a learner added since)."""
        if self.is_instructor() or self.exchange_gid < 0:
            return
        owner = self.owner()
        ensure_learner(
            Path(self.exchange_root).parent,
            self.course_id,
            ExchangeOwners(self.exchange_uid, self.exchange_gid),
            self.user.name,
            owner[0] if owner else os.getuid(),
        )

    def make_preexec_fn(self, name):
        switch_user = super().make_preexec_fn(name)
        memory, processes = int(self.mem_limit or 0), self.max_processes
        private, home, own = self.private_tmp and os.geteuid() == 0, self.home(), self.own_logs
        needed = [home, self.course_repo, self.exchange_root, self.labs_dir, self.cmd[0] if self.cmd else ""]
        needed += [os.environ.get(variable, "") for variable in ("ROCMLAB_CACHE", "HF_HOME")]
        paths = private_paths(needed) if private else []
        shared = {p for p in PRIVATE_TEMP if os.path.isdir(p)} - set(paths)
        if private and shared:
            self.log.warning(
                "rocmlab: %s stay shared: the home, course or exchange is inside", ", ".join(sorted(shared))
            )

        procs = procs_files(self.make_cgroup())
        options = tmpfs_options(self.tmpfs_size())
        render_nodes, render_folder = self.render_folder_view() if paths else ([], "")

        def preexec():
            limit_resources(memory, processes)
            if procs:  # into the learner's cgroup before anything of theirs runs
                join(procs)
            if paths and private_tmp(paths, options) and render_nodes:
                show_only(render_nodes, render_folder)  # /dev/dri: their slice's nodes only
            if switch_user:
                switch_user()
            if own:
                own_log(home)

        return preexec

    def deliver_course(self) -> list[str]:
        """Copy the labs into the home (and the instructor's sources into the course root)."""
        home, owner, delivered = self.home(), self.owner(), []
        prepare_home(home, owner, self.private_homes)
        if not owner:
            set_lab_language(home, self.lang)
        built = Path(self.labs_dir) if self.labs_dir else Path(self.course_repo) / "labs" / self.lang
        for index, lab_id in enumerate(self.labs):
            if self._cancel_delivery is not None and self._cancel_delivery.is_set():
                break  # the start was cancelled: deliver nothing more
            changelog = Path(self.course_repo) / "solutions" / lab_id / "CHANGELOG.md"
            if owner:  # a real account: written by the learner's own uid (hub.delivery)
                lang = self.lang if index == 0 else ""
                try:
                    done = deliver_as_user(
                        owner,
                        built / lab_id,
                        home / lab_id,
                        changelog,
                        lang,
                        timeout_s=self.delivery_timeout_s,
                        cancelled=self._cancel_delivery,
                    )
                except OSError as exc:  # the learner's home refused it (a link, a full disk): their server still starts
                    self.log.warning("rocmlab: %s not delivered to %s: %s", lab_id, self.user.name, exc)
                    continue
            else:
                done = deliver_lab(built / lab_id, home / lab_id, None, changelog)
            if done and done.action != "current":
                delivered.append(lab_id)
            if done and done.action == "updated":
                self.log.info(
                    "rocmlab: %s %s -> %s for %s: %s", lab_id, done.previous, done.version, self.user.name, done.note
                )
        if self.is_instructor():
            try:
                self.write_sources(owner)
            except OSError as exc:  # the instructor's home refused it: their server still starts
                self.log.warning("rocmlab: course sources not written for %s: %s", self.user.name, exc)
        return delivered

    def write_sources(self, owner) -> None:
        """Each lab's nbgrader source into ``<course root>/source/<lab>/`` unless there: read here,
        written by the instructor's own uid (``as_user``), so the hub never writes where the
        instructor decides what a path is (``~/course/source`` may be a link to /etc)."""
        import nbformat

        from ..course.catalog import HIDDEN_DATA, discover, select
        from ..course.notebooks import solution_notebook

        sources = {}
        for lab in select(discover(Path(self.course_repo)), list(self.labs)) if self.labs else []:
            nb = solution_notebook(lab, self.lang)
            nbformat.validate(nb)
            files = {f"{lab.id}.ipynb": nbformat.writes(nb).encode("utf-8")}
            if lab.data_dir.is_dir():
                for path in sorted(lab.data_dir.rglob("*")):
                    if path.is_file() and not path.is_symlink() and not path.match(HIDDEN_DATA):
                        files[str(Path("data") / path.relative_to(lab.data_dir))] = path.read_bytes()
            sources[lab.id] = files
        folder = self.course_folder

        def work(base: Path = Path(".")):  # in the forked child: the sources are in its memory
            made = []
            for lab_id, files in sources.items():
                target = base / folder / "source" / lab_id
                if os.path.lexists(target):
                    continue
                for name, content in files.items():
                    (target / name).parent.mkdir(parents=True, exist_ok=True)
                    (target / name).write_bytes(content)
                made.append(lab_id)
            return made

        if owner:
            as_user(
                owner,
                self.home(),
                work,
                self.delivery_timeout_s,
                f"the course sources of {self.user.name}",
                self._cancel_delivery,
            )
        else:
            work(self.home())

    def tmpfs_size(self) -> int:
        """Each private tmpfs of a server: ``tmpfs_max``, and a quarter of the learner's memory
        ceiling at most (the four of them fit within it)."""
        ceiling = int(self.scope_memory_max or 0) // 4
        size = int(self.tmpfs_max or 0)
        return min(size, ceiling) if size and ceiling else size or ceiling

    def cgroup_wanted(self) -> bool:
        """A learner's server (not an instructor's) gets a cgroup of the hub's own: as root, with
        limits set, where systemd does not run the machine (there a scope does it)."""
        owner = self.owner()
        return bool(
            owner
            and os.geteuid() == 0
            and not self.is_instructor()
            and self.account_is_the_learners_own
            and self.scope_limits().properties()
            and not systemd_runs_here()
            and LEARNERS.version()
        )

    def make_cgroup(self) -> list:
        if not self.cgroup_wanted():
            return []
        limits = self.scope_limits()
        made = LEARNERS.create(self.user.name, Limits(limits.memory_bytes, limits.cpu_percent, limits.tasks))
        self.log.info("rocmlab: the server of %s runs in the cgroup %s (%s)", self.user.name, made[0], limits)
        return made

    async def poll(self):
        status = await super().poll()
        if status is not None and not self._cleaned:
            await self.clean_up()  # the server exited on its own (killed, crashed, File > Shut Down)
        return status

    async def clean_up(self) -> None:
        """End every process of a learner's account, off the hub's event loop."""
        self._cleaned = True
        CourseSpawner._gpu_of.pop(self.user.name, None)
        owner = self.owner()
        if (
            self.end_learner_processes
            and self.account_is_the_learners_own
            and owner
            and owner[0] not in (0, os.getuid())
            and not self.is_instructor()
        ):
            from ..processes import kill_user

            loop = asyncio.get_running_loop()
            if LEARNERS.version() and not systemd_runs_here():  # the whole cgroup at once, then any stragglers
                await loop.run_in_executor(None, LEARNERS.kill, self.user.name)
            await loop.run_in_executor(None, kill_user, owner[0])
            self.log.info("rocmlab: ended the processes of %s with their server", self.user.name)
        self.give_back_slices()  # after its processes ended: an open render node stays open until then

    async def stop(self, now=False):
        cancel = CourseSpawner._delivering.get(self.user.name)
        if cancel is not None:  # a start still delivering: its child is killed
            cancel.set()
        await super().stop(now=now)
        self._cleaned = False
        await self.clean_up()

    def prepare(self) -> list[str]:
        """Everything done before the server starts (runs in a thread, not on the hub's loop)."""
        self.ensure_exchange()
        return self.deliver_course()

    async def start(self):
        self._instructor = None
        self._instructor = self.is_instructor()
        delivered = await self.prepare_in_pool()
        if delivered:
            self.log.info("rocmlab: delivered %s to %s (%s)", ", ".join(delivered), self.user.name, self.role())
        if self.own_logs:
            self.log.info("rocmlab: the server of %s logs to %s", self.user.name, self.home() / SERVER_LOG)
        self.take_slices()  # on the hub's loop: the one book of who holds which slice
        try:
            started = await super().start()
        except BaseException:
            self.give_back_slices()
            raise
        self._cleaned = False
        await self.confine_learner()
        await self.refuse_a_squatted_port(started)
        return started

    async def refuse_a_squatted_port(self, started) -> None:
        """Before the hub routes to a server of its own account: wait (up to ``http_timeout``) until
        its port listens, and stop the start when another account listens there, who took the port
        first (issue 48: a learner's listener would get a classmate's cookies and pages)."""
        owner = self.owner()
        if not (isinstance(started, tuple) and owner and self.account_is_the_learners_own):
            return
        ip, port = started
        deadline = time.monotonic() + self.http_timeout
        while time.monotonic() < deadline:
            squatters = loopback.others_listening(ip or "127.0.0.1", port, owner[0])
            if squatters:
                await self.stop(now=True)
                raise RuntimeError(
                    f"the server of {self.user.name} could not have its port {port}: uid "
                    f"{', '.join(map(str, sorted(squatters)))} listens there; start it again (it gets another port)"
                )
            if loopback.listening_uids(ip or "127.0.0.1", port) or await self.poll() is not None:
                return
            await asyncio.sleep(0.2)

    async def prepare_in_pool(self) -> list[str]:
        """``prepare`` in the hub's delivery pool (``DELIVERY_POOL``, not the event loop's executor,
        which stopping servers needs), at most one per user: a start while the user's previous one
        is still delivering is refused. A cancelled start (or a stop) kills its delivery's child."""
        name = self.user.name
        if name in CourseSpawner._delivering:
            raise RuntimeError(f"the previous start of {name} is still delivering the labs: try again in a moment")
        cancel = self._cancel_delivery = CourseSpawner._delivering[name] = threading.Event()
        future = asyncio.get_running_loop().run_in_executor(DELIVERY_POOL, self.prepare)
        future.add_done_callback(lambda _: CourseSpawner._delivering.pop(name, None))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            cancel.set()
            raise

    def scope_limits(self) -> ScopeLimits:
        return ScopeLimits(
            int(self.scope_memory_max or 0), self.scope_cpu_percent, self.scope_tasks_max, self.slice_devices()
        )

    async def confine_learner(self) -> None:
        """A learner's server (not an instructor's, who grades) in its own systemd scope with the
        limits above, where systemd runs the machine; a scope systemd refuses stops the server."""
        owner = self.owner()
        limits = self.scope_limits()
        if not owner or os.geteuid() != 0 or self.is_instructor() or not limits.properties():
            return
        if not systemd_runs_here():  # the per-process and per-account limits only
            return
        loop = asyncio.get_running_loop()
        try:
            scope = await loop.run_in_executor(None, confine, self.user.name, self.pid, limits)
        except (OSError, TimeoutError, subprocess.SubprocessError) as exc:
            self.log.error("rocmlab: %s: stopping the server", exc)
            await self.stop(now=True)
            raise
        self.log.info("rocmlab: the server of %s runs in %s (%s)", self.user.name, scope, limits)


class DemoCourseSpawner(CourseSpawner, SimpleLocalProcessSpawner):
    """Every server runs as one Unix user: the hub's, or ``run_as`` (set when the hub runs as root,
    so that no learner runs as root); nbgrader tells learners apart by ROCMLAB_STUDENT_ID.

    nbgrader 0.9 names the student after the process's Unix user (``pwd.getpwuid(os.getuid())``),
    which is the same for everyone here, so the shared nbgrader config sets
    ``CourseDirectory.student_id`` from this variable instead.
    """

    run_as = Unicode("", help="Unix user every demo server runs as (default: the hub's own)").tag(config=True)
    account_is_the_learners_own = False  # every learner's: a stopping server ends only its own process

    def home(self) -> Path:
        return Path(self.home_dir)

    def owner(self) -> tuple[int, int] | None:
        if not self.run_as:
            return None
        entry = pwd.getpwnam(self.run_as)
        return entry.pw_uid, entry.pw_gid

    def make_preexec_fn(self, name):
        enter_home = SimpleLocalProcessSpawner.make_preexec_fn(self, name)  # the home made and entered
        memory, processes, home, own = int(self.mem_limit or 0), self.max_processes, self.home(), self.own_logs
        switch_user = None
        if self.run_as:
            from jupyterhub.spawner import set_user_setuid

            switch_user = set_user_setuid(self.run_as, chdir=False)

        def preexec():
            limit_resources(memory, processes)
            enter_home()
            if switch_user:
                switch_user()
            if own:
                own_log(home)

        return preexec

    def course_env(self) -> dict:
        env = super().course_env()
        if not self.is_instructor():
            env["ROCMLAB_STUDENT_ID"] = self.user.name
        return env
