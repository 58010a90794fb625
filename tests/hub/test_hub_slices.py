"""A GPU slice per learner on one server (rocmlab.hub.devices, rocmlab.hub.slices): the inventory of a
recorded MI300X node in CPX/NPS4, who gets which slice, which labs fit, and the isolation: a learner's
render node is theirs alone, checked by opening device files as real Unix accounts (as root, on
device nodes made with mknod), and listed in the systemd scope's device allow-list."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmlab import probes
from rocmlab.course.catalog import discover, select
from rocmlab.hub import devices
from rocmlab.hub import spawner as rocmlab_spawner
from rocmlab.hub.scopes import ScopeLimits, busctl_argv
from rocmlab.hub.slices import SliceHolder

REPO = Path(__file__).parents[2]
MACHINES = REPO / "tests" / "fixtures" / "machines"


def node(name: str = "mi300x-cpx-nps4") -> list[devices.Slice]:
    return devices.inventory(probes.RecordedMachine(MACHINES / name))


def test_the_inventory_of_a_cpx_nps4_node_is_64_slices_on_8_gpus():
    slices = node()
    assert len(slices) == 64 and len({s.gpu for s in slices}) == 8
    assert {(s.gfx, s.cus, s.pool_gib, s.pool_sharers, s.share_gib, s.mode) for s in slices} == {
        ("gfx942", 38, 48, 2, 24, "CPX/NPS4")
    }
    assert [s.render_node for s in slices[:2]] == ["/dev/dri/renderD128", "/dev/dri/renderD129"]


def test_a_whole_gpu_node_is_a_slice_per_gpu():
    slices = node("mi300x-spx-nps1")
    assert len(slices) == 8 and {(s.cus, s.share_gib, s.mode) for s in slices} == {(304, 192, "SPX/NPS1")}
    assert node("rx9070-desktop")[0].mode == ""


def test_each_learner_gets_a_different_slice_and_keeps_it():
    book = devices.Assignments(node())
    ann, bob = book.assign("ann"), book.assign("bob")
    assert len(ann) == len(bob) == 1 and ann[0].index != bob[0].index
    assert ann[0].gpu != bob[0].gpu, "the least used GPU first"
    assert book.assign("ann") == ann
    freed = book.release("ann")
    assert freed == ann and "ann" not in book.held


def test_two_slices_come_from_one_physical_gpu():
    book = devices.Assignments(node())
    for learner in range(32):
        pair = book.assign(f"l{learner}", 2)
        assert len(pair) == 2 and pair[0].gpu == pair[1].gpu and pair[0].index != pair[1].index
    with pytest.raises(RuntimeError, match="no 2 free slice"):
        book.assign("late", 2)
    held = [s.index for pair in book.held.values() for s in pair]
    assert len(held) == len(set(held)) == 64


def test_a_full_node_refuses_the_next_learner_with_the_count():
    book = devices.Assignments(node("mi300x-spx-nps1"))
    for learner in range(8):
        book.assign(f"l{learner}")
    with pytest.raises(RuntimeError, match="8 of 8 slices are held"):
        book.assign("ninth")


def labs(*ids):
    return select(discover(REPO), list(ids))


def test_a_lab_that_does_not_fit_the_slice_is_refused_naming_lab_need_and_slice():
    one = devices.Assignments(node()).assign("ann")
    admitted, refused = devices.admit(labs("01-rocm-setup", "05-distributed-training"), "multi-gpu", one)
    assert [lab.id for lab in admitted] == ["01-rocm-setup"]
    (reason,) = refused
    assert reason.startswith("lab 05-distributed-training needs 2 GPU(s) with 16 GB each; this server gives you 1")
    assert "CPX/NPS4 partition /dev/dri/renderD" in reason and "38 CUs, 24 GiB" in reason


def test_two_cpx_nps4_slices_of_one_pool_fit_the_two_rank_labs():
    pair = devices.Assignments(node()).assign("ann", 2)
    admitted, refused = devices.admit(
        labs("04-collectives-rccl", "05-distributed-training", "10-fsdp2"), "multi-gpu", pair
    )
    assert refused == [] and len(admitted) == 3


def test_a_slice_with_too_little_memory_is_named():
    small = [devices.Slice(0, "/dev/dri/renderD128", 0, "gfx942", 38, 48, 8, "CPX/NPS1")]
    reason = devices.refusal("02-llm-inference", 1, 16, small)
    assert reason == (
        "lab 02-llm-inference needs 1 GPU(s) with 16 GB each; your slice has less: "
        "gfx942 CPX/NPS1 partition /dev/dri/renderD128 (38 CUs, 6 GiB)"
    )
    assert devices.refusal("01-rocm-setup", 1, 8, node()[:1]) is None


def test_the_hub_config_delivers_only_the_labs_that_fit():
    book, delivered = devices.book_of_this_node(
        str(MACHINES / "mi300x-cpx-nps4"), REPO, ["01-rocm-setup", "05-distributed-training"], "multi-gpu", 1
    )
    assert delivered == ["01-rocm-setup"] and len(book.slices) == 64 and book.held == {}
    with pytest.raises(ValueError, match="none with 2 slices of one GPU"):
        devices.book_of_this_node(str(MACHINES / "rx9070-desktop"), REPO, [], "gpu", 2)


def test_the_scope_allows_only_kfd_and_the_learners_render_nodes():
    pair = devices.Assignments(node()).assign("ann", 2)
    paths = tuple(devices.allow_list(pair))
    assert paths == ("/dev/kfd", pair[0].render_node, pair[1].render_node)
    argv = busctl_argv("ann", 7, ScopeLimits(devices=paths))
    properties = " ".join(argv[11:-1])
    assert "DevicePolicy s closed" in properties
    assert f"DeviceAllow a(ss) 3 /dev/kfd rw {pair[0].render_node} rw {pair[1].render_node} rw" in properties
    assert argv[10] == "5", "PIDs, Slice, Delegate, DevicePolicy, DeviceAllow"


def learner_spawner(name, book, dev_root, groups=(), uid=None):
    spawner = rocmlab_spawner.CourseSpawner(
        user=SimpleNamespace(name=name, groups=[SimpleNamespace(name=g) for g in groups]),
        gpu_policy="slices",
        slice_dev_root=str(dev_root),
    )
    spawner.owner = lambda: (uid, uid) if uid is not None else None
    SliceHolder.book = book
    return spawner


def test_the_spawner_takes_lists_and_gives_back_a_learners_slices(tmp_path, monkeypatch):
    book = devices.Assignments(node())
    handed = []
    monkeypatch.setattr(devices, "hand_over", lambda slices, uid, root: handed.append((uid, slices)))
    monkeypatch.setattr(devices, "take_back", lambda slices, root: handed.append(("back", slices)))
    try:
        ann = learner_spawner("ann", book, tmp_path, uid=4001)
        (held,) = ann.take_slices()
        assert handed == [(4001, [held])]
        assert ann.scope_limits().devices == ("/dev/kfd", held.render_node)
        ann.give_back_slices()
        assert handed[-1] == ("back", [held]) and book.held == {}
        teacher = learner_spawner("tia", book, tmp_path, groups=("instructors",), uid=4002)
        assert teacher.take_slices() == [] and teacher.scope_limits().devices == ()
        nobody = learner_spawner("demo", book, tmp_path, uid=None)
        with pytest.raises(RuntimeError, match="a Unix account per learner"):
            nobody.take_slices()
    finally:
        SliceHolder.book = None


# ---- real accounts on real device files -----------------------------------------------------

OPEN_AS = """
import os, sys
os.setgid(int(sys.argv[1])); os.setgroups([int(sys.argv[3])]); os.setuid(int(sys.argv[1]))
for path in sys.argv[2].split(","):
    try:
        os.close(os.open(path, os.O_RDWR))
        print(path, "opened")
    except OSError as exc:
        print(path, "refused", exc.errno)
"""


RENDER_GID = 4242  # a group standing for render, which both accounts are in


def opened_as(uid: int, paths: list[Path], group: int) -> dict[str, str]:
    """Open each path read-write as ``uid`` (also in ``group``, the render group), with no
    ROCR_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES in the environment."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_VISIBLE_DEVICES")}
    done = subprocess.run(
        [sys.executable, "-c", OPEN_AS, str(uid), ",".join(map(str, paths)), str(group)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=True,
    )
    return dict(
        line.rsplit(" ", 1) if "opened" in line else (line.split(" refused")[0], "refused")
        for line in done.stdout.splitlines()
    )


@pytest.fixture
def dev_root():
    """A folder standing for / with the node's first render nodes and /dev/kfd as character devices
    (the numbers of /dev/null: opening one does nothing), readable by every account."""
    if os.geteuid() != 0:
        pytest.skip("making device nodes and switching accounts needs root")
    root = Path(tempfile.mkdtemp(prefix="rocmlab-slices-", dir="/tmp"))
    try:
        os.chmod(root, 0o755)
        (root / "dev" / "dri").mkdir(parents=True)
        for folder in (root / "dev", root / "dev" / "dri"):
            os.chmod(folder, 0o755)
        null = os.stat("/dev/null").st_rdev
        try:
            for name in ["kfd", *(f"dri/renderD{minor}" for minor in range(128, 136))]:
                os.mknod(root / "dev" / name, 0o660 | stat.S_IFCHR, null)
                os.chown(root / "dev" / name, 0, RENDER_GID)  # as udev leaves them: root:render 0660
                os.chmod(root / "dev" / name, 0o660)
        except PermissionError:
            pytest.skip("this machine may not make device nodes")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.machine_wide
def test_a_learner_cannot_open_another_learners_slice_even_with_the_variable_unset(dev_root):
    """Two real accounts on a recorded CPX/NPS4 node: each is handed a different slice, every render
    node starts closed, and neither can open the other's (or a free one), whatever the environment;
    /dev/kfd stays open to both. After the stop the slice is closed again."""
    ann, bob = pwd.getpwnam("nobody"), pwd.getpwnam("daemon")
    render = RENDER_GID  # the learners are in the render group: it opens /dev/kfd, and no slice
    slices = [s for s in node() if int(s.render_node.rsplit("D", 1)[1]) < 136]
    book = devices.Assignments(slices)
    devices.take_back(slices, dev_root)  # the hub at start: every render node closed
    ann_slice, bob_slice = book.assign("ann"), book.assign("bob")
    devices.hand_over(ann_slice, ann.pw_uid, dev_root)
    devices.hand_over(bob_slice, bob.pw_uid, dev_root)
    a, b = (dev_root / ann_slice[0].render_node.lstrip("/")), (dev_root / bob_slice[0].render_node.lstrip("/"))
    free = next(dev_root / s.render_node.lstrip("/") for s in slices if s not in ann_slice + bob_slice)
    kfd = dev_root / "dev" / "kfd"
    probe = dev_root / "dev" / "probe"  # open to all: tells a nodev mount from a refusal
    os.mknod(probe, 0o666 | stat.S_IFCHR, os.stat("/dev/null").st_rdev)
    os.chmod(probe, 0o666)
    if opened_as(ann.pw_uid, [probe], render)[str(probe)] != "opened":
        pytest.skip("device nodes cannot be opened here (a nodev mount)")
    assert opened_as(ann.pw_uid, [a, b, free, kfd], render) == {
        str(a): "opened",
        str(b): "refused",
        str(free): "refused",
        str(kfd): "opened",
    }
    assert opened_as(bob.pw_uid, [a, b], render) == {str(a): "refused", str(b): "opened"}
    devices.take_back(book.release("ann"), dev_root)
    assert opened_as(ann.pw_uid, [a], render) == {str(a): "refused"}
    assert (a.stat().st_uid, stat.S_IMODE(a.stat().st_mode)) == (0, 0o600)


def test_the_config_books_the_nodes_slices_and_delivers_what_fits(monkeypatch, tmp_path):
    from test_hub import hub_config

    try:
        c = hub_config(
            monkeypatch,
            tmp_path,
            ROCMLAB_HUB_GPU_POLICY="slices",
            ROCMLAB_HUB_GPU_SLICES=1,
            ROCMLAB_HUB_PROFILE="multi-gpu",
            ROCMLAB_HUB_MACHINE=str(MACHINES / "mi300x-cpx-nps4"),
            ROCMLAB_HUB_LABS="01-rocm-setup,05-distributed-training",
        )
        assert c.CourseSpawner.gpu_policy == "slices" and c.CourseSpawner.gpu_slices == 1
        assert c.CourseSpawner.labs == ["01-rocm-setup"], "05 needs two slices in its multi-gpu profile"
        assert len(SliceHolder.book.slices) == 64
    finally:
        SliceHolder.book = None


@pytest.mark.machine_wide
def test_a_restarted_hub_keeps_the_slices_of_running_servers(dev_root):
    """The hub reads who holds which slice back from the render nodes' owners: a learner's running
    server keeps its slice across a hub restart, and everything else is closed."""
    nobody = pwd.getpwnam("nobody")
    slices = [s for s in node() if int(s.render_node.rsplit("D", 1)[1]) < 136]
    devices.hand_over(slices[3:4], nobody.pw_uid, dev_root)
    assert devices.holders(slices, dev_root) == {"nobody": slices[3:4]}
    book, _ = devices.book_of_this_node(str(MACHINES / "mi300x-cpx-nps4"), REPO, [], "gpu", 1, str(dev_root))
    assert book.held == {"nobody": [s for s in book.slices if s.index == 3]}
    assert book.assign("nobody") == book.held["nobody"], "the learner's server keeps its slice"
    others = [dev_root / s.render_node.lstrip("/") for s in slices if s.index != 3]
    assert {(p.stat().st_uid, stat.S_IMODE(p.stat().st_mode)) for p in others} == {(0, 0o600)}


# ---- /dev/kfd: only a slice holder's server opens it ----------------------------------------


def test_a_kfd_group_with_an_account_in_it_or_none_at_all_is_refused():
    missing = devices.kfd_group_problem("rocmlab-no-such-group")
    assert missing and "groupadd --system rocmlab-no-such-group" in missing
    taken = devices.kfd_group_problem("root")  # root's own group: root is in it
    assert taken and "root belong to it" in taken


def acl_for(uid: int) -> bytes:
    """A POSIX ACL (acl(5), the system.posix_acl_access layout of the kernel's
    include/uapi/linux/posix_acl_xattr.h: version 2, then tag, permissions, id per entry) that
    gives ``uid`` read-write, as an ACL left by an administrator or logind's uaccess would."""
    import struct

    entries = [
        (0x01, 6, 0xFFFFFFFF),
        (0x02, 6, uid),
        (0x04, 6, 0xFFFFFFFF),
        (0x10, 6, 0xFFFFFFFF),
        (0x20, 0, 0xFFFFFFFF),
    ]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


def opens(preexec, path: Path) -> bool:
    """Whether a process started with ``preexec`` (as root, it becomes an account) opens ``path`` read-write."""
    done = subprocess.run(
        ["/bin/sh", "-c", f': <> "{path}"'], preexec_fn=preexec, env={"PATH": "/usr/bin:/bin"}, cwd="/", timeout=30
    )
    return done.returncode == 0


def session_of(uid: int, gid: int, groups: list[int]):
    """An account's login outside the hub: its own groups (here the render group's stand-in)."""

    def preexec():
        os.setgid(gid)
        os.setgroups(groups)
        os.setuid(uid)

    return preexec


@pytest.mark.machine_wide
def test_only_a_slice_holders_server_opens_kfd(dev_root):
    """/dev/kfd (a fixture node, open to the render group and, by an ACL, to one account) is closed to
    a group of its own at hub start; the learner's server holding a slice gets it and opens kfd and
    its render node; the same account in a session of its own (in the render group), and an
    instructor's server, open neither kfd nor that render node."""
    import grp
    import secrets

    ann, tia = pwd.getpwnam("nobody"), pwd.getpwnam("daemon")
    kfd = dev_root / "dev" / "kfd"
    try:
        os.setxattr(kfd, devices.ACL_XATTR, acl_for(ann.pw_uid))
        planted_acl = True
    except OSError:
        planted_acl = False  # a file system without ACLs: the group alone is checked
    group = f"rmlkfd-{secrets.token_hex(3)}"
    subprocess.run(["groupadd", group], check=True, capture_output=True, timeout=60)
    try:
        gid = grp.getgrnam(group).gr_gid
        assert devices.kfd_group_problem(group) is None
        ann_session = session_of(ann.pw_uid, ann.pw_gid, [RENDER_GID])
        if planted_acl:
            assert opens(session_of(ann.pw_uid, ann.pw_gid, []), kfd), "the planted ACL opens kfd"
        elif not opens(ann_session, kfd):
            pytest.skip("device nodes cannot be opened here (a nodev mount)")
        slices = [s for s in node() if int(s.render_node.rsplit("D", 1)[1]) < 136]
        devices.book_of_this_node(str(MACHINES / "mi300x-cpx-nps4"), REPO, [], "gpu", 1, str(dev_root), gid)
        book = devices.Assignments(slices)  # the fixture's render nodes only
        assert (kfd.stat().st_uid, kfd.stat().st_gid, stat.S_IMODE(kfd.stat().st_mode)) == (0, gid, 0o660)
        learner = learner_spawner(ann.pw_name, book, dev_root, uid=ann.pw_uid)
        learner.kfd_gid = gid
        (held,) = learner.take_slices()
        render = dev_root / held.render_node.lstrip("/")
        server = SliceHolder.make_preexec_fn(learner, ann.pw_name)
        assert opens(server, kfd) and opens(server, render)
        assert not opens(ann_session, kfd), "kfd outside the learner's server"
        assert not opens(session_of(ann.pw_uid, ann.pw_gid, []), kfd), "the ACL was dropped"
        instructor = learner_spawner(tia.pw_name, book, dev_root, groups=("instructors",), uid=tia.pw_uid)
        instructor.kfd_gid = gid
        assert instructor.take_slices() == []
        assert not opens(SliceHolder.make_preexec_fn(instructor, tia.pw_name), kfd)
        learner.give_back_slices()
        assert not opens(server, render)
    finally:
        SliceHolder.book = None
        subprocess.run(["groupdel", group], capture_output=True, timeout=60, check=False)


SEES = """
import json, os, sys
from rocmlab.hub.server_child import private_tmp, show_only
folder, nodes = sys.argv[1], json.loads(sys.argv[2])
assert private_tmp([]), "no mount namespace"
shown = show_only(nodes, folder)
opened = []
for name in sorted(os.listdir(folder)):
    os.close(os.open(os.path.join(folder, name), os.O_RDWR))
    opened.append(name)
print(json.dumps({"shown": shown, "listed": opened}))
"""


@pytest.mark.machine_wide
def test_a_learners_server_sees_only_its_own_render_nodes(dev_root, tmp_path):
    """The server's own mount namespace (what CourseSpawner's child does after its private /tmp):
    /dev/dri lists and opens the learner's render nodes only; the machine's /dev/dri is untouched."""
    book = devices.Assignments([s for s in node() if int(s.render_node.rsplit("D", 1)[1]) < 136])
    learner = learner_spawner("nobody", book, dev_root, uid=pwd.getpwnam("nobody").pw_uid)
    try:
        pair = book.assign("nobody", 2)
        nodes, folder = learner.render_folder_view()
        assert folder == str(dev_root / "dev" / "dri")
        assert nodes == [str(dev_root / s.render_node.lstrip("/")) for s in pair]
        done = subprocess.run(
            [sys.executable, "-c", SEES, folder, json.dumps(nodes)], capture_output=True, text=True, timeout=60
        )
        if "no mount namespace" in done.stderr:
            pytest.skip("this machine gives no mount namespace")
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        assert seen == {"shown": True, "listed": sorted(Path(n).name for n in nodes)}
        assert len(os.listdir(folder)) == 8, "the machine's /dev/dri still holds every node"
        teacher = learner_spawner("daemon", book, dev_root, groups=("instructors",), uid=1)
        assert teacher.render_folder_view() == ([], "")
    finally:
        SliceHolder.book = None
