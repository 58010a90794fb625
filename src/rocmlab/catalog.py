"""Find labs under ``solutions/`` and read their ``lab.toml`` into typed, validated objects.

This module is the one place that knows the lab.toml schema (docs/lab-format.md).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

PROFILE_NAMES = ("smoke", "gpu", "multi-gpu")
LAB_ID = re.compile(r"^[0-9]{2}-[a-z0-9]+(-[a-z0-9]+)*$")
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
LANGUAGES = ("zh", "en")

_TOP_KEYS = {"id", "version", "title", "minutes", "requirements", "profiles"}
_PROFILE_KEYS = {"params", "timeout_s", "cell_timeout_s", "requires"}
_REQUIRES_KEYS = {"gpus", "gpu_mem_gb"}


class LabError(Exception):
    """A lab source is invalid; the message names the file and the field."""


@dataclass(frozen=True)
class Requires:
    gpus: int = 0
    gpu_mem_gb: float = 0.0


@dataclass(frozen=True)
class Profile:
    name: str
    params: dict
    timeout_s: int
    cell_timeout_s: int
    requires: Requires = field(default_factory=Requires)

    @property
    def parameters(self) -> dict:
        """What a run sets in the parameters cell: the profile's params and PROFILE."""
        return {**self.params, "PROFILE": self.name}


@dataclass(frozen=True)
class Lab:
    id: str
    version: str
    title: dict
    minutes: int
    requirements: tuple
    profiles: dict
    folder: Path

    @property
    def source(self) -> Path:
        return self.folder / "lab.py"

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            known = ", ".join(self.profiles)
            raise LabError(f"{self.folder / 'lab.toml'}: lab {self.id} has no profile {name!r} (it has: {known})")
        return self.profiles[name]


def _fail(path: Path, where: str, expected: str, got=None) -> LabError:
    suffix = "" if got is None else f", got {got!r}"
    return LabError(f"{path}: field {where}: expected {expected}{suffix}")


def _require(table: dict, key: str, kind, path: Path, where: str, expected: str):
    if key not in table:
        raise LabError(f"{path}: missing field {where}{key} ({expected})")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise _fail(path, f"{where}{key}", expected, value)
    return value


def _check_keys(table: dict, allowed: set, path: Path, where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise LabError(f"{path}: unknown field {where}{unknown[0]} (allowed: {', '.join(sorted(allowed))})")


def _parse_requires(table, path: Path, where: str) -> Requires:
    if not isinstance(table, dict):
        raise _fail(path, where, "a table like { gpus = 1, gpu_mem_gb = 16 }", table)
    _check_keys(table, _REQUIRES_KEYS, path, where + ".")
    gpus = table.get("gpus", 0)
    mem = table.get("gpu_mem_gb", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise _fail(path, where + ".gpus", "a non-negative integer", gpus)
    if not isinstance(mem, (int, float)) or isinstance(mem, bool) or mem < 0:
        raise _fail(path, where + ".gpu_mem_gb", "a non-negative number", mem)
    return Requires(gpus=gpus, gpu_mem_gb=float(mem))


def _parse_profile(name: str, table, path: Path) -> Profile:
    where = f"profiles.{name}"
    if name not in PROFILE_NAMES:
        raise LabError(f"{path}: unknown profile {where} (allowed: {', '.join(PROFILE_NAMES)})")
    if not isinstance(table, dict):
        raise _fail(path, where, "a table", table)
    _check_keys(table, _PROFILE_KEYS, path, where + ".")
    params = table.get("params", {})
    if not isinstance(params, dict):
        raise _fail(path, where + ".params", "a table of parameter values", params)
    timeout = _require(table, "timeout_s", int, path, where + ".", "a positive integer of seconds")
    if timeout <= 0:
        raise _fail(path, where + ".timeout_s", "a positive integer of seconds", timeout)
    cell_timeout = table.get("cell_timeout_s", timeout)
    if not isinstance(cell_timeout, int) or isinstance(cell_timeout, bool) or not 0 < cell_timeout <= timeout:
        raise _fail(
            path, where + ".cell_timeout_s", f"a positive integer no larger than timeout_s ({timeout})", cell_timeout
        )
    requires = _parse_requires(table.get("requires", {}), path, where + ".requires")
    return Profile(name, dict(params), timeout, cell_timeout, requires)


def _parse_title(value, path: Path) -> dict:
    if (
        not isinstance(value, dict)
        or set(value) != set(LANGUAGES)
        or not all(isinstance(v, str) and v.strip() for v in value.values())
    ):
        raise _fail(path, "title", "a table with non-empty zh and en strings", value)
    return dict(value)


def parse_lab(folder: Path) -> Lab:
    """Read and validate ``folder/lab.toml``; raise LabError naming the file and field."""
    path = folder / "lab.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LabError(f"{path}: missing (every lab folder needs a lab.toml)") from None
    except tomllib.TOMLDecodeError as exc:
        raise LabError(f"{path}: not valid TOML: {exc}") from None
    _check_keys(data, _TOP_KEYS, path, "")
    lab_id = _require(data, "id", str, path, "", "the lab id, e.g. 03-lora-finetune-zh")
    if not LAB_ID.match(lab_id):
        raise _fail(path, "id", "two digits, a dash and lowercase words, e.g. 03-lora-finetune-zh", lab_id)
    if lab_id != folder.name:
        raise _fail(path, "id", f"the folder name {folder.name!r}", lab_id)
    version = _require(data, "version", str, path, "", "a semantic version like 1.0.0")
    if not SEMVER.match(version):
        raise _fail(path, "version", "a semantic version like 1.0.0", version)
    minutes = _require(data, "minutes", int, path, "", "a positive integer")
    if minutes <= 0:
        raise _fail(path, "minutes", "a positive integer", minutes)
    requirements = data.get("requirements", [])
    if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
        raise _fail(path, "requirements", "a list of pip requirement strings", requirements)
    profiles_table = _require(data, "profiles", dict, path, "", "a [profiles.smoke] table at least")
    profiles = {name: _parse_profile(name, table, path) for name, table in profiles_table.items()}
    if "smoke" not in profiles:
        raise LabError(f"{path}: missing field profiles.smoke (every lab runs in the smoke profile)")
    title = _parse_title(data.get("title"), path)
    return Lab(lab_id, version, title, minutes, tuple(requirements), profiles, folder)


def discover(root: Path) -> list[Lab]:
    """All labs under ``root/solutions``, sorted by id; duplicate ids are an error."""
    solutions = root / "solutions"
    labs = [parse_lab(p.parent) for p in sorted(solutions.glob("*/lab.toml"))]
    seen: dict[str, Path] = {}
    for lab in labs:
        if lab.id in seen:
            raise LabError(f"{lab.folder / 'lab.toml'}: duplicate id {lab.id!r}, also in {seen[lab.id]}")
        seen[lab.id] = lab.folder / "lab.toml"
    return labs


def select(labs: list[Lab], wanted: list[str] | None) -> list[Lab]:
    """Labs named on the command line (full id or its two-digit number); all when none named."""
    if not wanted:
        return list(labs)
    by_key = {lab.id: lab for lab in labs} | {lab.id[:2]: lab for lab in labs}
    chosen = []
    for name in wanted:
        if name not in by_key:
            close = difflib.get_close_matches(name, [lab.id for lab in labs], n=1, cutoff=0.3)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(lab.id for lab in labs) or "none"
            raise LabError(f"unknown lab {name!r}{hint} (labs: {known})")
        if by_key[name] not in chosen:
            chosen.append(by_key[name])
    return chosen


def find_root(start: Path | None = None) -> Path:
    """The course repository root: the nearest folder upwards holding ``solutions/``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "solutions").is_dir():
            return folder
    raise LabError(f"no solutions/ folder in {here} or above: run rocmlab inside the course repository or pass --root")
