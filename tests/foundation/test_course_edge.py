"""The course root is looked up once, at a process's edge, and passed down as a ``Course``
(``rocmlab.course.course``): no module below the edge calls ``find_root``, ``Course.find`` or
``Course.here``. The scan reads every module's syntax tree, so an import inside a function or an
alias counts as much as one at the top."""

import ast
from pathlib import Path

import pytest

from rocmlab.cli import main

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
HUB_CONFIG = REPO / "env" / "jupyterhub"  # the hub's configuration: a process of its own

# module: why it may look the course up (a process of its own, or the lookup itself)
EDGES = {
    "rocmlab/course/course.py": "Course.find and Course.here, on find_root",
    "rocmlab/cli.py": "the command line: every command's course, found once in main",
    "rocmlab/freshness/matrix.py": "a lab notebook's kernel calling releases.load_matrix() without a path",
    "rocmlab/lab/qc_adapter.py": "lab 03's kernel and python -m rocmlab.lab.qc_adapter",
    "rocmlab/execution/device_kit.py": "python -m rocmlab.execution.device_kit (make device-kit)",
    "rocmlab/execution/device_check.py": "python -m rocmlab.execution.device_check (ci/device_check.sh)",
    "jupyterhub_config.py": "the hub's configuration, read by the jupyterhub process",
}
LOOKUPS = {"find_root", "Course.find", "Course.here"}


def lookups(source: str) -> list[str]:
    """Each call in ``source`` that looks the course up, as ``name (line N)``."""
    aliases = {"find_root": "find_root", "Course": "Course"}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in aliases and alias.asname:
                    aliases[alias.asname] = alias.name
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = called_name(node.func, aliases)
            if name in LOOKUPS:
                found.append(f"{name} (line {node.lineno})")
    return found


def called_name(func: ast.expr, aliases: dict[str, str]) -> str:
    if isinstance(func, ast.Name):
        return aliases.get(func.id, func.id)
    if isinstance(func, ast.Attribute):
        if func.attr == "find_root":
            return "find_root"  # root.find_root(...), rocmlab.root.find_root(...)
        if isinstance(func.value, ast.Name):
            return f"{aliases.get(func.value.id, func.value.id)}.{func.attr}"
    return ""


def modules() -> dict[str, str]:
    paths = {str(p.relative_to(SRC)): p for p in sorted(SRC.glob("rocmlab/**/*.py"))}
    paths |= {p.name: p for p in sorted(HUB_CONFIG.glob("*.py"))}
    return {name: path.read_text(encoding="utf-8") for name, path in paths.items()}


def test_no_module_below_the_edge_looks_the_course_up():
    below = {name: lookups(text) for name, text in modules().items() if name not in EDGES}
    offenders = {name: calls for name, calls in below.items() if calls}
    assert not offenders, f"receive a Course from the edge instead of looking it up: {offenders}"


def test_every_edge_named_still_looks_it_up():
    texts = modules()
    stale = [name for name in EDGES if name not in texts or not lookups(texts[name])]
    assert not stale, f"no longer an edge: remove from EDGES: {stale}"


@pytest.mark.parametrize(
    "source",
    [
        "from rocmlab.root import find_root\nfind_root(None)\n",
        "from ..root import find_root as where\ndef f():\n    return where()\n",
        "from rocmlab import root\nroot.find_root()\n",
        "from ..course.course import Course\nCourse.find('x')\n",
        "from ..course.course import Course as C\nC.here()\n",
    ],
)
def test_the_scan_finds_a_lookup_however_it_is_written(source):
    assert lookups(source)


def test_the_scan_leaves_a_course_passed_down_alone():
    assert not lookups("def f(course):\n    return course.root / 'solutions', course.labs()\n")


def test_a_command_that_needs_a_course_says_what_was_looked_for_outside_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    assert main(["build"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rocmlab build: error: no solutions/ folder in") and "pass --root" in err, err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["list"], "no lab notebooks in"),
        (["check", "nope.ipynb"], "nope.ipynb: no such notebook"),
        (["submit", "nope.ipynb"], "nope.ipynb: no such notebook"),
        (["live", "status", "--queue", "none.sqlite"], "none.sqlite: expected the live queue file"),
        (["releases", "show", "--matrix", "missing.toml"], "missing.toml"),
    ],
)
def test_a_command_that_works_outside_a_course_is_given_none_there(argv, says, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "no solutions/ folder" not in err, err


def test_the_live_worker_needs_the_course_its_labs_are_in(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    assert main(["live", "worker", "--queue", "q.sqlite"]) == 2
    assert "rocmlab live: error: no solutions/ folder in" in capsys.readouterr().err
