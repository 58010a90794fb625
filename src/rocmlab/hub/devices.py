"""A GPU slice per learner on one workshop server: the node's devices, who has which, what fits, and
the isolation that makes a slice the learner's own.

**Inventory.** Every device the ROCm kernel driver lists in its topology (``probes.kfd_gpus``) is a
slice: a whole GPU in SPX mode, or one partition (an MI300X in CPX mode is 8 devices of 38 CUs, each
with a render node of its own). The partitions of one physical GPU share its ``unique_id``; in NPS4
two CPX partitions allocate from one 48 GiB pool.

**Assignment.** A learner gets one slice, or two of the same physical GPU for the labs that launch
two ranks (04, 05, 10), the least used GPU first; theirs until their server stops.

**Isolation.** ``ROCR_VISIBLE_DEVICES`` only picks a device: a learner who unsets it would see all the
render nodes the ``render`` group may open. Here the hub (root) makes the slice's render node the
learner's own (owner the learner, mode 0600, no group) while their server runs, and closes it again (root only)
when it stops; a free slice is nobody's; KFD serves a GPU only to a process that opened its render node
(``AMDKFD_IOC_ACQUIRE_VM`` takes the render node's descriptor, and ROCm's thunk skips a node whose
render device it cannot open). ``/dev/kfd``, "the main compute interface shared by all GPUs" (AMD,
https://rocm.docs.amd.com/en/docs-5.3.3/deploy/docker.html), which ROCm's packages leave open to the
``render`` group or to all (ROCT's README, https://github.com/ROCm/ROCT-Thunk-Interface), is closed
to a group of its own while the hub runs (``KFD_GROUP``: root and that group, mode 0660, any ACL
dropped), a group no account belongs to: the hub adds it to the supplementary groups of a slice
holder's server only (``rocmlab.hub.slices``), as AMD's containers get the devices they are given
(``docker run --device /dev/kfd --device /dev/dri/renderD<N>``, the group added with
``--group-add``; https://rocm.docs.amd.com/projects/install-on-linux/en/latest/how-to/docker.html).
A learner's SSH session, an instructor's server and a server that holds no slice cannot open it.
Where systemd runs the machine, the learner's scope also gets a device allow-list
(``DevicePolicy=closed``, ``DeviceAllow=`` for ``/dev/kfd`` and the slice's render nodes,
systemd.resource-control(5)), enforced by the kernel's cgroup device filter for every process in
the scope whatever its user and files say.

**Admission.** A lab's ``requires`` (ranks and ``gpu_mem_gb`` per rank) is compared with the slice:
one that does not fit is refused with a message naming the lab, its need and the slice.
"""

from __future__ import annotations

import grp
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .. import probes
from ..lab import peaks

KFD = "/dev/kfd"
KFD_GROUP = ("ROCMLAB_HUB_KFD_GROUP", "rocmlab-gpu")  # the variable naming it, and its default
ACL_XATTR = "system.posix_acl_access"  # acl(5): an ACL could open /dev/kfd to named users
FREED_MODE = 0o660  # a free render node: root and the render group, as udev leaves it
OWNED_MODE = 0o600


@dataclass(frozen=True)
class Slice:
    """One device of the node a learner may be given."""

    index: int  # position among the node's GPU devices (what ROCR_VISIBLE_DEVICES would number)
    render_node: str  # /dev/dri/renderD<minor>
    gpu: int  # the physical GPU (KFD unique_id, else the index)
    gfx: str
    cus: int
    pool_gib: float  # memory the device can allocate from (its NPS pool, or the whole GPU)
    pool_sharers: int  # devices allocating from that pool
    mode: str  # "CPX/NPS4", "SPX/NPS1", "" when not partitioned

    @property
    def share_gib(self) -> float:
        """What one device can count on when every device on its pool is in use."""
        return self.pool_gib / self.pool_sharers

    def describe(self) -> str:
        kind = f"{self.mode} partition" if self.mode else "GPU"
        return f"{self.gfx} {kind} {self.render_node} ({self.cus} CUs, {self.share_gib:g} GiB)"


def inventory(machine: probes.Machine) -> list[Slice]:
    """The node's slices from the KFD topology (and amd-smi's partition modes, where it runs)."""
    gpus = probes.kfd_gpus(machine)
    modes = probes.partition_modes(machine)
    per_gpu = Counter(g.unique_id or i for i, g in enumerate(gpus))
    slices = []
    for index, device in enumerate(gpus):
        physical = device.unique_id or index
        pools = peaks.MEMORY_PARTITIONS.get(modes[1], 1) if modes else 1
        sharers = max(1, per_gpu[physical] // pools)
        slices.append(
            Slice(
                index,
                device.render_node,
                physical,
                device.gfx,
                device.cus,
                device.memory_bytes / 2**30,
                sharers,
                "/".join(modes) if modes else "",
            )
        )
    return slices


class Assignments:
    """Who has which slices. One instance per hub; every call on the hub's event loop."""

    def __init__(self, slices: list[Slice]):
        self.slices = slices
        self.held: dict[str, list[Slice]] = {}

    def assign(self, user: str, count: int = 1) -> list[Slice]:
        """``user``'s slices: theirs if they hold them (the same count), else ``count`` free slices of
        one physical GPU, on the GPU with the fewest slices held (on a node of whole GPUs, ``count``
        GPUs). RuntimeError when none is left."""
        if user in self.held and len(self.held[user]) == count:
            return self.held[user]
        self.release(user)
        taken = {s.index for held in self.held.values() for s in held}
        free_by_gpu: dict[int, list[Slice]] = {}
        for candidate in self.slices:
            if candidate.index not in taken:
                free_by_gpu.setdefault(candidate.gpu, []).append(candidate)
        load = Counter(s.gpu for held in self.held.values() for s in held)
        fitting = [gpu for gpu, free in free_by_gpu.items() if len(free) >= count]
        whole_gpus = all(n == 1 for n in Counter(s.gpu for s in self.slices).values())
        if not fitting and whole_gpus and len(free_by_gpu) >= count:  # unpartitioned: whole GPUs of the node
            chosen = sorted(free_by_gpu, key=lambda g: (load[g], g))[:count]
            self.held[user] = [free_by_gpu[g][0] for g in chosen]
            return self.held[user]
        if not fitting:
            raise RuntimeError(
                f"no {count} free slice(s) of one GPU left for {user}: "
                f"{len(taken)} of {len(self.slices)} slices are held"
            )
        gpu = min(fitting, key=lambda g: (load[g], g))
        self.held[user] = free_by_gpu[gpu][:count]
        return self.held[user]

    def release(self, user: str) -> list[Slice]:
        return self.held.pop(user, [])


def refusal(lab_id: str, gpus: int, gpu_mem_gb: float, slices: list[Slice]) -> str | None:
    """Why a lab needing ``gpus`` ranks of ``gpu_mem_gb`` each does not fit ``slices``; None when it fits.
    Ranks on one memory pool share it: two CPX/NPS4 slices of 16 GB each need 32 of their 48 GiB pool."""
    have = ", ".join(s.describe() for s in slices) or "no GPU slice"
    need = f"{gpus} GPU(s) with {gpu_mem_gb:g} GB each"
    if gpus > len(slices):
        return f"lab {lab_id} needs {need}; this server gives you {len(slices)}: {have}"
    used = slices[:gpus]
    short = [s for s in used if s.share_gib < gpu_mem_gb]
    if short and gpu_mem_gb:
        return f"lab {lab_id} needs {need}; your slice has less: {', '.join(s.describe() for s in short)}"
    return None


def ranks_needed(lab, profile: str) -> tuple[int, float]:
    """(GPUs, GB per GPU) a lab's profile declares in lab.toml's ``requires``; a lab without that
    profile is delivered in its gpu profile (``rocmlab build --profile``), so that one's."""
    for name in (profile, "gpu"):
        if name in lab.profiles:
            requires = lab.profiles[name].requires
            return requires.gpus, requires.gpu_mem_gb
    return 0, 0.0


def admit(labs, profile: str, slices: list[Slice]) -> tuple[list, list[str]]:
    """(the labs that fit ``slices`` in ``profile``, a refusal message for each one that does not)."""
    admitted, refused = [], []
    for lab in labs:
        gpus, mem = ranks_needed(lab, profile)
        reason = refusal(lab.id, gpus, mem, slices) if gpus else None
        (refused.append(reason) if reason else admitted.append(lab))
    return admitted, refused


# ---- isolation -------------------------------------------------------------------------------


def allow_list(slices: list[Slice]) -> list[str]:
    """The device files a learner holding ``slices`` may open: /dev/kfd and their render nodes."""
    return [KFD, *(s.render_node for s in slices)]


def render_group() -> int:
    try:
        return grp.getgrnam("render").gr_gid
    except KeyError:
        return 0


def on_root(path: str, dev_root: Path | None) -> Path:
    """``path`` under ``dev_root``, the folder that stands for / in tests (None: / itself)."""
    return Path(path) if dev_root is None else dev_root / path.lstrip("/")


def hand_over(slices: list[Slice], uid: int, dev_root: Path | None = None) -> None:
    """Make the slices' render nodes ``uid``'s alone (needs root). ``dev_root`` stands for ``/`` in tests."""
    for s in slices:
        path = on_root(s.render_node, dev_root)
        os.chown(path, uid, 0, follow_symlinks=False)
        os.chmod(path, OWNED_MODE, follow_symlinks=False)


def take_back(slices: list[Slice], dev_root: Path | None = None) -> None:
    """Close the slices' render nodes again (root only, mode 0600): a free slice is no learner's,
    and the render group opens none while the hub hands them out."""
    for s in slices:
        path = on_root(s.render_node, dev_root)
        if os.path.lexists(path):
            os.chown(path, 0, 0, follow_symlinks=False)
            os.chmod(path, OWNED_MODE, follow_symlinks=False)


def reopen(slices: list[Slice], dev_root: Path | None = None, gid: int | None = None) -> None:
    """When the hub stops: the render nodes back to root and the render group (mode 0660), as udev sets them."""
    gid = render_group() if gid is None else gid
    for s in slices:
        path = on_root(s.render_node, dev_root)
        if os.path.lexists(path):
            os.chown(path, 0, gid, follow_symlinks=False)
            os.chmod(path, FREED_MODE, follow_symlinks=False)


def kfd_group_problem(name: str) -> str | None:
    """Why the group ``name`` cannot guard /dev/kfd (it is missing, or an account is in it, whose
    every process could then open it); None when it can."""
    import pwd

    try:
        group = grp.getgrnam(name)
    except KeyError:
        return f"{KFD_GROUP[0]}={name}: no such group; make it with `groupadd --system {name}` (no account in it)"
    members = sorted(set(group.gr_mem) | {p.pw_name for p in pwd.getpwall() if p.pw_gid == group.gr_gid})
    if members:
        return (
            f"{KFD_GROUP[0]}={name}: {', '.join(members)} belong to it, and could open /dev/kfd without a slice; "
            "choose a group no account is in"
        )
    return None


def close_kfd(gid: int, dev_root: Path | None = None) -> None:
    """/dev/kfd for root and ``gid`` only (mode 0660, its ACL dropped): the group a slice holder's
    server gets. Nothing when the node has no /dev/kfd."""
    path = on_root(KFD, dev_root)
    if not os.path.lexists(path):
        return
    os.chown(path, 0, gid, follow_symlinks=False)
    os.chmod(path, FREED_MODE, follow_symlinks=False)
    try:
        os.removexattr(path, ACL_XATTR, follow_symlinks=False)
    except OSError:  # none set, or a file system without ACLs
        pass


def holders(slices: list[Slice], dev_root: Path | None = None) -> dict[str, list[Slice]]:
    """Who holds which slice, read back from the render nodes' owners (a hub restarted while
    learners' servers ran); nodes owned by root, or by a uid no account has, are held by nobody."""
    import pwd

    held: dict[str, list[Slice]] = {}
    for s in slices:
        try:
            uid = os.lstat(on_root(s.render_node, dev_root)).st_uid
            name = pwd.getpwuid(uid).pw_name if uid else ""
        except (OSError, KeyError):
            continue
        if name:
            held.setdefault(name, []).append(s)
    return held


def book_of_this_node(
    machine_folder: str,
    course_repo,
    lab_ids: list[str],
    profile: str,
    per_learner: int,
    dev_root: str = "",
    kfd_gid: int | None = None,
):
    """At hub start (slices policy): the node's slice book, every render node closed until handed
    over, and the labs that fit a learner's slices (each refused one logged with its reason).
    ``machine_folder`` replays a recorded machine instead of this one and ``dev_root`` stands for
    ``/`` (tests: a recorded node's render nodes are closed only there); ValueError when the
    node has no GPU device or fewer than ``per_learner`` of one GPU. ``kfd_gid``: the group that
    /dev/kfd is closed to (``close_kfd``), None to leave it as it is."""
    import logging

    from ..course.catalog import discover, select

    machine = probes.RecordedMachine(machine_folder) if machine_folder else probes.LiveMachine()
    slices = inventory(machine)
    widest = max(Counter(s.gpu for s in slices).values(), default=0)
    if widest < per_learner:
        raise ValueError(
            f"ROCMLAB_HUB_GPU_POLICY=slices: {len(slices)} GPU device(s) in the KFD topology "
            f"({probes.KFD_TOPOLOGY}), none with {per_learner} slices of one GPU"
        )
    book = Assignments(slices)
    if dev_root or not machine_folder:
        root = Path(dev_root) if dev_root else None
        book.held = holders(slices, root)  # servers that outlived a hub restart keep their slices
        held = {s.index for owned in book.held.values() for s in owned}
        take_back([s for s in slices if s.index not in held], root)  # the rest closed until handed over
        if kfd_gid is not None:
            close_kfd(kfd_gid, root)
    sample = book.assign("(sizing)", per_learner)
    book.release("(sizing)")
    labs = select(discover(Path(course_repo)), list(lab_ids)) if lab_ids else []
    admitted, refused = admit(labs, profile, sample)
    for reason in refused:
        logging.getLogger("rocmlab.hub").warning("rocmlab: not delivered: %s", reason)
    return book, [lab.id for lab in admitted]
