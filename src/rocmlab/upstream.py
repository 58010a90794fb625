"""What upstream has published: TheRock releases, wheel indexes, rocm/pytorch tags, PyPI.

Every question goes through a fetcher (``http_get`` online, ``Recorded`` for saved responses),
and every answer is either parsed or recorded as a failed source: ``Upstream.failures`` says
which source failed and why, so a partial answer is never mistaken for a complete one.
"""

from __future__ import annotations

import datetime as dt
import html.parser
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

THEROCK_RELEASES = "https://api.github.com/repos/ROCm/TheRock/releases?per_page=100"
PYTORCH_INDEX = "https://download.pytorch.org/whl/rocm{series}/"
DOCKER_TAGS = "https://hub.docker.com/v2/namespaces/rocm/repositories/pytorch/tags?page_size=100&name={name}"
DOCKER_TAG = "https://hub.docker.com/v2/namespaces/rocm/repositories/pytorch/tags/{tag}"
PYPI_PROJECT = "https://pypi.org/pypi/{name}/json"
PYPI_RELEASE = "https://pypi.org/pypi/{name}/{version}/json"
PEP691 = "application/vnd.pypi.simple.v1+json"
ACCEPT_INDEX = f"{PEP691}, text/html;q=0.1"
MAX_PAGES = 10


class NetworkError(Exception):
    """Upstream could not be reached at all (no network, DNS, timeout)."""


class SourceError(Exception):
    """Upstream answered, but not with what was expected (HTTP error, unreadable body)."""


@dataclass(frozen=True)
class Response:
    url: str
    status: int
    text: str
    content_type: str = "application/json"
    link_next: str | None = None  # GitHub's Link: <...>; rel="next"


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


@dataclass(frozen=True)
class RocmRelease:
    version: str
    date: dt.date | None
    url: str


@dataclass(frozen=True)
class WheelBuild:
    torch: str  # public version, e.g. 2.13.0
    local: str  # local label, e.g. rocm10.0.0
    python: str  # e.g. 3.12
    index: str  # the index URL it was listed on
    platform: str = "linux_x86_64"


@dataclass(frozen=True)
class ImageTag:
    tag: str
    rocm: str
    python: str
    pytorch: str
    updated: dt.date | None = None
    digest: str | None = None


@dataclass
class Upstream:
    releases: list[RocmRelease] = field(default_factory=list)
    wheels: list[WheelBuild] = field(default_factory=list)
    images: list[ImageTag] = field(default_factory=list)
    pypi: dict[str, tuple[str, dt.date | None]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)  # source keys, in order
    failures: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return bool(self.failures)

    @property
    def offline(self) -> bool:
        return bool(self.asked) and len(self.failures) == len(self.asked)


def _date(text: str | None) -> dt.date | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).date()
    except ValueError:
        return None


def _json(response: Response, what: str):
    try:
        return json.loads(response.text)
    except json.JSONDecodeError as err:
        raise SourceError(f"{what}: not JSON ({err})") from None


# ---------------------------------------------------------------- parsers

RELEASE_TAG = re.compile(r"^(?:therock-|rocm-|v)([0-9]+\.[0-9]+(?:\.[0-9]+)?)$")


def parse_releases(response: Response) -> list[RocmRelease]:
    """Final ROCm releases in a GitHub releases API answer (tags therock-X.Y[.Z], rocm-X.Y.Z, vX.Y.Z)."""
    data = _json(response, "GitHub releases")
    if not isinstance(data, list):
        raise SourceError(f"GitHub releases: expected a list, got {type(data).__name__}")
    found = []
    for item in data:
        match = RELEASE_TAG.match(str(item.get("tag_name", "")))
        if not match or item.get("draft") or item.get("prerelease"):
            continue
        version = Version(match[1])
        if version.is_prerelease:
            continue
        three = ".".join(str(p) for p in (list(version.release) + [0, 0])[:3])
        found.append(RocmRelease(version=three, date=_date(item.get("published_at")), url=item.get("html_url") or ""))
    return found


class _Anchors(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href") or ""
            self.names.append(urllib.parse.unquote(href.split("#")[0].rsplit("/", 1)[-1]))


def index_filenames(response: Response) -> list[str]:
    """File names of a simple-index project page: PEP 691 JSON, or PEP 503 HTML as a fallback."""
    if response.status == 404:
        return []
    if "json" in response.content_type:
        data = _json(response, response.url)
        files = data.get("files") if isinstance(data, dict) else None
        if not isinstance(files, list):
            raise SourceError(f"{response.url}: PEP 691 answer without a 'files' list")
        return [f["filename"] for f in files if isinstance(f, dict) and f.get("filename") and not f.get("yanked")]
    parser = _Anchors()
    parser.feed(response.text)
    return [name for name in parser.names if name]


def parse_torch_wheels(response: Response, index: str) -> list[WheelBuild]:
    """ROCm torch wheels (local label rocm...) listed on one index page."""
    builds = set()
    for name in index_filenames(response):
        try:
            project, version, _build, tags = parse_wheel_filename(name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if project != "torch" or not (version.local or "").startswith("rocm") or version.is_prerelease:
            continue
        for tag in tags:
            if tag.interpreter.startswith("cp3"):
                builds.add(
                    WheelBuild(
                        torch=version.public,
                        local=version.local,
                        python=f"3.{tag.interpreter[3:]}",
                        index=index,
                        platform=tag.platform,
                    )
                )
    return sorted(builds, key=lambda b: (Version(b.torch), b.local, Version(b.python), b.platform))


def versions_on_index(response: Response, project: str) -> set[str]:
    """Every version (local label kept) of ``project`` a simple-index page lists."""
    found = set()
    for name in index_filenames(response):
        try:
            found_project, version, _build, _tags = parse_wheel_filename(name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if canonical(found_project) == canonical(project):
            found.add(str(version))
    return found


IMAGE_TAG = re.compile(
    r"^rocm([0-9]+\.[0-9]+(?:\.[0-9]+)?)_ubuntu[0-9.]+_py([0-9]+\.[0-9]+)_pytorch_(?:release_)?([0-9]+\.[0-9]+\.[0-9]+)$"
)


def parse_docker_tags(response: Response) -> tuple[list[ImageTag], str | None]:
    """rocm/pytorch release tags on one page of Docker Hub's tags API, and the next page's URL."""
    data = _json(response, "Docker Hub tags")
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
                    digest=item.get("digest"),
                )
            )
    return tags, data.get("next") or None


def parse_pypi(response: Response) -> tuple[str, dt.date | None]:
    """Newest final, non-yanked release in a PyPI JSON API answer, with its upload date."""
    data = _json(response, "PyPI")
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
        raise SourceError("PyPI: no final, non-yanked release")
    return str(best[0]), best[1]


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
    """Ask every source the matrix needs; failures are recorded, never fatal."""
    upstream = Upstream()
    asker = _Asker(fetch, timeout, upstream)
    asker.ask("therock-releases", lambda: _releases(asker))
    rocm = [e for e in entries if e.kind == "rocm"]
    newest_known = max((Version(e.rocm) for e in rocm), default=Version("0"))
    new_series = {series(r.version) for r in upstream.releases if Version(r.version) > newest_known}
    new_series -= {series(e.rocm) for e in rocm}
    for index in sorted({e.install.index_url for e in rocm if e.install.method == "multiarch"}):
        asker.ask(f"wheels {index}", lambda i=index: _wheels(asker, i))
    pytorch_series = {series(e.rocm) for e in rocm if e.install.method == "wheel"} | new_series
    for rocm_series in sorted(pytorch_series):
        index = pytorch_index(rocm_series)
        asker.ask(f"wheels {index}", lambda i=index: _wheels(asker, i))
    image_series = {series(e.rocm) for e in rocm if e.install.method == "image"} | new_series
    for rocm_series in sorted(image_series):
        name = f"rocm{rocm_series[0]}.{rocm_series[1]}"
        asker.ask(f"rocm/pytorch tags {name}", lambda n=name: _images(asker, n))
    for package in pypi_packages(entries):
        asker.ask(f"pypi {package}", lambda p=package: upstream.pypi.__setitem__(p, parse_pypi(_pypi(asker, p))))
    return upstream


def pypi_packages(entries: list[Entry]) -> list[str]:
    current = next((e for e in entries if e.kind == "cpu" and e.status == "current"), None)
    return [canonical(line.split("==")[0]) for line in current.pins] if current else []


def _releases(asker: _Asker) -> None:
    for response in asker.pages(THEROCK_RELEASES):
        if response.status == 404:
            raise SourceError(f"{THEROCK_RELEASES}: HTTP 404")
        asker.upstream.releases.extend(parse_releases(response))


def _wheels(asker: _Asker, index: str) -> None:
    response = asker.get(project_url(index, "torch"), accept=ACCEPT_INDEX)
    asker.upstream.wheels.extend(parse_torch_wheels(response, index))


def _images(asker: _Asker, name: str) -> None:
    url = DOCKER_TAGS.format(name=name)
    for _ in range(MAX_PAGES):
        tags, url = parse_docker_tags(asker.get(url))
        asker.upstream.images.extend(t for t in tags if t.tag.startswith(name))
        if not url:
            return
    raise SourceError(f"rocm/pytorch tags {name}: more than {MAX_PAGES} pages")


def _pypi(asker: _Asker, package: str) -> Response:
    response = asker.get(PYPI_PROJECT.format(name=package))
    if response.status == 404:
        raise SourceError(f"{response.url}: HTTP 404")
    return response
