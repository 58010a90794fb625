"""The course's words are defined once: profile names in catalog, cell markers in source, and
only catalog reads a lab.toml."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from rocmlab.course.catalog import PROFILE_NAMES
from rocmlab.course.source import MARKERS
from rocmlab.schemas import schema

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "rocmlab"
MARKER_TEXT = {marker for pair in MARKERS.values() for marker in pair}
# TODO(issue 38): hub/labs.py lists the hub's own subset, ("smoke", "gpu"); spell it with catalog.SMOKE
# and GPU when the hub's modules are free to change.
PROFILE_LISTS_ALLOWED = {"hub/labs.py"}


@functools.cache
def modules() -> tuple[tuple[str, ast.Module], ...]:
    """Every module of the package, parsed once for the tests of this file (they only read the trees)."""
    return tuple(
        (path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(PACKAGE.rglob("*.py"))
    )


def strings(node: ast.AST) -> list[str]:
    """The string literals under ``node``, docstrings left out (prose may name anything)."""
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(node)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def test_the_lab_schema_allows_exactly_the_catalogs_profiles():
    assert tuple(schema("lab")["properties"]["profiles"]["properties"]) == PROFILE_NAMES


def test_no_module_spells_out_the_list_of_profiles():
    found = []
    for name, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple | ast.List | ast.Set) and name not in {
                "course/catalog.py",
                *PROFILE_LISTS_ALLOWED,
            }:
                spelled = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in PROFILE_NAMES}
                if len(spelled) >= 2:
                    found.append(f"{name}:{node.lineno}")
    assert not found, f"import catalog.PROFILE_NAMES instead: {found}"


def test_only_source_spells_the_cell_markers():
    found = [
        f"{name}: {text!r}"
        for name, tree in modules()
        if name != "course/source.py"
        for text in strings(tree)
        if any(marker in text for marker in MARKER_TEXT)
    ]
    assert not found, f"import source.MARKERS instead: {found}"


def test_only_catalog_reads_lab_toml():
    """A module that parses TOML and names lab.toml reads it behind catalog's back (its schema, its errors)."""
    found = []
    for name, tree in modules():
        imports_toml = any(
            isinstance(node, ast.Import) and any(alias.name == "tomllib" for alias in node.names)
            for node in ast.walk(tree)
        )
        if name != "course/catalog.py" and imports_toml and any("lab.toml" in text for text in strings(tree)):
            found.append(name)
    assert not found, f"read labs with catalog.discover / parse_lab: {found}"
