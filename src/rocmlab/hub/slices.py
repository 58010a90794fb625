"""The spawner's side of GPU slices (``ROCMLAB_HUB_GPU_POLICY=slices``, rocmlab.hub.devices): a
learner's slices are taken before their server starts, listed in their systemd scope's device
allow-list, and given back when it stops; their server (and what it starts) alone gets the group
that opens /dev/kfd. Instructors get none (they grade, on the CPU)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from traitlets import Integer, Unicode
from traitlets.config import LoggingConfigurable

from . import devices


class SliceHolder(LoggingConfigurable):
    """Mixed into CourseSpawner; ``book`` is the hub's one ``devices.Assignments`` (set by the config)."""

    gpu_slices = Integer(
        1, help="slices policy: GPU slices per learner, of one physical GPU (2 for the labs that launch two ranks)"
    ).tag(config=True)
    slice_dev_root = Unicode("", help="the folder that stands for / when render nodes are handed over (tests)").tag(
        config=True
    )
    kfd_gid = Integer(
        -1, help="slices policy: the group /dev/kfd is closed to, added to a slice holder's server (-1: none)"
    ).tag(config=True)
    book: devices.Assignments | None = None

    def make_preexec_fn(self, name):
        """A slice holder's server becomes the user with the kfd group among its groups: this server
        and what it starts open /dev/kfd, the user's other sessions do not."""
        if self.holds_slices() and self.kfd_gid >= 0:
            return switch_user_with_group(name, self.kfd_gid)
        return super().make_preexec_fn(name)

    def _dev_root(self) -> Path | None:
        return Path(self.slice_dev_root) if self.slice_dev_root else None

    def holds_slices(self) -> bool:
        return getattr(self, "gpu_policy", "") == "slices" and not self.is_instructor()

    def take_slices(self) -> list[devices.Slice]:
        """This learner's slices, their render nodes made theirs alone; RuntimeError (the spawn
        fails with it) when the hub has no inventory, the account is not the learner's own, or no
        slice is free."""
        if not self.holds_slices():
            return []
        owner = self.owner() if self.account_is_the_learners_own else None
        if SliceHolder.book is None or owner is None:
            raise RuntimeError("the slices policy needs the hub's GPU inventory and a Unix account per learner")
        slices = SliceHolder.book.assign(self.user.name, self.gpu_slices)
        devices.hand_over(slices, owner[0], self._dev_root())
        self.log.info("rocmlab: %s holds %s", self.user.name, ", ".join(s.describe() for s in slices))
        return slices

    def slice_devices(self) -> tuple[str, ...]:
        """The device allow-list of this learner's scope: /dev/kfd and their render nodes."""
        if not self.holds_slices() or SliceHolder.book is None:
            return ()
        return tuple(devices.allow_list(SliceHolder.book.held.get(self.user.name, [])))

    def render_folder_view(self) -> tuple[list[str], str]:
        """What this learner's server shows of /dev/dri (on the dev root): their render nodes, and
        the folder; nothing to change when they hold no slice."""
        if not self.holds_slices() or SliceHolder.book is None:
            return [], ""
        held = SliceHolder.book.held.get(self.user.name, [])
        nodes = [str(devices.on_root(s.render_node, self._dev_root())) for s in held]
        return nodes, str(devices.on_root("/dev/dri", self._dev_root())) if nodes else ""

    def give_back_slices(self) -> None:
        if SliceHolder.book is not None:
            devices.take_back(SliceHolder.book.release(self.user.name), self._dev_root())


def switch_user_with_group(name: str, extra_gid: int):
    """What the child does between fork and exec (as root): become ``name`` with their own groups
    and ``extra_gid``, in their home. A refused setgroups fails the start: the server never runs
    with root's groups, nor without the group its GPU needs."""
    import pwd

    entry = pwd.getpwnam(name)
    groups = sorted(set(os.getgrouplist(name, entry.pw_gid)) | {extra_gid})

    def preexec():
        os.setgid(entry.pw_gid)
        os.setgroups(groups)
        os.setuid(entry.pw_uid)
        with contextlib.suppress(OSError):
            os.chdir(entry.pw_dir)

    return preexec
