"""No import circle among rocmlab's modules, and no import from a lower layer up to a higher one:
every import, at the top or inside a function, counts. The layers are docs/architecture.md's
table between ``<!-- layers:start -->`` and ``<!-- layers:end -->``: the map is the contract.
``make lint`` checks the same with import-linter, whose layers (pyproject.toml) must be the table's."""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ARCHITECTURE = SRC.parent / "docs" / "architecture.md"
PYPROJECT = SRC.parent / "pyproject.toml"


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.AST, package: str, modules: set[str]) -> set[str]:
    """The rocmlab modules one import statement loads (``from .x import y``: ``x.y`` when it is a module)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    found = set()
    for alias in node.names:
        if f"{target}.{alias.name}" in modules:
            found.add(f"{target}.{alias.name}")
        elif target in modules:
            found.add(target)
    return found


def import_graph(src: Path) -> dict[str, set[str]]:
    paths = {module_name(p, src): p for p in src.rglob("*.py")}
    modules = set(paths)
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            edges |= imported(node, package, modules)
        graph[name] = edges - {name}
    return graph


@functools.cache
def rocmlab_graph() -> dict[str, set[str]]:
    """rocmlab's own graph, parsed once for the tests that read it (every module's AST walked)."""
    return import_graph(SRC)


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan): each holds a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(set(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One circle inside ``component``, from its first module back to it, as the error shows it."""
    start = min(component)
    path, seen, node = [start], {start}, start
    while True:
        following = sorted(graph[node] & component)
        back = start if start in following else None
        node = back or next((n for n in following if n not in seen), following[0])
        path.append(node)
        if node in seen:
            return path[path.index(node) :]
        seen.add(node)


def test_no_import_circle_among_rocmlab_modules():
    graph = rocmlab_graph()
    found = circles(graph)
    assert not found, "import circles: " + "; ".join(" → ".join(path_through(graph, c)) for c in found)


def layers(markdown: str) -> list[tuple[str, list[str]]]:
    """(layer, its modules) from the table's rows ``| N | layer | `module`, `package/` ... | job |``, lowest first."""
    table = markdown.split("<!-- layers:start -->", 1)[1].split("<!-- layers:end -->", 1)[0]
    found = []
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            names = re.findall(r"`([\w/]+)`", cells[2])
            found.append((cells[1], [f"rocmlab.{name.rstrip('/').replace('/', '.')}" for name in names]))
    return found


def layer_of(module: str, table: list[tuple[str, list[str]]]) -> int | None:
    """The layer of the longest name in the table that is ``module`` or a package holding it."""
    best = None
    for index, (_, names) in enumerate(table):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > best[1]):
                best = (index, len(name))
    return best[0] if best else None


def upward_imports(graph: dict[str, set[str]], table) -> tuple[list[str], list[str]]:
    """Imports from a lower layer up to a higher one, and the modules no layer holds."""
    unplaced = sorted(m for m in graph if m != "rocmlab" and layer_of(m, table) is None)
    upward = [
        f"{module} ({table[layer_of(module, table)][0]}) imports {other} ({table[layer_of(other, table)][0]})"
        for module in sorted(graph)
        if module not in unplaced and module != "rocmlab"
        for other in sorted(graph[module])
        if other not in unplaced and other != "rocmlab" and layer_of(other, table) > layer_of(module, table)
    ]
    return upward, unplaced


def test_every_module_sits_in_a_layer_and_imports_only_its_own_or_lower_ones():
    table = layers(ARCHITECTURE.read_text(encoding="utf-8"))
    upward, unplaced = upward_imports(rocmlab_graph(), table)
    assert not unplaced, f"add these to the layer table of docs/architecture.md: {unplaced}"
    assert not upward, "imports against the layers of docs/architecture.md: " + "; ".join(upward)


def test_an_upward_import_and_an_unplaced_module_are_named():
    table = layers(
        "<!-- layers:start -->\n| 1 | base | `errors`, `lab/` | x |\n| 2 | top | `cli` | y |\n<!-- layers:end -->"
    )
    graph = {
        "rocmlab.errors": {"rocmlab.cli"},
        "rocmlab.lab.env": {"rocmlab.errors"},
        "rocmlab.cli": set(),
        "rocmlab.new": set(),
    }
    assert upward_imports(graph, table) == (["rocmlab.errors (base) imports rocmlab.cli (top)"], ["rocmlab.new"])


def test_a_circle_is_found_and_shown(tmp_path):
    package = tmp_path / "rocmlab"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from ..c import g\n")  # inside a function counts
    (package / "c.py").write_text("import rocmlab.a\n")
    (package / "leaf.py").write_text("from . import c\n")
    graph = import_graph(tmp_path)
    assert circles(graph) == [{"rocmlab.a", "rocmlab.sub.b", "rocmlab.c"}]
    assert path_through(graph, circles(graph)[0]) == ["rocmlab.a", "rocmlab.sub.b", "rocmlab.c", "rocmlab.a"]


def contract_layers(pyproject: dict) -> list[list[str]]:
    """The layers of import-linter's layers contract, lowest first, as the table writes them."""
    (contract,) = [c for c in pyproject["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    assert contract["containers"] == ["rocmlab"] and contract["exhaustive"], "one exhaustive contract over rocmlab"
    return [[f"rocmlab.{name.strip()}" for name in layer.split(":")] for layer in reversed(contract["layers"])]


def test_make_lints_contract_is_the_layer_table():
    table = [sorted(names) for _, names in layers(ARCHITECTURE.read_text(encoding="utf-8"))]
    contract = [sorted(names) for names in contract_layers(tomllib.loads(PYPROJECT.read_text(encoding="utf-8")))]
    assert contract == table, "pyproject.toml's [tool.importlinter] layers and docs/architecture.md's table differ"


def test_every_top_level_module_and_package_has_a_row():
    """import-linter's contract is exhaustive over rocmlab's children, so a row holds each, not a part of one."""
    table = {name for _, names in layers(ARCHITECTURE.read_text(encoding="utf-8")) for name in names}
    children = {f"rocmlab.{p.stem}" for p in (SRC / "rocmlab").glob("*.py") if p.stem != "__init__"}
    children |= {f"rocmlab.{p.parent.name}" for p in (SRC / "rocmlab").glob("*/__init__.py")}
    assert table == children, (
        f"rows without a module: {sorted(table - children)}; without a row: {sorted(children - table)}"
    )
