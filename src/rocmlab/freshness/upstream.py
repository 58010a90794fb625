"""What upstream has published: TheRock releases, wheel indexes, rocm/pytorch tags, PyPI.

Every question goes through a fetcher (``http_get`` online, ``Recorded`` for saved responses),
and every answer is either parsed or recorded as a failed source: ``Upstream.failures`` says
which source failed and why, so a partial answer is never mistaken for a complete one.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .matrix import Entry, canonical, series
from .upstream_pages import (
    ImageTag,
    Response,
    RocmRelease,
    SourceError,
    WheelBuild,
    index_filenames,
    index_files,
    installable,
    parse_docker_tags,
    parse_pypi_releases,
    parse_releases,
    parse_torch_wheels,
)

THEROCK_RELEASES = "https://api.github.com/repos/ROCm/TheRock/releases?per_page=100"
PYTORCH_INDEX = "https://download.pytorch.org/whl/rocm{series}/"
# TheRock's stable Python indexes, newest channel first: whl-next for ROCm 10.x (build_tools/setup_venv.py,
# "stable", from 2026-08-22), whl-multi-arch for the 7.14 series (RELEASES.md). A new TheRock release is
# looked for on these even when no matrix entry installs from them yet.
THEROCK_INDEXES = ("https://stable.repo.amd.com/rocm/whl-next/", "https://repo.amd.com/rocm/whl-multi-arch/")
DOCKER_TAGS = "https://hub.docker.com/v2/namespaces/rocm/repositories/pytorch/tags?page_size=100&name={name}"
DOCKER_TAG = "https://hub.docker.com/v2/namespaces/rocm/repositories/pytorch/tags/{tag}"
PYPI_PROJECT = "https://pypi.org/pypi/{name}/json"
PYPI_RELEASE = "https://pypi.org/pypi/{name}/{version}/json"
PEP691 = "application/vnd.pypi.simple.v1+json"
ACCEPT_INDEX = f"{PEP691}, text/html;q=0.1"
MAX_PAGES = 10


class NetworkError(Exception):
    """Upstream could not be reached at all (no network, DNS, timeout)."""


# ---------------------------------------------------------------- fetchers


def http_get(url: str, accept: str | None = None, timeout: float = 15.0) -> Response:
    """GET ``url``; a 404 comes back as a Response (an index that does not exist yet is an answer)."""
    headers = {"User-Agent": "rocmlab-releases", "Accept": accept or "application/json"}
    token = os.environ.get("GH_TOKEN") or os.environ.get("GITHUB_TOKEN")
    if token and urllib.parse.urlsplit(url).hostname == "api.github.com":
        headers["Authorization"] = f"Bearer {token}"  # 5000 requests an hour instead of 60
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return Response(
                url=url,
                status=answer.status,
                text=answer.read().decode("utf-8", errors="replace"),
                content_type=answer.headers.get_content_type(),
                link_next=_link_next(answer.headers.get("Link")),
            )
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return Response(url=url, status=404, text="", content_type="text/plain")
        raise SourceError(f"{url}: HTTP {err.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as err:
        raise NetworkError(f"{url}: {getattr(err, 'reason', err)}") from None


def _link_next(header: str | None) -> str | None:
    for part in (header or "").split(","):
        match = re.match(r'\s*<([^>]+)>\s*;\s*rel="next"', part)
        if match:
            return match[1]
    return None


class Recorded:
    """Answers from recorded responses: ``manifest.json`` maps each URL to a file (and its status).

    A URL that was not recorded fails like an unreachable source, so a test can take one source
    away by leaving it out of the manifest.
    """

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)
        manifest = self.folder / "manifest.json"
        try:
            self.manifest = json.loads(manifest.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.manifest = {}
        except json.JSONDecodeError as err:
            raise SourceError(f"{manifest}: not JSON ({err})") from None
        self.asked: list[str] = []

    def __call__(self, url: str, accept: str | None = None, timeout: float = 0) -> Response:
        self.asked.append(url)
        record = self.manifest.get(url)
        if record is None:
            raise NetworkError(f"{url}: no recorded response in {self.folder}")
        status = record.get("status", 200)
        if status >= 400 and status != 404:
            raise SourceError(f"{url}: HTTP {status} (recorded)")
        text = (self.folder / record["file"]).read_text(encoding="utf-8") if record.get("file") else ""
        return Response(
            url=url,
            status=status,
            text=text,
            content_type=record.get("content_type", "application/json"),
            link_next=record.get("next"),
        )


# ---------------------------------------------------------------- what upstream has


@dataclass
class Upstream:
    releases: list[RocmRelease] = field(default_factory=list)
    wheels: list[WheelBuild] = field(default_factory=list)
    images: list[ImageTag] = field(default_factory=list)
    pypi: dict[str, tuple[str, dt.date | None]] = field(default_factory=dict)
    pypi_versions: dict[str, dict[str, dt.date | None]] = field(default_factory=dict)  # final, not yanked
    pypi_yanked: dict[str, dict[str, str]] = field(default_factory=dict)  # version -> the reason PyPI gives
    # amd-torch-device-<gfx> files on a multi-arch index: {(index, gfx): file names}
    device_files: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)  # source keys, in order
    failures: list[str] = field(default_factory=list)
    # what a source listed that the parsers could not read: reported, never skipped in silence
    unparsed: list[str] = field(default_factory=list)
    # releases whose version cannot be read, with their publication date: one may be the new release
    unparsed_releases: list[tuple[str, dt.date | None]] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return bool(self.failures)

    @property
    def offline(self) -> bool:
        return bool(self.asked) and len(self.failures) == len(self.asked)


# ---------------------------------------------------------------- asking every source


def project_url(index: str, project: str) -> str:
    return index.rstrip("/") + f"/{canonical(project)}/"


def pytorch_index(rocm_series: tuple[int, int]) -> str:
    return PYTORCH_INDEX.format(series=f"{rocm_series[0]}.{rocm_series[1]}")


class _Asker:
    """Runs one source at a time; a failure is recorded and the next source is still asked."""

    def __init__(self, fetch, timeout: float, upstream: Upstream):
        self.fetch, self.timeout, self.upstream = fetch, timeout, upstream

    def ask(self, key: str, work) -> None:
        self.upstream.asked.append(key)
        try:
            work()
        except (NetworkError, SourceError) as err:
            self.upstream.failures.append(f"{key}: {err}")

    def get(self, url: str, accept: str | None = None) -> Response:
        return self.fetch(url, accept=accept, timeout=self.timeout)

    def pages(self, url: str):
        """Every page of a paginated answer (GitHub's Link header, Docker Hub's `next`)."""
        for _ in range(MAX_PAGES):
            response = self.get(url)
            yield response
            url = response.link_next
            if not url:
                return
        raise SourceError(f"{url}: more than {MAX_PAGES} pages")


def gather(entries: list[Entry], fetch=http_get, timeout: float = 15.0) -> Upstream:
    """Ask every source the matrix needs; failures are recorded, never fatal.

    - TheRock's releases (tags and names);
    - the AMD indexes the matrix installs from, and TheRock's stable indexes when a new series is out;
    - PyTorch's own rocmX.Y index of every ROCm entry that is not eol, and of a new series;
    - rocm/pytorch tags of every image entry's series, and of a new series;
    - PyPI for the packages the CPU entries pin.
    """
    upstream = Upstream()
    asker = _Asker(fetch, timeout, upstream)
    asker.ask("therock-releases", lambda: _releases(asker))
    rocm = [e for e in entries if e.kind == "rocm"]
    live = [e for e in rocm if e.status != "eol"]
    newest_known = max((Version(e.rocm) for e in rocm), default=Version("0"))
    newer = {series(r.version) for r in upstream.releases if Version(r.version) > newest_known}
    newer -= {series(e.rocm) for e in rocm}
    new_series = {max(newer)} if newer else set()  # only the newest new series is proposed (proposals.compare)
    installs_from = {e.install.index_url.rstrip("/") for e in live if e.install.method in ("multiarch", "wheel")}
    indexes = {e.install.index_url for e in live if e.install.method == "multiarch"}
    if new_series:
        indexes |= set(THEROCK_INDEXES)
    runner_gfx = sorted({e.runner_gfx for e in live if e.era == "therock"} or {e.runner_gfx for e in rocm[:1]})
    for index in sorted(indexes):
        used = index.rstrip("/") in installs_from
        asker.ask(f"wheels {index}", lambda i=index, u=used: _wheels(asker, i, u))
        for gfx in runner_gfx:
            asker.ask(f"device wheels {gfx} {index}", lambda i=index, g=gfx, u=used: _device_wheels(asker, i, g, u))
    pytorch_series = {series(e.rocm) for e in live} | {series(e.rocm) for e in rocm if e.install.method == "wheel"}
    for rocm_series in sorted(pytorch_series | new_series):
        index = pytorch_index(rocm_series)
        used = index.rstrip("/") in installs_from
        asker.ask(f"wheels {index}", lambda i=index, u=used: _wheels(asker, i, u))
    image_series = {series(e.rocm) for e in live if e.install.method == "image"} | new_series
    for rocm_series in sorted(image_series):
        asker.ask(f"rocm/pytorch tags rocm{rocm_series[0]}.{rocm_series[1]}", lambda s=rocm_series: _images(asker, s))
    for package in pypi_packages(entries):
        asker.ask(f"pypi {package}", lambda p=package: _pypi_project(asker, p))
    return upstream


def pypi_packages(entries: list[Entry]) -> list[str]:
    current = next((e for e in entries if e.kind == "cpu" and e.status == "current"), None)
    return [canonical(line.split("==")[0]) for line in current.pins] if current else []


def _releases(asker: _Asker) -> None:
    for response in asker.pages(THEROCK_RELEASES):
        if response.status == 404:
            raise SourceError(f"{THEROCK_RELEASES}: HTTP 404")
        asker.upstream.releases.extend(parse_releases(response, dated=asker.upstream.unparsed_releases))


# Static indexes on S3 behind a CDN answer 403 AccessDenied, not 404, for a path that does not exist
# (an index for a ROCm series that PyTorch or AMD has not published). That reading holds only for an
# index no entry installs from: from one that an entry installs from, a 403 is a failed source.
ABSENT_AS_403 = ("download.pytorch.org", "repo.amd.com", "stable.repo.amd.com", "nightly.repo.amd.com")


def _index_page(asker: _Asker, index: str, project: str, installs_from: bool) -> Response | None:
    """``project``'s page on ``index``; None when the index does not have it (404, or S3's 403 from an
    index no entry installs from). A page that lists no file, from an index an entry installs from, is
    unreadable (a SourceError), never "no files"."""
    url = project_url(index, project)
    try:
        response = asker.get(url, accept=ACCEPT_INDEX)
    except SourceError as err:
        absent = "HTTP 403" in str(err) and urllib.parse.urlsplit(url).hostname in ABSENT_AS_403
        if installs_from or not absent:
            raise SourceError(f"{err} (an entry installs from {index})" if installs_from else str(err)) from None
        return None
    if response.status == 404:
        return None
    if installs_from and not index_files(response)[0]:
        raise SourceError(f"{url}: the page lists no file, from an index an entry installs from")
    return response


def _wheels(asker: _Asker, index: str, installs_from: bool = False) -> None:
    response = _index_page(asker, index, "torch", installs_from)
    if response is not None:
        asker.upstream.wheels.extend(parse_torch_wheels(response, index, asker.upstream.unparsed))


def _device_wheels(asker: _Asker, index: str, gfx: str, installs_from: bool = False) -> None:
    response = _index_page(asker, index, device_package(gfx), installs_from)
    asker.upstream.device_files[(index.rstrip("/"), gfx)] = index_filenames(response) if response else []


def device_package(gfx: str) -> str:
    """The package that holds a multi-arch torch's kernels for one target (TheRock's `[device-<gfx>]` extra)."""
    return f"amd-torch-device-{gfx}"


def device_versions(upstream: Upstream, index: str, gfx: str, python: str) -> set[str]:
    """Versions (local label kept) of ``amd-torch-device-<gfx>`` on ``index`` installable with ``python``."""
    found = set()
    for name in upstream.device_files.get((index.rstrip("/"), gfx), []):
        if not installable(name, python):
            continue
        try:
            found.add(str(parse_wheel_filename(name)[1]))
        except (InvalidWheelFilename, InvalidVersion):
            continue
    return found


def _images(asker: _Asker, rocm_series: tuple[int, int]) -> None:
    name = f"rocm{rocm_series[0]}.{rocm_series[1]}"
    url = DOCKER_TAGS.format(name=name)
    for _ in range(MAX_PAGES):
        tags, url = parse_docker_tags(asker.get(url), asker.upstream.unparsed)
        # Docker Hub's name filter is a substring match: rocm7.1 also finds rocm7.14 tags
        asker.upstream.images.extend(t for t in tags if series(t.rocm) == rocm_series)
        if not url:
            return
    raise SourceError(f"rocm/pytorch tags {name}: more than {MAX_PAGES} pages")


def _pypi_project(asker: _Asker, package: str) -> None:
    response = asker.get(PYPI_PROJECT.format(name=package))
    if response.status == 404:
        raise SourceError(f"{response.url}: HTTP 404")
    good, yanked = parse_pypi_releases(response, asker.upstream.unparsed)
    if not good:
        raise SourceError(f"{response.url}: no final, non-yanked release")
    newest = max(good, key=Version)
    asker.upstream.pypi[package] = (newest, good[newest])
    asker.upstream.pypi_versions[package] = good
    asker.upstream.pypi_yanked[package] = yanked
