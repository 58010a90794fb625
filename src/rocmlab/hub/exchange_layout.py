"""The nbgrader exchange of a workshop server, made by the hub at start: nothing in it is
writable by more than one learner, and no learner can make a folder the others use.

```
<data>/exchange/                     hub (root) 0755
  <course>/                          hub 0755       (no learner can make it first: no squatting)
    outbound/                        hub:instructors 3775   released labs; everyone reads; sticky:
                                                            a release is removed or renamed by
                                                            its instructor (or root) only
    inbound/                         hub:instructors 0751   nobody but the hub adds a folder here
      <learner>/                     learner:instructors 2750   that learner's submissions
    feedback/                        hub:instructors 0751
      <learner>/                     learner:instructors 2770   that learner's feedback
<data>/exchange-views/<learner>/<course>/       hub 0755: the learner's exchange root
  outbound -> <data>/exchange/<course>/outbound
  inbound  -> <data>/exchange/<course>/inbound/<learner>
  feedback -> <data>/exchange/<course>/feedback/<learner>
```

The learner's nbgrader runs with ``Exchange.root`` = their view: the same layout as a learner's pod
on Kubernetes (where mounts do what the links do here), so nbgrader's stock submit, list, fetch and
fetch-feedback work unchanged. Every folder is made and checked through descriptors opened with
O_NOFOLLOW, each in its parent (the hub never follows a link a user made); a folder owned by
someone else than expected (a learner's, made when an older exchange was world-writable) stops
the hub with ``ExchangeRefused`` naming it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
VIEWS = "exchange-views"


class ExchangeRefused(RuntimeError):
    """The exchange holds a folder the hub did not make (or a link): the message says which."""


@dataclass(frozen=True)
class ExchangeOwners:
    """Who owns the exchange's folders: ``uid`` the hub's own (root on a workshop server), ``gid`` the
    instructors' group (they release and collect)."""

    uid: int
    gid: int


def _ensure(parent: int, name: str, uid: int, gid: int, mode: int, where: Path) -> int:
    """The folder ``name`` in ``parent``, made if missing, owned by ``uid``:``gid`` with ``mode``; its
    descriptor. A link, a non-folder or a folder another user owns raises ExchangeRefused."""
    created = False
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
        created = True
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise ExchangeRefused(f"{where}: {exc.strerror} (a link or not a folder?); remove it and start again") from None
    if created and os.geteuid() == 0:
        os.fchown(fd, uid, gid)
    status = os.fstat(fd)
    if status.st_uid != uid:
        os.close(fd)
        raise ExchangeRefused(
            f"{where} is owned by uid {status.st_uid}, not by uid {uid}: someone else made it (a learner "
            "squatting the exchange, or an exchange of an older hub). Move it away (it may hold a fake "
            "lab or learners' work) and start the hub again"
        )
    if os.geteuid() == 0:
        os.fchown(fd, uid, gid)
    os.fchmod(fd, mode)
    return fd


def _link(parent: int, name: str, target: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        current = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISLNK(current.st_mode) and os.readlink(name, dir_fd=parent) == str(target):
            return
        if stat.S_ISDIR(current.st_mode):
            raise ExchangeRefused(f"{name} in the exchange view is a folder")
        os.unlink(name, dir_fd=parent)
    os.symlink(str(target), name, dir_fd=parent)


def _open_root(data: Path, name: str, owners: ExchangeOwners) -> int:
    with _closing(os.open(data, DIR_FLAGS)) as top:
        return _ensure(top, name, owners.uid, owners.gid, 0o755, data / name)


@contextlib.contextmanager
def _closing(fd: int):
    try:
        yield fd
    finally:
        os.close(fd)


def prepare_exchange(data: Path, course_id: str, owners: ExchangeOwners, learners: dict[str, int]) -> Path:
    """Make (or check) ``data/exchange`` with the course's folders and each learner's (``learners``:
    name -> uid) and their views; the exchange root. Raises ExchangeRefused."""
    data = Path(data)
    with _closing(_open_root(data, "exchange", owners)) as root:
        with _closing(_ensure(root, course_id, owners.uid, owners.gid, 0o755, data / "exchange" / course_id)) as course:
            where = data / "exchange" / course_id
            for name, mode in (("outbound", 0o3775), ("inbound", 0o751), ("feedback", 0o751)):
                os.close(_ensure(course, name, owners.uid, owners.gid, mode, where / name))
    for name, uid in sorted(learners.items()):
        ensure_learner(data, course_id, owners, name, uid)
    return data / "exchange"


def ensure_learner(data: Path, course_id: str, owners: ExchangeOwners, name: str, uid: int) -> Path:
    """``inbound/<name>/`` and ``feedback/<name>/`` owned by ``uid``, and the learner's view; the
    view (their ``Exchange.root``). Raises ExchangeRefused."""
    from .exchange import SAFE_NAME

    if not SAFE_NAME.fullmatch(name):
        raise ExchangeRefused(f"{name!r} cannot name an exchange folder")
    data = Path(data)
    course_path = data / "exchange" / course_id
    with _closing(os.open(course_path, DIR_FLAGS)) as course:
        if os.fstat(course).st_uid != owners.uid:
            raise ExchangeRefused(f"{course_path} is not the hub's")
        for box, mode in (("inbound", 0o2750), ("feedback", 0o2770)):
            with _closing(os.open(box, DIR_FLAGS, dir_fd=course)) as parent:
                os.close(_ensure(parent, name, uid, owners.gid, mode, course_path / box / name))
    with _closing(_open_root(data, VIEWS, owners)) as views:
        with _closing(_ensure(views, name, owners.uid, owners.gid, 0o755, data / VIEWS / name)) as mine:
            with _closing(_ensure(mine, course_id, owners.uid, owners.gid, 0o755, data / VIEWS / name)) as view:
                _link(view, "outbound", course_path / "outbound")
                _link(view, "inbound", course_path / "inbound" / name)
                _link(view, "feedback", course_path / "feedback" / name)
    return data / VIEWS / name


def group_members(group: str) -> dict[str, int]:
    """Unix users in ``group`` (as a supplementary or as their primary group): name -> uid."""
    import grp
    import pwd

    try:
        entry = grp.getgrnam(group)
    except KeyError:
        return {}
    members = {}
    for name in entry.gr_mem:
        with contextlib.suppress(KeyError):
            members[name] = pwd.getpwnam(name).pw_uid
    for account in pwd.getpwall():
        if account.pw_gid == entry.gr_gid:
            members[account.pw_name] = account.pw_uid
    return members
