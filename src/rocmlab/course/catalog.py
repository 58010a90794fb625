"""Find labs under ``solutions/`` and read their ``lab.toml`` into typed, validated objects.

The lab.toml schema is ``schemas/lab.schema.json`` (docs/lab-format.md); this module adds the
rules a schema cannot state (the id is the folder's name, a cell's limit fits the notebook's).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LabError
from ..schemas import read_toml, validate

SMOKE, GPU, MULTI_GPU = "smoke", "gpu", "multi-gpu"
PROFILE_NAMES = (SMOKE, GPU, MULTI_GPU)  # the profiles schemas/lab.schema.json allows, in this order
LANGUAGES = ("zh", "en")
COURSE_MODEL = "tiny-qwen-zh"  # the offline model built into the user cache (rocmlab.assets.tiny_model)
HIDDEN_DATA = "*_hidden.*"  # data files only the hidden checks read: kept from learners' kernels
LOOPBACK_TCP = "loopback-tcp"  # a lab's ``needs``: its ranks talk over TCP on 127.0.0.1 (schemas/lab.schema.json)


@dataclass(frozen=True)
class Requires:
    gpus: int = 0
    gpu_mem_gb: float = 0.0
    course_model: bool = False  # the offline course model, which `rocmlab run` builds into the cache first
    qc_adapter: bool = False  # lab 03's QC adapter on that model, which `rocmlab run` builds right after it


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
    summary: str = ""  # what the learner builds (the README's lab table)
    needs: tuple = ()  # what its graded run needs of the sandbox (``LOOPBACK_TCP``)

    @property
    def source(self) -> Path:
        return self.folder / "lab.py"

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    @property
    def checks(self) -> Path:
        """The lab's hidden checks, run by the trusted harness (``rocmlab.harness``)."""
        return self.folder / "checks.py"

    @property
    def hidden_files(self) -> list[Path]:
        """Data only the hidden checks read (``data/*_hidden.*``)."""
        return sorted(self.data_dir.glob(HIDDEN_DATA)) if self.data_dir.is_dir() else []

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            known = ", ".join(self.profiles)
            raise LabError(f"{self.folder / 'lab.toml'}: lab {self.id} has no profile {name!r} (it has: {known})")
        return self.profiles[name]


def parse_lab(folder: Path) -> Lab:
    """Read ``folder/lab.toml`` and check it against the lab schema (``schemas/lab.schema.json``)
    and the rules a schema cannot state; raise LabError naming the file and the field."""
    path = folder / "lab.toml"
    data = read_toml(path, LabError, "every lab folder needs a lab.toml")
    validate(data, "lab", path, LabError)
    if data["id"] != folder.name:
        raise LabError(f"{path}: field id: expected the folder name {folder.name!r}, got {data['id']!r}")
    profiles = {name: _profile(name, table, path) for name, table in data["profiles"].items()}
    return Lab(
        data["id"],
        data["version"],
        dict(data["title"]),
        int(data["minutes"]),
        tuple(data.get("requirements", [])),
        profiles,
        folder,
        data.get("summary", ""),
        tuple(data.get("needs", [])),
    )


def _profile(name: str, table: dict, path: Path) -> Profile:
    timeout = int(table["timeout_s"])
    cell_timeout = int(table.get("cell_timeout_s", timeout))
    if cell_timeout > timeout:
        raise LabError(
            f"{path}: field profiles.{name}.cell_timeout_s: expected a positive integer no larger than "
            f"timeout_s ({timeout}), got {cell_timeout}"
        )
    requires = table.get("requires", {})
    params = dict(table.get("params", {}))
    course_model = bool(requires.get("course_model", False))
    if params.get("MODEL") == COURSE_MODEL and not course_model:
        raise LabError(
            f"{path}: field profiles.{name}.requires.course_model: expected true, since params.MODEL is "
            f"{COURSE_MODEL!r} (the run builds it before starting this lab), got it unset or false"
        )
    qc_adapter = bool(requires.get("qc_adapter", False))
    if qc_adapter and not course_model:
        raise LabError(
            f"{path}: field profiles.{name}.requires.course_model: expected true, since requires.qc_adapter is "
            "true (the adapter is trained on the course model), got it unset or false"
        )
    return Profile(
        name,
        params,
        timeout,
        cell_timeout,
        Requires(int(requires.get("gpus", 0)), float(requires.get("gpu_mem_gb", 0)), course_model, qc_adapter),
    )


def discover(root: Path) -> list[Lab]:
    """All labs under ``root/solutions``, sorted by id; duplicate ids are an error."""
    solutions = root / "solutions"
    if not solutions.is_dir():
        raise LabError(f"{solutions}: no such folder (the labs' sources live there)")
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
