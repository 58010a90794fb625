"""The release matrix (env/matrix.toml) and upstream release detection.

``load_matrix()`` reads and validates the matrix into typed entries, newest first.
``rocmlab releases check`` asks upstream (PyPI, GitHub, PyTorch's wheel index, Docker Hub)
what is newer than the matrix and writes the entries to add as a ready PR / issue body.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import html.parser
import json
import re
import sys
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from .catalog import LabError

MATRIX_RELATIVE = Path("env") / "matrix.toml"
STATUSES = ("current", "previous", "eol")
ERAS = ("6.x", "7.x", "therock")
METHODS = ("wheel", "multiarch", "image")
GFX_PATTERN = re.compile(r"^gfx[0-9]{2,4}[a-z]?$")
ROCM_NAME = re.compile(r"^rocm-([0-9]+)\.([0-9]+)$")
CPU_NAME = re.compile(r"^cpu-[a-z0-9][a-z0-9-]*$")
PYTHON_PATTERN = re.compile(r"^3\.[0-9]+$")

EXIT_UP_TO_DATE = 0
EXIT_ERROR = 1
EXIT_UPDATES = 10
EXIT_OFFLINE = 11


class MatrixError(LabError):
    """A matrix file that does not follow the schema; the message names file, entry and field."""


@dataclass(frozen=True)
class Source:
    url: str
    seen: dt.date
    fact: str


@dataclass(frozen=True)
class Install:
    method: str
    index_url: str | None = None
    requirement: str | None = None
    image: str | None = None

    def requirement_for(self, gfx: str) -> str | None:
        """The pip requirement for one GPU target (fills the device-gfxNNN extra)."""
        return self.requirement.replace("{gfx}", gfx) if self.requirement else None


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # "rocm" | "cpu"
    status: str
    python: str
    sources: tuple[Source, ...] = ()
    notes: str | None = None
    rocm: str | None = None
    released: dt.date | None = None
    era: str | None = None
    pytorch: str | None = None
    gfx: tuple[str, ...] = ()
    runner_gfx: str | None = None
    install: Install | None = None
    pins: tuple[str, ...] = ()
    torch_index: str | None = None

    def pin(self, package: str) -> str | None:
        """The pinned version of ``package`` in a CPU entry (local label kept), or None."""
        for line in self.pins:
            req = Requirement(line)
            if _canonical(req.name) == _canonical(package):
                return next(iter(req.specifier)).version
        return None

    @property
    def torch_version(self) -> str | None:
        return self.pytorch if self.kind == "rocm" else self.pin("torch")

    @property
    def dockerfile(self) -> Path | None:
        return Path("env") / "docker" / f"{self.name}.Dockerfile" if self.kind == "rocm" else None


@dataclass(frozen=True)
class Matrix:
    path: Path
    entries: tuple[Entry, ...]

    def get(self, name: str) -> Entry:
        for entry in self.entries:
            if entry.name == name:
                return entry
        known = ", ".join(e.name for e in self.entries)
        raise MatrixError(f"{self.path}: no entry named {name!r} (entries: {known})")

    def of_kind(self, kind: str) -> list[Entry]:
        return [e for e in self.entries if e.kind == kind]


# ---------------------------------------------------------------- locating and loading


def find_matrix() -> Path:
    """env/matrix.toml of the course repository (``rocmlab.root.find_root``: $ROCMLAB_ROOT, else the working directory)."""
    from .root import find_root

    return find_root() / MATRIX_RELATIVE


def repo_root(matrix_path: Path | None = None) -> Path:
    path = Path(matrix_path) if matrix_path else find_matrix()
    return path.resolve().parent.parent


def read_matrix(path: Path | str | None = None) -> Matrix:
    """Parse and validate the matrix file; entries come back newest first."""
    path = Path(path) if path else find_matrix()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MatrixError(f"{path}: file not found") from None
    except tomllib.TOMLDecodeError as err:
        raise MatrixError(f"{path}: not valid TOML: {err}") from None
    _check_keys(data, {"schema", "rocm", "cpu"}, path, "top level")
    if data.get("schema") != 1:
        raise _fail(path, "top level", "schema", "1", data.get("schema"))
    entries = [_parse_rocm(t, path, i) for i, t in enumerate(_tables(data, "rocm", path))]
    entries += [_parse_cpu(t, path, i) for i, t in enumerate(_tables(data, "cpu", path))]
    _check_unique(entries, path)
    return Matrix(path=path, entries=tuple(sort_newest_first(entries)))


def load_matrix(path: Path | str | None = None) -> list[Entry]:
    """All matrix entries, newest first: ROCm by version, then CPU by library generation."""
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


# ---------------------------------------------------------------- validation


def _fail(path: Path, where: str, key: str, expected: str, got=None) -> MatrixError:
    return MatrixError(f"{path}: {where}: field {key!r}: expected {expected}, got {got!r}")


def _tables(data: dict, key: str, path: Path) -> list[dict]:
    tables = data.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise _fail(path, "top level", key, f"an array of tables ([[{key}]])", tables)
    return tables


def _where(kind: str, table: dict, index: int) -> str:
    name = table.get("name")
    return f"[[{kind}]] entry {name!r}" if isinstance(name, str) else f"[[{kind}]] entry #{index + 1}"


def _check_keys(table: dict, allowed: set, path: Path, where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise MatrixError(f"{path}: {where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _get(table: dict, key: str, kind, path: Path, where: str, expected: str, required=True):
    if key not in table:
        if required:
            raise _fail(path, where, key, expected, None)
        return None
    value = table[key]
    if not isinstance(value, kind) or (kind is str and not value.strip()):
        raise _fail(path, where, key, expected, value)
    return value


def _version(value: str, path: Path, where: str, key: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise _fail(path, where, key, "a version like 7.14.0", value) from None
    return value


def _choice(table: dict, key: str, choices: tuple, path: Path, where: str) -> str:
    value = _get(table, key, str, path, where, " | ".join(choices))
    if value not in choices:
        raise _fail(path, where, key, " | ".join(choices), value)
    return value


def _python(table: dict, path: Path, where: str) -> str:
    value = _get(table, "python", str, path, where, 'a Python version like "3.12"')
    if not PYTHON_PATTERN.match(value):
        raise _fail(path, where, "python", 'a Python version like "3.12"', value)
    return value


def _sources(table: dict, path: Path, where: str) -> tuple[Source, ...]:
    items = _get(table, "sources", list, path, where, "a non-empty list of {url, seen, fact}")
    if not items:
        raise _fail(path, where, "sources", "a non-empty list of {url, seen, fact}", items)
    sources = []
    for i, item in enumerate(items):
        at = f"{where} sources[{i}]"
        if not isinstance(item, dict):
            raise _fail(path, at, "sources", "a table {url, seen, fact}", item)
        _check_keys(item, {"url", "seen", "fact"}, path, at)
        url = _get(item, "url", str, path, at, "an http(s) URL")
        if not url.startswith(("https://", "http://")):
            raise _fail(path, at, "url", "an http(s) URL", url)
        seen = _get(item, "seen", dt.date, path, at, "a date like 2026-11-29")
        fact = _get(item, "fact", str, path, at, "the fact this source backs")
        sources.append(Source(url=url, seen=seen, fact=fact))
    return tuple(sources)


ROCM_KEYS = {
    "name",
    "rocm",
    "released",
    "era",
    "pytorch",
    "python",
    "status",
    "gfx",
    "runner_gfx",
    "install",
    "sources",
    "notes",
}
CPU_KEYS = {"name", "python", "status", "torch_index", "pins", "sources", "notes"}


def _parse_rocm(table: dict, path: Path, index: int) -> Entry:
    where = _where("rocm", table, index)
    _check_keys(table, ROCM_KEYS, path, where)
    name = _get(table, "name", str, path, where, "a name like rocm-7.14")
    rocm = _version(_get(table, "rocm", str, path, where, 'a ROCm version like "7.14.0"'), path, where, "rocm")
    match = ROCM_NAME.match(name)
    if not match or Version(rocm).release[:2] != (int(match[1]), int(match[2])):
        raise _fail(path, where, "name", f"rocm-<major>.<minor> of rocm {rocm}", name)
    released = _get(table, "released", dt.date, path, where, "a date like 2026-07-16")
    if isinstance(released, dt.datetime):
        raise _fail(path, where, "released", "a date without time", released)
    pytorch = _version(_get(table, "pytorch", str, path, where, 'a version like "2.12.0"'), path, where, "pytorch")
    gfx = _gfx_list(table, path, where)
    runner = _get(table, "runner_gfx", str, path, where, f"one of gfx {list(gfx)}")
    if runner not in gfx:
        raise _fail(path, where, "runner_gfx", f"one of gfx {list(gfx)}", runner)
    return Entry(
        name=name,
        kind="rocm",
        status=_choice(table, "status", STATUSES, path, where),
        python=_python(table, path, where),
        sources=_sources(table, path, where),
        notes=_get(table, "notes", str, path, where, "text", required=False),
        rocm=rocm,
        released=released,
        era=_choice(table, "era", ERAS, path, where),
        pytorch=pytorch,
        gfx=gfx,
        runner_gfx=runner,
        install=_parse_install(table, pytorch, path, where),
    )


def _gfx_list(table: dict, path: Path, where: str) -> tuple[str, ...]:
    gfx = _get(table, "gfx", list, path, where, "a non-empty list of targets like gfx942")
    if not gfx or not all(isinstance(g, str) and GFX_PATTERN.match(g) for g in gfx):
        raise _fail(path, where, "gfx", "a non-empty list of targets like gfx942", gfx)
    return tuple(gfx)


def _parse_install(table: dict, pytorch: str, path: Path, where: str) -> Install:
    spec = _get(table, "install", dict, path, where, "a table with method = wheel | multiarch | image")
    at = f"{where} install"
    _check_keys(spec, {"method", "index_url", "requirement", "image"}, path, at)
    method = _choice(spec, "method", METHODS, path, at)
    if method == "image":
        image = _get(spec, "image", str, path, at, "a rocm/pytorch:<tag> image reference")
        if ":" not in image:
            raise _fail(path, at, "image", "an image reference with a tag", image)
        return Install(method=method, image=image)
    index_url = _get(spec, "index_url", str, path, at, "the https:// URL of the wheel index")
    if not index_url.startswith("https://"):
        raise _fail(path, at, "index_url", "the https:// URL of the wheel index", index_url)
    requirement = _get(spec, "requirement", str, path, at, "a pip requirement like torch==2.8.0+rocm6.4")
    _check_torch_requirement(requirement, method, pytorch, path, at)
    return Install(method=method, index_url=index_url, requirement=requirement)


def _check_torch_requirement(requirement: str, method: str, pytorch: str, path: Path, at: str) -> None:
    expected = "torch[device-{gfx}]==<pytorch>+rocm..." if method == "multiarch" else "torch==<pytorch>+rocm..."
    if (method == "multiarch") != ("[device-{gfx}]" in requirement):
        raise _fail(path, at, "requirement", expected, requirement)
    try:
        req = Requirement(requirement.replace("{gfx}", "gfx000"))
        (spec,) = req.specifier
    except (InvalidRequirement, ValueError):
        raise _fail(path, at, "requirement", expected, requirement) from None
    if req.name != "torch" or spec.operator != "==" or Version(spec.version).public != Version(pytorch).public:
        raise _fail(path, at, "requirement", f"{expected} matching pytorch {pytorch}", requirement)


def _parse_cpu(table: dict, path: Path, index: int) -> Entry:
    where = _where("cpu", table, index)
    _check_keys(table, CPU_KEYS, path, where)
    name = _get(table, "name", str, path, where, "a name like cpu-current")
    if not CPU_NAME.match(name):
        raise _fail(path, where, "name", "a name like cpu-current", name)
    torch_index = _get(table, "torch_index", str, path, where, "an https:// wheel index URL", required=False)
    if torch_index is not None and not torch_index.startswith("https://"):
        raise _fail(path, where, "torch_index", "an https:// wheel index URL", torch_index)
    entry = Entry(
        name=name,
        kind="cpu",
        status=_choice(table, "status", STATUSES, path, where),
        python=_python(table, path, where),
        sources=_sources(table, path, where),
        notes=_get(table, "notes", str, path, where, "text", required=False),
        pins=_pins(table, path, where),
        torch_index=torch_index,
    )
    return entry


def _pins(table: dict, path: Path, where: str) -> tuple[str, ...]:
    expected = 'a list of exact pins like "transformers==5.24.0", torch included'
    pins = _get(table, "pins", list, path, where, expected)
    names = set()
    for pin in pins:
        try:
            req = Requirement(pin) if isinstance(pin, str) else None
            (spec,) = req.specifier if req else ()
        except (InvalidRequirement, ValueError):
            raise _fail(path, where, "pins", expected, pin) from None
        if spec.operator != "==" or "*" in spec.version or req.extras or req.marker:
            raise _fail(path, where, "pins", expected, pin)
        if _canonical(req.name) in names:
            raise _fail(path, where, "pins", "each package pinned once", pin)
        names.add(_canonical(req.name))
    if "torch" not in names:
        raise _fail(path, where, "pins", expected, pins)
    return tuple(pins)


def _check_unique(entries: list[Entry], path: Path) -> None:
    seen = set()
    for entry in entries:
        if entry.name in seen:
            raise MatrixError(f"{path}: entry {entry.name!r}: field 'name': expected a unique name, got a duplicate")
        seen.add(entry.name)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------- CI job matrix


def runner_labels(entry: Entry) -> list[str]:
    return ["self-hosted", "linux", "rocm", entry.runner_gfx]


def job_matrix(entries: list[Entry], kind: str = "rocm", statuses: tuple[str, ...] = ("current",)) -> dict:
    """The GitHub Actions ``strategy.matrix`` for the entries of one kind and status."""
    include = []
    for entry in entries:
        if entry.kind != kind or entry.status not in statuses:
            continue
        job = {"name": entry.name, "python": entry.python, "torch": entry.torch_version}
        if kind == "rocm":
            job |= {
                "rocm": entry.rocm,
                "gfx": entry.runner_gfx,
                "runs_on": runner_labels(entry),
                "dockerfile": entry.dockerfile.as_posix(),
            }
        include.append(job)
    return {"include": include}


# ---------------------------------------------------------------- upstream sources

SOURCES = {
    "pypi-torch": "https://pypi.org/pypi/torch/json",
    "pypi-transformers": "https://pypi.org/pypi/transformers/json",
    "pypi-peft": "https://pypi.org/pypi/peft/json",
    "github-rocm": "https://api.github.com/repos/ROCm/ROCm/releases?per_page=50",
    "github-rocm-systems": "https://api.github.com/repos/ROCm/rocm-systems/releases?per_page=50",
    "pytorch-wheels": "https://download.pytorch.org/whl/torch/",
    "dockerhub-rocm-pytorch": "https://hub.docker.com/v2/repositories/rocm/pytorch/tags?page_size=100&ordering=last_updated",
}
FIXTURE_FILES = {key: key + (".html" if key == "pytorch-wheels" else ".json") for key in SOURCES}
PYPI_PACKAGES = ("torch", "transformers", "peft")


class NetworkError(Exception):
    """Upstream could not be reached at all (no network, DNS, timeout)."""


class SourceError(Exception):
    """Upstream answered, but not with what was expected (HTTP error, unreadable body)."""


def fetch_url(url: str, timeout: float = 15.0) -> str:
    request = urllib.request.Request(url, headers={"User-Agent": "rocmlab-releases-check"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as err:
        raise SourceError(f"{url}: HTTP {err.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as err:
        raise NetworkError(f"{url}: {getattr(err, 'reason', err)}") from None


def fixture_fetcher(folder: Path):
    """A fetcher that answers from recorded responses named after FIXTURE_FILES."""
    by_url = {url: Path(folder) / FIXTURE_FILES[key] for key, url in SOURCES.items()}

    def fetch(url: str, timeout: float = 0) -> str:
        path = by_url.get(url)
        if path is None or not path.is_file():
            raise SourceError(f"{url}: no recorded response {path}")
        return path.read_text(encoding="utf-8")

    return fetch


@dataclass(frozen=True)
class RocmRelease:
    version: str
    date: dt.date | None
    url: str


@dataclass(frozen=True)
class WheelBuild:
    torch: str
    rocm: str
    python: str


@dataclass(frozen=True)
class ImageTag:
    tag: str
    rocm: str
    python: str
    pytorch: str
    updated: dt.date | None = None


@dataclass
class Upstream:
    pypi: dict[str, tuple[str, dt.date | None]] = field(default_factory=dict)
    rocm_releases: list[RocmRelease] = field(default_factory=list)
    wheels: list[WheelBuild] = field(default_factory=list)
    images: list[ImageTag] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    offline: bool = False  # no source could be read at all


def _date(text: str | None) -> dt.date | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).date()
    except ValueError:
        return None


def _json(text: str, what: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise SourceError(f"{what}: not JSON ({err})") from None


def parse_pypi(text: str) -> tuple[str, dt.date | None]:
    """Newest final, non-yanked release in a PyPI JSON API answer, with its upload date."""
    data = _json(text, "PyPI")
    best: tuple[Version, dt.date | None] | None = None
    for raw, files in (data.get("releases") or {}).items():
        try:
            version = Version(raw)
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease or not files or all(f.get("yanked") for f in files):
            continue
        if best is None or version > best[0]:
            best = (version, min(filter(None, (_date(f.get("upload_time_iso_8601")) for f in files)), default=None))
    if best is None:
        version = (data.get("info") or {}).get("version")
        if not version:
            raise SourceError("PyPI: no releases and no info.version")
        return version, None
    return str(best[0]), best[1]


RELEASE_TAG = re.compile(r"^(?:rocm|therock)-([0-9]+\.[0-9]+(?:\.[0-9]+)?)$")


def parse_github_releases(text: str) -> list[RocmRelease]:
    """Final ROCm releases in a GitHub releases API answer (tags rocm-X.Y.Z / therock-X.Y)."""
    data = _json(text, "GitHub releases")
    if not isinstance(data, list):
        raise SourceError(f"GitHub releases: expected a list, got {type(data).__name__}")
    releases = []
    for item in data:
        match = RELEASE_TAG.match(str(item.get("tag_name", "")))
        if not match or item.get("draft") or item.get("prerelease"):
            continue
        releases.append(
            RocmRelease(
                version=_three_part(match[1]), date=_date(item.get("published_at")), url=item.get("html_url") or ""
            )
        )
    return releases


def _three_part(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


class _Anchors(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []
        self._inside = False

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._inside = True
            href = dict(attrs).get("href") or ""
            self.names.append(urllib.parse.unquote(href.split("#")[0].rsplit("/", 1)[-1]))

    def handle_endtag(self, tag):
        self._inside = False


WHEEL_NAME = re.compile(r"^torch-([0-9]+\.[0-9]+\.[0-9]+)\+rocm([0-9]+\.[0-9]+(?:\.[0-9]+)?)-cp3([0-9]+)-")


def parse_wheel_index(text: str) -> list[WheelBuild]:
    """ROCm torch builds listed in a PEP 503 simple index page (PyTorch's /whl/torch/)."""
    parser = _Anchors()
    parser.feed(text)
    builds = set()
    for name in parser.names:
        match = WHEEL_NAME.match(name)
        if match:
            builds.add(WheelBuild(torch=match[1], rocm=match[2], python=f"3.{match[3]}"))
    return sorted(builds, key=lambda b: (Version(b.rocm), Version(b.torch), Version(b.python)))


IMAGE_TAG = re.compile(
    r"^rocm([0-9]+\.[0-9]+(?:\.[0-9]+)?)_ubuntu[0-9.]+_py([0-9]+\.[0-9]+)_pytorch_(?:release_)?([0-9]+\.[0-9]+\.[0-9]+)$"
)


def parse_docker_tags(text: str) -> list[ImageTag]:
    """rocm/pytorch release tags in a Docker Hub tags API answer."""
    data = _json(text, "Docker Hub tags")
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise SourceError("Docker Hub tags: no 'results' list")
    tags = []
    for item in results:
        match = IMAGE_TAG.match(str(item.get("name", "")))
        if match:
            tags.append(
                ImageTag(
                    tag=item["name"],
                    rocm=match[1],
                    python=match[2],
                    pytorch=match[3],
                    updated=_date(item.get("last_updated")),
                )
            )
    return tags


def gather(fetch=fetch_url, timeout: float = 15.0) -> Upstream:
    """Ask every source; record failures instead of stopping at the first."""
    upstream = Upstream()
    parsers = {
        "github-rocm": lambda t: upstream.rocm_releases.extend(parse_github_releases(t)),
        "github-rocm-systems": lambda t: upstream.rocm_releases.extend(parse_github_releases(t)),
        "pytorch-wheels": lambda t: upstream.wheels.extend(parse_wheel_index(t)),
        "dockerhub-rocm-pytorch": lambda t: upstream.images.extend(parse_docker_tags(t)),
    }
    for package in PYPI_PACKAGES:
        parsers[f"pypi-{package}"] = lambda t, p=package: upstream.pypi.__setitem__(p, parse_pypi(t))
    for key, url in SOURCES.items():
        try:
            parsers[key](fetch(url, timeout))
        except (NetworkError, SourceError) as err:
            upstream.failures.append(f"{key}: {err}")
    upstream.offline = len(upstream.failures) == len(SOURCES)
    return upstream


# ---------------------------------------------------------------- comparing


@dataclass
class Findings:
    new_entries: list[dict] = field(default_factory=list)
    updates: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def anything(self) -> bool:
        return bool(self.new_entries or self.updates)


def _series(version: str) -> tuple[int, int]:
    return Version(version).release[:2]


def era_of(version: str) -> str:
    major, minor = _series(version)
    return "therock" if (major, minor) >= (7, 14) else f"{major}.x"


def compare(matrix: list[Entry], upstream: Upstream, today: dt.date | None = None) -> Findings:
    today = today or dt.date.today()
    findings = Findings(failures=list(upstream.failures))
    rocm_entries = [e for e in matrix if e.kind == "rocm"]
    _compare_rocm(rocm_entries, upstream, today, findings)
    _compare_pypi([e for e in matrix if e.kind == "cpu"], upstream, findings)
    return findings


def _newest_by_series(releases: list[RocmRelease]) -> dict[tuple[int, int], RocmRelease]:
    newest: dict[tuple[int, int], RocmRelease] = {}
    for release in releases:
        series = _series(release.version)
        if series not in newest or Version(release.version) > Version(newest[series].version):
            newest[series] = release
    return newest


def _compare_rocm(entries: list[Entry], upstream: Upstream, today: dt.date, findings: Findings) -> None:
    known = {_series(e.rocm): e for e in entries}
    newest_known = max((Version(e.rocm) for e in entries), default=Version("0"))
    for series, release in sorted(_newest_by_series(upstream.rocm_releases).items(), reverse=True):
        entry = known.get(series)
        if entry is None and Version(release.version) > newest_known:
            findings.new_entries.append(propose_entry(release, entries, upstream, today))
        elif entry is not None and Version(release.version) > Version(entry.rocm):
            findings.updates.append(
                f"{entry.name}: ROCm {entry.rocm} -> {release.version} (released {release.date}, {release.url})"
            )
    for entry in entries:
        torch = _best_torch(entry.rocm, upstream)
        if torch and Version(torch[0]) > Version(entry.pytorch):
            findings.updates.append(f"{entry.name}: PyTorch {entry.pytorch} -> {torch[0]} ({torch[2]})")


def _best_torch(rocm: str, upstream: Upstream) -> tuple[str, str, str] | None:
    """(torch, python, where) of the newest PyTorch build for a ROCm series, images before wheels."""
    series = _series(rocm)
    candidates = [
        (i.pytorch, i.python, f"image rocm/pytorch:{i.tag}") for i in upstream.images if _series(i.rocm) == series
    ]
    candidates += [
        (w.torch, w.python, f"wheel {SOURCES['pytorch-wheels']} torch=={w.torch}+rocm{w.rocm}")
        for w in upstream.wheels
        if _series(w.rocm) == series
    ]
    return max(candidates, key=lambda c: (Version(c[0]), Version(c[1])), default=None)


def propose_entry(release: RocmRelease, entries: list[Entry], upstream: Upstream, today: dt.date) -> dict:
    """A matrix entry for a new ROCm series, filled from what upstream shows; FILL-IN where unknown."""
    major, minor = _series(release.version)
    era = era_of(release.version)
    template = next((e for e in entries if e.era == era), entries[0] if entries else None)
    image = max(
        (i for i in upstream.images if _series(i.rocm) == (major, minor)),
        key=lambda i: (Version(i.pytorch), Version(i.rocm)),
        default=None,
    )
    wheel = max(
        (w for w in upstream.wheels if _series(w.rocm) == (major, minor)),
        key=lambda w: (Version(w.torch), Version(w.python)),
        default=None,
    )
    sources = [
        {
            "url": release.url or SOURCES["github-rocm"],
            "seen": today,
            "fact": f"ROCm {release.version} released {release.date}",
        }
    ]
    if image:
        pytorch, python = image.pytorch, image.python
        install = {"method": "image", "image": f"rocm/pytorch:{image.tag}"}
        sources.append({"url": SOURCES["dockerhub-rocm-pytorch"], "seen": today, "fact": f"tag {image.tag}"})
    elif wheel:
        pytorch, python = wheel.torch, wheel.python
        install = {
            "method": "wheel",
            "index_url": f"https://download.pytorch.org/whl/rocm{major}.{minor}",
            "requirement": f"torch=={wheel.torch}+rocm{wheel.rocm}",
        }
        sources.append(
            {"url": SOURCES["pytorch-wheels"], "seen": today, "fact": f"torch-{wheel.torch}+rocm{wheel.rocm} wheels"}
        )
    else:
        pytorch, python = "FILL-IN", template.python if template else "3.12"
        install = dict(dataclasses.asdict(template.install)) if template and template.install else {}
        install = {k: v for k, v in install.items() if v is not None}
        if install.get("requirement"):
            install["requirement"] = "FILL-IN: " + install["requirement"]
    proposal = {
        "name": f"rocm-{major}.{minor}",
        "rocm": release.version,
        "released": release.date or today,
        "era": era,
        "pytorch": pytorch,
        "python": python,
        "status": "current",
        "gfx": list(template.gfx) if template else ["gfx942"],
        "runner_gfx": template.runner_gfx if template else "gfx942",
        "install": install,
        "sources": sources,
        "notes": "Proposed by `rocmlab releases check`: confirm gfx targets and the install line; "
        "move the oldest current entry to previous.",
    }
    return proposal


def _compare_pypi(cpu_entries: list[Entry], upstream: Upstream, findings: Findings) -> None:
    current = next((e for e in cpu_entries if e.status == "current"), None)
    if current is None:
        return
    for package, (latest, date) in sorted(upstream.pypi.items()):
        pinned = current.pin(package)
        if pinned and Version(latest) > Version(Version(pinned).public):
            findings.updates.append(f"{current.name}: {package} {pinned} -> {latest} (PyPI, {date})")
            if Version(latest).major > Version(pinned).major:
                findings.updates.append(
                    f"cpu-previous: {package} {Version(pinned).major}.x becomes the previous generation "
                    f"(move {package}=={Version(pinned).public} there)"
                )


# ---------------------------------------------------------------- rendering


def render_entries_toml(proposals: list[dict]) -> str:
    import tomli_w

    return tomli_w.dumps({"rocm": proposals}) if proposals else ""


def render_body(findings: Findings, matrix_path: str = "env/matrix.toml") -> str:
    """A ready PR / issue body (Markdown)."""
    lines = ["## Upstream releases newer than the rocmlab matrix", ""]
    if not findings.anything:
        lines += ["Nothing newer than the matrix was found.", ""]
    if findings.new_entries:
        lines += [
            f"### Entries to add to `{matrix_path}`",
            "",
            "```toml",
            render_entries_toml(findings.new_entries).rstrip(),
            "```",
            "",
        ]
    if findings.updates:
        lines += ["### Updates to existing entries", ""] + [f"- {u}" for u in findings.updates] + [""]
    if findings.failures:
        lines += ["### Sources that could not be read", ""] + [f"- {f}" for f in findings.failures] + [""]
    lines += [
        "### Checklist",
        "",
        "- [ ] entries edited in env/matrix.toml, sources and dates checked",
        "- [ ] `rocmlab env dockerfiles` run and env/docker/ committed",
        "- [ ] freshness workflow run on the new entries; `rocmlab report --stamp` committed",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`rocmlab releases check|show`."""
    sub = parser.add_subparsers(dest="releases_command", required=True)
    check = sub.add_parser("check", help="find upstream releases newer than env/matrix.toml")
    check.add_argument("--matrix", type=Path, help="matrix file (default: env/matrix.toml of this repository)")
    check.add_argument("--fixtures", type=Path, help="read recorded upstream responses from this folder")
    check.add_argument("--timeout", type=float, default=15.0, help="seconds per upstream request")
    check.add_argument("--body-out", type=Path, help="write the PR / issue body (Markdown) here")
    check.add_argument("--json", action="store_true", help="print findings as JSON")
    show = sub.add_parser("show", help="list the matrix, newest first")
    show.add_argument("--matrix", type=Path)
    show.add_argument("--json", action="store_true", help="print the CI job matrix for current ROCm entries")


def run(args: argparse.Namespace) -> int:
    root = getattr(args, "root", None)
    try:
        matrix = load_matrix(args.matrix or (Path(root) / MATRIX_RELATIVE if root else None))
    except MatrixError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    if args.releases_command == "show":
        return _show(matrix, args.json)
    return _check(matrix, args)


def _show(matrix: list[Entry], as_json: bool) -> int:
    if as_json:
        print(json.dumps(job_matrix(matrix)))
        return EXIT_UP_TO_DATE
    for e in matrix:
        detail = (
            f"ROCm {e.rocm} ({e.released}) PyTorch {e.pytorch} py{e.python} {e.install.method} [{', '.join(e.gfx)}]"
            if e.kind == "rocm"
            else ", ".join(e.pins)
        )
        print(f"{e.name:14} {e.status:9} {detail}")
    return EXIT_UP_TO_DATE


def _check(matrix: list[Entry], args: argparse.Namespace) -> int:
    fetch = fixture_fetcher(args.fixtures) if args.fixtures else fetch_url
    upstream = gather(fetch, timeout=args.timeout)
    if upstream.offline:
        print("could not check: no upstream source could be read (offline?)", file=sys.stderr)
        for failure in upstream.failures:
            print(f"  {failure}", file=sys.stderr)
        return EXIT_OFFLINE
    findings = compare(matrix, upstream)
    body = render_body(findings)
    if args.body_out:
        args.body_out.write_text(body, encoding="utf-8")
    if args.json:
        print(json.dumps(dataclasses.asdict(findings), default=str, indent=2))
    else:
        print(body)
    return EXIT_UPDATES if findings.anything else EXIT_UP_TO_DATE
