"""The JSON Schemas of rocmlab's TOML files, and the one validator that names file and field.

``lab.schema.json`` describes ``solutions/<id>/lab.toml``; ``.taplo.toml`` at the repository
root hands it to editors (Taplo, VS Code's Even Better TOML) for completion and checks. Each
property may carry ``expected``, the phrase an error message uses for it ("expected a positive
integer"); a property without one borrows its parent's. ``matrix.schema.json`` describes
``env/matrix.toml``; ``rocmlab.freshness.matrix`` names each place in it by its entry (a ``locate`` hook).
``record``, ``ledger`` and ``fingerprint`` describe the run record, a ledger line and the machine
fingerprint both share: a schema refers to another by its file name (``fingerprint.schema.json``).
"""

from __future__ import annotations

import datetime as dt
import json
import tomllib
from collections.abc import Callable
from functools import cache
from pathlib import Path

from ..errors import InputError

SCHEMA_DIR = Path(__file__).resolve().parent
# Which error to report first when a file has several: a misspelt key shows up as an unknown
# field and as a missing one; the unknown field is the cause.
_FIRST = {"additionalProperties": 0, "required": 1}


@cache
def schema(name: str) -> dict:
    """The schema ``<name>.schema.json`` of this package."""
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))


def read_toml(path: Path, error=InputError, missing: str = "") -> dict:
    """A TOML file's table; ``error`` naming the file when it is missing (``missing`` says why it
    is needed) or is not TOML."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: missing" + (f" ({missing})" if missing else "")) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None


# locate(parts) -> (where, field): how a message names the place of the field reached by
# ``parts`` (the keys and indexes from the top of the file): a prefix that says where, and the field.
Locate = Callable[[list], tuple[str, str]]


def dotted(parts: list) -> tuple[str, str]:
    """The default place of a field: no prefix, the dotted path (``profiles.smoke.timeout_s``)."""
    return "", ".".join(str(p) for p in parts) or "(top level)"


def validate(data: dict, name: str, path: Path, error=InputError, locate: Locate = dotted) -> None:
    """Check ``data`` (read from ``path``) against schema ``name``; raise ``error`` naming the file,
    the field (as ``locate`` names it) and what was expected. TOML dates are checked as ISO strings."""
    found = sorted(
        _validator(name).iter_errors(_json_ready(data)),
        key=lambda e: (_FIRST.get(e.validator, 2), [str(p) for p in e.absolute_path]),
    )
    if found:
        raise error(f"{path}: {describe(found[0], schema(name), locate)}")


@cache
def _validator(name: str):
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema(name), registry=_registry())


@cache
def _registry():
    """Every schema of this package by its file name, the address a ``$ref`` to another file uses."""
    from referencing import Registry, Resource

    return Registry().with_resources(
        (path.name, Resource.from_contents(schema(path.name.removesuffix(".schema.json"))))
        for path in SCHEMA_DIR.glob("*.schema.json")
    )


def describe(error, root: dict, locate: Locate = dotted) -> str:
    """One jsonschema error as rocmlab says it: where, the field and what was expected."""
    parts = list(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))[0]
        where, field = locate([*parts, unknown])
        return f"{where}unknown field {field} (allowed: {', '.join(allowed)})"
    if error.validator == "required":
        missing = next(key for key in error.validator_value if key not in error.instance)
        expected = _expected([*error.absolute_schema_path][:-1] + ["properties", missing], root)
        where, field = locate([*parts, missing])
        return f"{where}missing field {field}" + (f" ({expected})" if expected else "")
    expected = _expected([*error.absolute_schema_path][:-1], root) or error.message
    where, field = locate(parts)
    return f"{where}field {field}: expected {expected}, got {error.instance!r}"


def _json_ready(value):
    """TOML dates and times become ISO strings (a date with a time keeps its time, so a date pattern fails it)."""
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return value


def _expected(schema_path: list, root: dict) -> str:
    """The ``expected`` phrase of the deepest schema on ``schema_path`` that has one. jsonschema
    leaves ``$ref`` out of the path: a step a node lacks is taken in the schema it refers to (in
    this file or another of the package); a number steps into a list of schemas (``allOf``, ``anyOf``)."""
    node, found = root, ""
    for step in schema_path:
        if isinstance(node, dict) and step not in node and "$ref" in node:
            node, root = _resolve(node["$ref"], root)
            found = node.get("expected", found)
        if isinstance(node, list) and isinstance(step, int) and step < len(node):
            node = node[step]
        elif isinstance(node, dict):
            node = node.get(step, {})
        else:
            break
        if isinstance(node, dict):
            if "$ref" in node:
                found = _resolve(node["$ref"], root)[0].get("expected", found)
            found = node.get("expected", found)
    return found


def _resolve(reference: str, root: dict) -> tuple[dict, dict]:
    """The schema ``reference`` names, and the root it lies in (``root`` itself, or another file's)."""
    file, _, pointer = reference.partition("#")
    if file:
        root = schema(file.removesuffix(".schema.json"))
    node = root
    for part in filter(None, pointer.split("/")):
        node = node[part]
    return node, root
