"""The release matrix, env/matrix.toml: schema, typed entries, the CI job matrix.

``read_matrix()`` validates the file against the JSON Schema shipped in the package
(``schemas/matrix.schema.json``, through ``schemas.validate``), then checks the rules that tie fields together, and returns
typed entries, newest first. Every error names the file, the entry and the field.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from ..course.catalog import LabError
from ..course.course import MATRIX_RELATIVE, Course  # noqa: F401 (MATRIX_RELATIVE: the course's, re-exported)
from ..schemas import validate

STATUSES = ("current", "previous", "eol")
ERAS = ("6.x", "7.x", "therock")
METHODS = ("wheel", "multiarch", "image")
ROCM_FACTS = ("rocm", "released", "pytorch", "python", "gfx", "install")
CPU_FACTS = ("pins",)
CANARY_FACTS = ("requirements",)
CUDA_FACTS = ("device", "pytorch", "cuda", "python")
THEROCK_FIRST = (7, 14)  # TheRock-built production releases start with ROCm 7.14
STALE_SOURCE_DAYS = 90


class MatrixError(LabError):
    """A matrix file that does not follow the schema; the message names file, entry and field."""


@dataclass(frozen=True)
class Source:
    url: str
    seen: dt.date
    fact: str
    facts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Install:
    method: str
    index_url: str | None = None
    requirement: str | None = None
    image: str | None = None
    digest: str | None = None

    def requirement_for(self, gfx: str) -> str | None:
        """The pip requirement for one GPU target (fills the device-gfxNNN extra)."""
        return self.requirement.replace("{gfx}", gfx) if self.requirement else None


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # "rocm" | "cpu" | "canary" | "cuda"
    status: str
    python: str
    sources: tuple[Source, ...] = ()
    notes: str | None = None
    unverified: tuple[str, ...] = ()
    rocm: str | None = None
    released: dt.date | None = None
    era: str | None = None
    pytorch: str | None = None
    gfx: tuple[str, ...] = ()
    runner_gfx: str | None = None
    install: Install | None = None
    pins: tuple[str, ...] = ()
    torch_index: str | None = None
    target: str | None = None  # canary: "cpu" | "gpu"
    requirements: tuple[str, ...] = ()  # canary: unpinned requirements
    pre: tuple[str, ...] = ()  # canary: packages taken as pre-releases
    held: tuple[str, ...] = ()  # cpu: packages kept below PyPI's newest on purpose (see notes)
    device: str | None = None  # cuda: the GPU the device check ran on
    cuda: str | None = None  # cuda: the CUDA version of its PyTorch build

    def pin(self, package: str) -> str | None:
        """The pinned version of ``package`` in a CPU entry (local label kept), or None."""
        for line in self.pins:
            req = Requirement(line)
            if canonical(req.name) == canonical(package):
                return next(iter(req.specifier)).version
        return None

    @property
    def torch_version(self) -> str | None:
        return self.pytorch if self.kind == "rocm" else self.pin("torch")

    @property
    def on_gpu(self) -> bool:
        return self.kind == "rocm" or self.target == "gpu"

    @property
    def dockerfile(self) -> Path | None:
        return Path("env") / "docker" / f"{self.name}.Dockerfile" if self.on_gpu else None

    def stale_sources(self, today: dt.date, days: int = STALE_SOURCE_DAYS) -> list[Source]:
        return [s for s in self.sources if (today - s.seen).days > days]


@dataclass(frozen=True)
class Matrix:
    path: Path
    entries: tuple[Entry, ...]
    canaries: tuple[Entry, ...] = ()
    cuda: tuple[Entry, ...] = ()  # the device check's CUDA machines (ci/device_check.sh): never a freshness verdict

    def get(self, name: str) -> Entry:
        for entry in self.entries + self.canaries + self.cuda:
            if entry.name == name:
                return entry
        known = ", ".join(e.name for e in self.entries + self.canaries + self.cuda)
        raise MatrixError(f"{self.path}: no entry named {name!r} (entries: {known})")


# ---------------------------------------------------------------- locating and loading


PACKAGED_MATRIX = Path(__file__).parents[1] / "release_matrix.toml"  # env/matrix.toml, shipped in the package


def find_matrix() -> Path:
    """env/matrix.toml of the course a lab notebook's kernel runs in, for ``read_matrix()`` without a
    path: a kernel is a process of its own, given no ``Course``, so it looks once here ($ROCMLAB_ROOT,
    else the working directory); outside a course (a student notebook downloaded alone), the copy
    the package ships."""
    from ..errors import InputError

    try:
        return Course.find().matrix_path
    except InputError as err:
        if PACKAGED_MATRIX.is_file():
            return PACKAGED_MATRIX
        raise MatrixError(f"no release matrix: {err}; and this rocmlab package ships none") from None


def repo_root(matrix_path: Path | None = None) -> Path:
    path = Path(matrix_path) if matrix_path else find_matrix()
    return path.resolve().parent.parent


def read_matrix(path: Path | str | None = None) -> Matrix:
    """Parse and validate the matrix file; entries come back newest first."""
    path = Path(path) if path else find_matrix()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MatrixError(f"{path}: file not found") from None
    return parse_matrix(text, path)


def parse_matrix(text: str, path: Path) -> Matrix:
    """Validate matrix ``text`` (errors name ``path``); entries come back newest first."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise MatrixError(f"{path}: not valid TOML: {err}") from None
    validate(data, "matrix", path, MatrixError, locate=lambda parts: _locate(parts, data))
    entries = [_rocm_entry(t, path) for t in data.get("rocm", [])]
    entries += [_cpu_entry(t, path) for t in data.get("cpu", [])]
    canaries = [_canary_entry(t, path) for t in data.get("canary", [])]
    cuda = [_cuda_entry(t, path) for t in data.get("cuda", [])]
    _check_unique(entries + canaries + cuda, path)
    return Matrix(path=path, entries=tuple(sort_newest_first(entries)), canaries=tuple(canaries), cuda=tuple(cuda))


def load_matrix(path: Path | str | None = None) -> list[Entry]:
    """The ROCm and CPU entries, newest first: ROCm by version, then CPU by library generation.

    Canary entries (pre-release channels) and CUDA entries (the device check's machines) are not
    among them: they are never the newest environment a lab is judged on.
    ``read_matrix(path).canaries`` and ``.cuda`` have them.
    """
    return list(read_matrix(path).entries)


def newest_environment(kind: str | None = None, path: Path | str | None = None) -> Entry:
    """The newest entry with status current (of ``kind`` when given): staleness is judged on it."""
    entries = [e for e in load_matrix(path) if kind in (None, e.kind)]
    current = [e for e in entries if e.status == "current"]
    if not (current or entries):
        raise MatrixError(f"{path or find_matrix()}: no entry of kind {kind!r}")
    return (current or entries)[0]


def sort_newest_first(entries: list[Entry]) -> list[Entry]:
    rocm = sorted((e for e in entries if e.kind == "rocm"), key=lambda e: Version(e.rocm), reverse=True)
    cpu = sorted((e for e in entries if e.kind == "cpu"), key=_cpu_generation, reverse=True)
    return rocm + cpu


def _cpu_generation(entry: Entry):
    versions = [entry.pin(p) or "0" for p in ("transformers", "torch", "peft")]
    return tuple(Version(v) for v in versions)


def series(version: str) -> tuple[int, int]:
    return Version(version).release[:2]


def era_of(version: str) -> str:
    major, minor = series(version)
    return "therock" if (major, minor) >= THEROCK_FIRST else f"{major}.x"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------- where a schema error is


def _locate(parts: list, data: dict) -> tuple[str, str]:
    """The place of the field at ``parts`` as matrix messages name it (``schemas.validate``'s hook):
    ("[[cpu]] entry 'cpu-current' sources[0]: ", "'url'"); an item of a list is its list's field."""
    names = [p for p in parts if isinstance(p, str)]
    if not names:
        return "", "(top level)"
    field = names[-1]
    parent = parts[: len(parts) - 1 - parts[::-1].index(field)]
    return f"{_where(parent, data)}: ", repr(field)


def _where(parts: list, data: dict) -> str:
    """'[[rocm]] entry 'rocm-7.14'' plus the path inside it (install, sources[0]), or 'top level'."""
    if len(parts) < 2 or parts[0] not in ("rocm", "cpu", "canary", "cuda"):
        return "top level"
    kind, index = parts[0], parts[1]
    table = data[kind][index] if isinstance(index, int) else {}
    name = table.get("name") if isinstance(table, dict) else None
    label = f"[[{kind}]] entry {name!r}" if isinstance(name, str) else f"[[{kind}]] entry #{index + 1}"
    inner = ""
    for part in parts[2:]:
        inner += f"[{part}]" if isinstance(part, int) else (f".{part}" if inner else part)
    return f"{label} {inner}" if inner else label


# ---------------------------------------------------------------- rules beyond the schema


def _fail(path: Path, where: str, key: str, expected: str, got=None) -> MatrixError:
    return MatrixError(f"{path}: {where}: field {key!r}: expected {expected}, got {got!r}")


def _label(kind: str, table: dict) -> str:
    return f"[[{kind}]] entry {table['name']!r}"


def _date(value) -> dt.date:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(value)


def _sources(table: dict) -> tuple[Source, ...]:
    return tuple(
        Source(url=s["url"], seen=_date(s["seen"]), fact=s["fact"], facts=tuple(s["facts"])) for s in table["sources"]
    )


def _check_facts(table: dict, kind: str, required: tuple[str, ...], path: Path) -> None:
    """Every fact of the entry is backed by a source (``facts``) or declared ``unverified``."""
    covered = {f for s in table["sources"] for f in s["facts"]} | set(table.get("unverified", []))
    missing = [f for f in required if f not in covered]
    if missing:
        raise _fail(
            path,
            _label(kind, table),
            "sources",
            f"a source whose `facts` names {missing[0]!r}, or {missing[0]!r} listed in `unverified`",
            sorted(covered),
        )


def _rocm_entry(table: dict, path: Path) -> Entry:
    where = _label("rocm", table)
    name, rocm, pytorch = table["name"], table["rocm"], table["pytorch"]
    if series(rocm) != tuple(int(p) for p in name.removeprefix("rocm-").split(".")):
        raise _fail(path, where, "name", f"rocm-<major>.<minor> of rocm {rocm}", name)
    if table["era"] != era_of(rocm):
        raise _fail(path, where, "era", f"{era_of(rocm)!r} for ROCm {rocm}", table["era"])
    if table["runner_gfx"] not in table["gfx"]:
        raise _fail(path, where, "runner_gfx", f"one of gfx {table['gfx']}", table["runner_gfx"])
    install = Install(**table["install"])
    if install.method != "image":
        _check_torch_requirement(install, rocm, pytorch, path, f"{where} install")
    _check_facts(table, "rocm", ROCM_FACTS, path)
    return Entry(
        name=name,
        kind="rocm",
        status=table["status"],
        python=table["python"],
        sources=_sources(table),
        notes=table.get("notes"),
        unverified=tuple(table.get("unverified", ())),
        rocm=rocm,
        released=_date(table["released"]),
        era=table["era"],
        pytorch=pytorch,
        gfx=tuple(table["gfx"]),
        runner_gfx=table["runner_gfx"],
        install=install,
    )


def _check_torch_requirement(install: Install, rocm: str, pytorch: str, path: Path, at: str) -> None:
    multiarch = install.method == "multiarch"
    expected = (
        f"torch[device-{{gfx}}]=={pytorch}+rocm{rocm}"
        if multiarch
        else f"torch=={pytorch}+rocm{'.'.join(rocm.split('.')[:2])}"
    )
    requirement = install.requirement
    if multiarch != ("[device-{gfx}]" in requirement):
        raise _fail(path, at, "requirement", expected, requirement)
    try:
        req = Requirement(requirement.replace("{gfx}", "gfx000"))
        (spec,) = req.specifier
        version = Version(spec.version)
    except (InvalidRequirement, ValueError):
        raise _fail(path, at, "requirement", expected, requirement) from None
    label = version.local or ""
    label_ok = label == f"rocm{rocm}" if multiarch else label.startswith("rocm") and rocm.startswith(label[4:])
    if req.name != "torch" or spec.operator != "==" or version.public != Version(pytorch).public or not label_ok:
        raise _fail(path, at, "requirement", f"{expected} (matching pytorch and rocm)", requirement)


def _cpu_entry(table: dict, path: Path) -> Entry:
    where = _label("cpu", table)
    names = set()
    for pin in table["pins"]:
        try:
            req = Requirement(pin)
        except InvalidRequirement:
            raise _fail(path, where, "pins", 'exact pins like "transformers==5.24.0"', pin) from None
        if canonical(req.name) in names:
            raise _fail(path, where, "pins", "each package pinned once", pin)
        names.add(canonical(req.name))
    if "torch" not in names:
        raise _fail(path, where, "pins", "a torch pin among the pins", table["pins"])
    unknown = [p for p in table.get("held", []) if canonical(p) not in names]
    if unknown:
        raise _fail(path, where, "held", f"packages among the pins {sorted(names)}", unknown[0])
    _check_facts(table, "cpu", CPU_FACTS, path)
    return Entry(
        name=table["name"],
        kind="cpu",
        status=table["status"],
        python=table["python"],
        sources=_sources(table),
        notes=table.get("notes"),
        unverified=tuple(table.get("unverified", ())),
        pins=tuple(table["pins"]),
        torch_index=table.get("torch_index"),
        held=tuple(canonical(p) for p in table.get("held", ())),
    )


def _canary_entry(table: dict, path: Path) -> Entry:
    where = _label("canary", table)
    names = []
    for line in table["requirements"]:
        try:
            names.append(canonical(Requirement(line.replace("{gfx}", "gfx000")).name))
        except InvalidRequirement:
            raise _fail(path, where, "requirements", 'requirements like "torch"', line) from None
    unknown = [p for p in table.get("pre", []) if canonical(p) not in names]
    if unknown:
        raise _fail(path, where, "pre", f"packages among the requirements {names}", unknown[0])
    if table["target"] == "gpu" and table["runner_gfx"] not in table["gfx"]:
        raise _fail(path, where, "runner_gfx", f"one of gfx {table['gfx']}", table["runner_gfx"])
    _check_facts(table, "canary", CANARY_FACTS, path)
    return Entry(
        name=table["name"],
        kind="canary",
        status="canary",
        python=table["python"],
        sources=_sources(table),
        notes=table.get("notes"),
        target=table["target"],
        requirements=tuple(table["requirements"]),
        pre=tuple(table.get("pre", ())),
        torch_index=table.get("index_url"),
        gfx=tuple(table.get("gfx", ())),
        runner_gfx=table.get("runner_gfx"),
    )


def _cuda_entry(table: dict, path: Path) -> Entry:
    _check_facts(table, "cuda", CUDA_FACTS, path)
    return Entry(
        name=table["name"],
        kind="cuda",
        status=table["status"],
        python=table["python"],
        sources=_sources(table),
        notes=table.get("notes"),
        unverified=tuple(table.get("unverified", ())),
        pytorch=table["pytorch"],
        device=table["device"],
        cuda=table["cuda"],
    )


def _check_unique(entries: list[Entry], path: Path) -> None:
    seen = set()
    for entry in entries:
        if entry.name in seen:
            raise MatrixError(f"{path}: entry {entry.name!r}: field 'name': expected a unique name, got a duplicate")
        seen.add(entry.name)


# ---------------------------------------------------------------- CI job matrix

RUNNER_VARIABLE = "ROCMLAB_RUNNER_{gfx}"  # a repository variable per GPU target, e.g. ROCMLAB_RUNNER_GFX942
MULTI_SUFFIX = "_MULTI"


def runner_labels(gfx: str, variables: dict | None = None, multi: bool = False) -> list[str]:
    """The runs-on labels of a GPU job: the repository variable when set, else the documented default.

    A variable holds one label (an ARC scale-set name such as ``linux-gfx942-1gpu-ossci``) or a
    JSON list of labels. Defaults: ``[self-hosted, linux, rocm, <gfx>]`` (plus ``multi-gpu``).
    """
    key = RUNNER_VARIABLE.format(gfx=gfx.upper()) + (MULTI_SUFFIX if multi else "")
    value = (variables or {}).get(key, "").strip()
    if value.startswith("["):
        labels = json.loads(value)
        if not (isinstance(labels, list) and labels and all(isinstance(x, str) for x in labels)):
            raise MatrixError(f"repository variable {key}: expected a label or a JSON list of labels, got {value!r}")
        return labels
    if value:
        return [value]
    return ["self-hosted", "linux", "rocm", gfx] + (["multi-gpu"] if multi else [])


def job_matrix(
    entries: list[Entry],
    kind: str = "rocm",
    statuses: tuple[str, ...] = ("current",),
    variables: dict | None = None,
    multi: bool = False,
) -> dict:
    """The GitHub Actions ``strategy.matrix`` for the entries of one kind and status."""
    include = []
    for entry in entries:
        if entry.kind != kind or (entry.kind != "canary" and entry.status not in statuses):
            continue
        job = {"name": entry.name, "python": entry.python, "torch": entry.torch_version}
        if entry.on_gpu:
            job |= {
                "rocm": entry.rocm,
                "gfx": entry.runner_gfx,
                "runs_on": runner_labels(entry.runner_gfx, variables, multi),
                "dockerfile": entry.dockerfile.as_posix(),
            }
        include.append(job)
    return {"include": include}
