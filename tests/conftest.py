import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

# The browser tests' assertions wait as long as their navigation may (playwright's default is 5 s):
# a notebook rendered by a hub on a loaded 2-core machine took longer, and the zh test failed on it.
try:
    from playwright.sync_api import expect as browser_expect

    browser_expect.set_options(timeout=30_000)
except ImportError:
    pass

FIXTURE_COURSE = Path(__file__).parent / "fixtures" / "course"

# The slow suite runs on two pytest workers with `--dist loadgroup` (the Makefile's SLOW_XDIST).
# Each worker writes every test's group to a file; the controller schedules a group as one unit.
# A test marked machine_wide touches what every process on the machine shares: all of them go to
# one worker, one after another. A test that uses a module's (or class's) fixture stays with the
# rest of its module, which then makes the fixture once. Every other test runs wherever a worker is
# free. (pytest-xdist 3.8's own loadgroup appends the group to each test's node id, which
# pytest 9.2's node ids no longer take: its groups are ignored.)
MACHINE_WIDE_GROUP = "machine-wide"
SHARED_FIXTURE_SCOPES = ("package", "module", "class")
GROUPS_FOLDER = pytest.StashKey[Path]()


def pytest_configure(config):
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", default=None):
        _interpret_triton_without_a_gpu()  # not in pytest-xdist's controller, which runs no test
    # A hub a test starts runs no grading worker unless the test asks for some (test_live_e2e.py):
    # the hub's default (rocmlab.hub.settings.LiveWorkers) would claim the attempts that tests put
    # in the queue by hand and spend CI's cores preflighting labs. test_hub_settings.py tests the default.
    os.environ.setdefault("ROCMLAB_LIVE_WORKERS", "0")
    config.addinivalue_line(
        "markers",
        "machine_wide: touches what the whole machine shares (Unix accounts and sweeps of every process "
        "of one, scans of every process or of /tmp): never run beside another such test",
    )
    config.addinivalue_line(
        "markers",
        "runs_a_lab: grades a whole lab of solutions/ (minutes): collected first, so that the slow suite's "
        "workers start the longest tests first and end on short ones",
    )


def _interpret_triton_without_a_gpu():
    """Lab 07's kernels run in Triton's interpreter on a machine without a GPU. Triton's own library
    functions (behind tl.sum, tl.max, ...) take the mode that holds when triton is first imported,
    and the first torch optimizer any test builds imports triton through torch._dynamo."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_unconfigure(config):
    if GROUPS_FOLDER in config.stash:
        shutil.rmtree(config.stash[GROUPS_FOLDER], ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, in the controller: the file this worker writes its tests' groups to."""
    import tempfile

    if GROUPS_FOLDER not in node.config.stash:
        node.config.stash[GROUPS_FOLDER] = Path(tempfile.mkdtemp(prefix="rocmlab-xdist-groups-"))
    node.workerinput["rocmlab_groups"] = str(node.config.stash[GROUPS_FOLDER] / f"{node.gateway.id}.json")


def pytest_collection_modifyitems(config, items):
    # `--dist loadgroup` hands out the groups with most tests first (the machine-wide one, the
    # modules that share a fixture), then one-test groups in collection order: a lab's grading
    # collected late started last on a worker while the other had nothing left to do.
    items.sort(key=lambda item: item.get_closest_marker("runs_a_lab") is None)
    target = getattr(config, "workerinput", {}).get("rocmlab_groups")
    if target:  # written before the worker reports its collection, so before any scheduling
        Path(target).write_text(json.dumps({item.nodeid: _xdist_group(item) for item in items}), encoding="utf-8")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist, in the controller: `--dist loadgroup` on the groups the workers wrote."""
    if config.getvalue("dist") != "loadgroup" or GROUPS_FOLDER not in config.stash:
        return None
    from xdist.scheduler import LoadScopeScheduling

    folder = config.stash[GROUPS_FOLDER]

    class GroupScheduling(LoadScopeScheduling):  # a scope is one unit of work, given to one worker
        groups: dict | None = None

        def _split_scope(self, nodeid):
            if self.groups is None:  # every worker collected the same tests (xdist checks)
                written = sorted(folder.glob("*.json"))
                self.groups = json.loads(written[0].read_text(encoding="utf-8")) if written else {}
            return self.groups.get(nodeid) or nodeid

    return GroupScheduling(config, log)


def _xdist_group(item) -> str | None:
    named = item.get_closest_marker("xdist_group")
    if named:
        return str(named.args[0] if named.args else named.kwargs.get("name", "default"))
    if item.get_closest_marker("machine_wide"):
        return MACHINE_WIDE_GROUP
    fixtures = getattr(item, "_fixtureinfo", None)
    if fixtures and any(defs[-1].scope in SHARED_FIXTURE_SCOPES for defs in fixtures.name2fixturedefs.values()):
        return item.nodeid.split("::")[0]  # its module's file
    return None


GOOD_TOML = """\
id = "{id}"
version = "1.0.0"
title = {{ zh = "测试", en = "Test" }}
minutes = 10

[profiles.smoke]
params = {{ SCALE = 2 }}
timeout_s = 60
"""

GOOD_PY = """\
# %% [markdown] tags=["zh"]
# 中文说明

# %% [markdown] tags=["en"]
# English text

# %% tags=["parameters"]
PROFILE = "smoke"
SEED = 0
SCALE = 1

# %% tags=["solution"] grade_id="t-sol"
def f(x):
    ### BEGIN SOLUTION
    return x * SCALE
    ### END SOLUTION

# %% tags=["test"] grade_id="t-1" points=1
assert f(1) == SCALE
"""

GOOD_CHECKS = """\
from rocmlab.harness import check


@check("t-1", points=1, en="f scales by SCALE", zh="f 乘以 SCALE")
def scales(learner, variant):
    x = variant.random.randint(2, 9)
    assert learner.call("f", x) == x * learner.get("SCALE")
"""


@pytest.fixture
def make_course(tmp_path):
    """A course folder with labs written from (toml, py) text; returns its root."""

    def make(labs: dict[str, tuple[str, str]] | None = None) -> Path:
        root = tmp_path / "course"
        labs = labs if labs is not None else {"01-demo": (None, None)}
        for lab_id, (toml, py) in labs.items():
            folder = root / "solutions" / lab_id
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "lab.toml").write_text(
                toml if toml is not None else GOOD_TOML.format(id=lab_id), encoding="utf-8"
            )
            (folder / "lab.py").write_text(py if py is not None else GOOD_PY, encoding="utf-8")
            if py is None:
                (folder / "checks.py").write_text(GOOD_CHECKS, encoding="utf-8")
        return root

    return make


GRADING_WAYS = ["bubblewrap", "bubblewrap-per-kernel", "namespaces", "namespaces-per-kernel", "landlock"]


def force_grading_way(way: str, patch: pytest.MonkeyPatch) -> None:
    """Grading forced onto the sandbox backend of ``way`` (one of ``GRADING_WAYS``) through
    ``patch``; as root, the kernels of bubblewrap and of the namespace fallback are forked from a
    zygote unless ``-per-kernel``. Skips the test where this machine lacks the backend."""
    from rocmlab.grading import grader
    from rocmlab.sandbox import limits as sandbox

    backend = way.removesuffix("-per-kernel")
    if backend == "bubblewrap" and not sandbox.bubblewrap_works():
        pytest.skip("bubblewrap is not installed (make system-deps installs it)")
    if backend == "namespaces" and not sandbox.namespaces_work():
        pytest.skip("the namespace fallback needs root and unshare")
    if backend == "landlock" and sandbox.landlock.abi() < 6:
        pytest.skip("the Landlock backend is tested on Linux 6.12 or later (Landlock ABI 6)")
    patch.setattr(grader, "choose_backend", lambda _isolate: backend)
    if way.endswith("-per-kernel"):
        patch.setattr(sandbox, "fork_server_applies", lambda *_: False)


@pytest.fixture(scope="module", params=GRADING_WAYS)
def grading_backend(request):
    """Grading forced onto each sandbox backend this machine has (``force_grading_way``), for a
    module whose tests share one grading per backend. Yields the way's name."""
    patch = pytest.MonkeyPatch()
    try:
        force_grading_way(request.param, patch)
        yield request.param
    finally:
        patch.undo()


@pytest.fixture
def fixture_course(tmp_path):
    """A private copy of tests/fixtures/course, so runs never write into the repository."""
    root = tmp_path / "fixture-course"
    shutil.copytree(FIXTURE_COURSE, root)
    return root


def dedent(text: str) -> str:
    return textwrap.dedent(text)


# Runs as the launcher of jupyterhub: argv = [-c, scratch, path ..., --, jupyterhub, ...].
EXPOSE_FOR_DEMO = (
    "import os, sys; from pathlib import Path; from rocmlab.sandbox.paths import interpreter_paths; from rocmlab.sandbox.entry import expose_paths; "
    "cut = sys.argv.index('--'); "
    "expose_paths([*interpreter_paths(), *map(Path, sys.argv[2:cut])], Path(sys.argv[1])); "
    "os.execv(sys.argv[cut + 1], sys.argv[cut + 1:])"
)


@pytest.fixture
def demo_hub_options(tmp_path):
    """Options of a DemoHub started by a test. As root the demo's servers run as `nobody`, who
    must reach the interpreter, the checkout and tmp_path: jupyterhub then starts in a private
    mount namespace where the closed folders on the way are covered, as the grading sandbox does."""
    import sys
    import tempfile

    if os.geteuid() != 0:
        yield {}
        return
    if not shutil.which("unshare"):
        pytest.skip("a demo hub run as root needs unshare to let `nobody` reach the interpreter")
    for folder in (tmp_path, tmp_path.parent):  # pytest's own folders: passable, not listable
        folder.chmod(folder.stat().st_mode | 0o001)
    scratch = Path(tempfile.mkdtemp(prefix="rmldemo-mounts-"))
    root = Path(__file__).resolve().parents[1]
    launcher = ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", EXPOSE_FOR_DEMO]
    yield {"launcher": [*launcher, str(scratch), str(root), str(tmp_path), "--"], "check_install": False}
    for keep in scratch.glob("keep*"):  # only bound inside the namespace: empty here
        keep.rmdir()
    scratch.rmdir()


@pytest.fixture(scope="session")
def _quick_model_cache(tmp_path_factory):
    from rocmlab.assets import tiny_model

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers of one run share one build (under its file lock)
        root = root.parent
    cache = root / "quick-model-cache"
    tiny_model.ensure_tiny_model(cache, steps=1, evaluate=False, log=None)
    return cache


@pytest.fixture
def quick_tiny_model(_quick_model_cache, monkeypatch):
    """tiny-qwen-zh after one pre-training step, in a private cache: for fast tests that need the
    model's shapes and files, not what it learned (the full recipe takes minutes to build)."""
    from rocmlab.assets import tiny_model

    monkeypatch.setenv("ROCMLAB_CACHE", str(_quick_model_cache))
    monkeypatch.setattr(tiny_model, "DEFAULT_STEPS", 1)
    return _quick_model_cache


@pytest.fixture
def alembic_head_in_process(monkeypatch):
    """nbgrader asks an ``alembic heads`` subprocess (a second of CPU) for the schema head of every
    new gradebook: read it in process, as rocmlab's grading does (tests/grading/test_nbgrader_compat.py
    checks both give the same head). For tests of what runs around nbgrader, not of that lookup."""
    import nbgrader.api

    from rocmlab.grading import nbgrader_compat

    monkeypatch.setattr(nbgrader.api, "get_alembic_version", nbgrader_compat._alembic_head)


@pytest.fixture
def left_as_grader_users():
    """A function: what still runs as the named grader users. Each user is looked at while this
    test holds its claim lock (the one grading runs take), so a user that another grading run on
    the machine holds by then is passed over, with its processes, which are that run's."""
    import fcntl
    import pwd

    import psutil

    from rocmlab.sandbox.grader_users import LOCK_FOLDER

    def left(names) -> list[dict]:
        found = []
        for name in sorted(names):
            fd = os.open(LOCK_FOLDER / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                uid = pwd.getpwnam(name).pw_uid
                found += [
                    p.info
                    for p in psutil.process_iter(["pid", "uids", "cmdline"])
                    if p.info["uids"] and p.info["uids"].real == uid
                ]
            finally:
                os.close(fd)  # drops the lock
        return found

    return left
