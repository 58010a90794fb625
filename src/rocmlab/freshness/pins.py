"""Pin liveness: does every pin of every current entry still resolve upstream?

- a multi-arch pin: the torch version and the runner's ``amd-torch-device-<gfx>`` package are
  on the entry's index (a simple-index query: PEP 503 HTML as AMD serves it, or PEP 691 JSON; a file
  marked yanked counts as missing);
- a PyTorch-index pin: the version is on the entry's rocmX.Y index;
- an image pin: the tag exists on Docker Hub; its digest is recorded (and compared with the
  ``digest`` the matrix holds, if any). Image entries are checked while they are current or
  previous, so a previous entry's tag gets its digest recorded too;
- a CPU pin: the release exists on PyPI and is not yanked (a ``+cpu`` torch: on the entry's ``torch_index``).

Sources read more than 90 days ago are flagged. A query that fails is ``unreachable``: the
verdict is then partial, reported with its own exit status.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field

from packaging.requirements import Requirement
from packaging.version import Version

from .matrix import STALE_SOURCE_DAYS, Entry
from .upstream import ACCEPT_INDEX, DOCKER_TAG, PYPI_RELEASE, NetworkError, device_package, http_get, project_url
from .upstream_pages import SourceError, index_files, versions_on_index

OK, MISSING, MOVED, UNREACHABLE = "ok", "missing", "moved", "unreachable"


@dataclass(frozen=True)
class PinState:
    entry: str
    pin: str
    state: str  # ok | missing | moved | unreachable
    detail: str = ""
    url: str = ""
    digest: str | None = None


@dataclass
class PinReport:
    pins: list[PinState] = field(default_factory=list)
    stale_sources: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # the entries whose pins were checked

    @property
    def broken(self) -> list[PinState]:
        return [p for p in self.pins if p.state in (MISSING, MOVED)]

    @property
    def unreachable(self) -> list[PinState]:
        return [p for p in self.pins if p.state == UNREACHABLE]

    @property
    def yanked(self) -> list[dict]:
        """Yanked pins, in the shape ``rocmlab releases check --json`` reports them (ci/route_failures.py --pins)."""
        found = []
        for p in self.pins:
            if p.state == MISSING and "yanked" in p.detail and "==" in p.pin:
                package, version = p.pin.split("==", 1)
                found.append(
                    {"entry": p.entry, "package": package, "version": version, "reason": p.detail, "url": p.url}
                )
        return found

    def as_json(self) -> dict:
        return {
            "pins": [asdict(p) for p in self.pins],
            "yanked": self.yanked,
            "stale_sources": self.stale_sources,
            "unverified": self.unverified,
            "checked": self.checked,
            "partial": bool(self.unreachable),
        }


def verify(entries: list[Entry], fetch=http_get, today: dt.date | None = None, timeout: float = 15.0) -> PinReport:
    today = today or dt.date.today()
    report = PinReport()
    for entry in entries:
        image = entry.kind == "rocm" and entry.install.method == "image" and entry.status == "previous"
        if (entry.status != "current" and not image) or entry.kind not in ("rocm", "cpu"):
            continue
        report.checked.append(entry.name)
        checks = _rocm_checks(entry) if entry.kind == "rocm" else _cpu_checks(entry)
        for pin, check in checks:
            report.pins.append(_run(entry, pin, check, fetch, timeout))
        for source in entry.stale_sources(today):
            age = (today - source.seen).days
            report.stale_sources.append(
                f"{entry.name}: {source.url} seen {source.seen} ({age} days > {STALE_SOURCE_DAYS})"
            )
        report.unverified += [f"{entry.name}: {fact}" for fact in entry.unverified]
    return report


def _run(entry: Entry, pin: str, check, fetch, timeout: float) -> PinState:
    try:
        return check(lambda url, accept=None: fetch(url, accept=accept, timeout=timeout))
    except (NetworkError, SourceError) as err:
        return PinState(entry.name, pin, UNREACHABLE, str(err))


def _on_index(entry: Entry, pin: str, index: str, project: str, version: str):
    """A check: is ``project==version`` (local label included) on ``index``, in a file that installs on the
    entry's platform and Python (``upstream_pages.installable``, the rule `releases check` proposes by)?"""

    def check(get) -> PinState:
        url = project_url(index, project)
        response = get(url, accept=ACCEPT_INDEX)
        if response.status != 404 and not index_files(response)[0]:
            raise SourceError(f"{url}: the page lists no file (an unreadable index is not an empty one)")
        found = versions_on_index(response, project, python=entry.python)
        if version in found:
            return PinState(entry.name, pin, OK, f"{project} {version} on {index}", url)
        if version in versions_on_index(response, project, with_yanked=True, python=entry.python):
            return PinState(entry.name, pin, MISSING, f"{project} {version} is yanked on {index} (PEP 592)", url)
        newest = max((v for v in found if not Version(v).is_prerelease), key=Version, default="none")
        elsewhere = version in versions_on_index(response, project, with_yanked=True)
        where = f" for Linux x86_64 and Python {entry.python} (only other platforms have it)" if elsewhere else ""
        return PinState(entry.name, pin, MISSING, f"{project} {version} not on {index}{where} (newest: {newest})", url)

    return check


def _rocm_checks(entry: Entry) -> list[tuple[str, object]]:
    install = entry.install
    if install.method == "image":
        return [(install.image, _image_check(entry))]
    requirement = install.requirement_for(entry.runner_gfx)
    version = next(iter(Requirement(requirement).specifier)).version
    checks = [(requirement, _on_index(entry, requirement, install.index_url, "torch", version))]
    if install.method == "multiarch":
        device = device_package(entry.runner_gfx)
        checks.append(
            (f"{device}=={version}", _on_index(entry, f"{device}=={version}", install.index_url, device, version))
        )
    return checks


def _image_check(entry: Entry):
    tag = entry.install.image.split(":", 1)[1]

    def check(get) -> PinState:
        url = DOCKER_TAG.format(tag=tag)
        response = get(url)
        if response.status == 404:
            return PinState(entry.name, entry.install.image, MISSING, "tag not on Docker Hub", url)
        try:
            digest = json.loads(response.text).get("digest")
        except (json.JSONDecodeError, AttributeError):
            raise SourceError(f"{url}: not a Docker Hub tag answer") from None
        if entry.install.digest and digest != entry.install.digest:
            detail = f"tag now points to {digest}, the matrix records {entry.install.digest}"
            return PinState(entry.name, entry.install.image, MOVED, detail, url, digest)
        detail = f"digest {digest}" + (
            "" if entry.install.digest else " (the matrix records no digest: add it to install)"
        )
        return PinState(entry.name, entry.install.image, OK, detail, url, digest)

    return check


def _cpu_checks(entry: Entry) -> list[tuple[str, object]]:
    checks = []
    for pin in entry.pins:
        req = Requirement(pin)
        version = next(iter(req.specifier)).version
        if Version(version).local and entry.torch_index:
            checks.append((pin, _on_index(entry, pin, entry.torch_index, req.name, version)))
        else:
            checks.append((pin, _pypi_check(entry, pin, req.name, version)))
    return checks


def _pypi_check(entry: Entry, pin: str, name: str, version: str):
    def check(get) -> PinState:
        url = PYPI_RELEASE.format(name=name, version=version)
        response = get(url)
        if response.status == 404:
            return PinState(entry.name, pin, MISSING, "not on PyPI", url)
        try:
            files = json.loads(response.text).get("urls") or []
        except (json.JSONDecodeError, AttributeError):
            raise SourceError(f"{url}: not a PyPI release answer") from None
        if files and all(f.get("yanked") for f in files):
            reason = next((f.get("yanked_reason") for f in files if f.get("yanked_reason")), "")
            detail = "every file of this release is yanked" + (f": {reason}" if reason else "")
            return PinState(entry.name, pin, MISSING, detail, url)
        return PinState(entry.name, pin, OK, f"{len(files)} file(s) on PyPI", url)

    return check


def render(report: PinReport) -> str:
    width = max((len(p.pin) for p in report.pins), default=10)
    lines = [f"{p.entry:14} {p.pin:{width}}  {p.state:11} {p.detail}" for p in report.pins]
    if report.stale_sources:
        lines += ["", f"sources read more than {STALE_SOURCE_DAYS} days ago (read them again, update `seen`):"]
        lines += [f"  {s}" for s in report.stale_sources]
    if report.unverified:
        lines += ["", "facts still marked unverified in the matrix:", *[f"  {u}" for u in report.unverified]]
    if report.unreachable:
        lines += ["", f"partial: {len(report.unreachable)} pin(s) could not be checked (offline?)"]
    return "\n".join(lines)
