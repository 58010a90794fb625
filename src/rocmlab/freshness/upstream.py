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

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .matrix import Entry, canonical, series

THEROCK_RELEASES = "https://api.github.com/repos/ROCm/TheRock/releases?per_page=100"
PYTORCH_INDEX = "https://download.pytorch.org/whl/rocm{series}/"
# TheRock's stable Python indexes, newest channel first: whl-next for ROCm 10.x (build_tools/setup_venv.py,
# "stable", from 2026-08-22), whl-multi-arch for the 7.14 series (RELEASES.md). A new TheRock release is
# looked for on these even when no matrix entry installs from them yet.
THEROCK_INDEXES = ("https://stable.repo.amd.com/rocm/whl-next/", "https://repo.amd.com/rocm/whl-multi-arch/")
INDEX_TYPES = (
    "application/vnd.pypi.simple.v1+json",
    "application/json",
    "text/html",
    "application/vnd.pypi.simple.v1+html",
)
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
    tag: str = ""
    name: str = ""


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
    pypi_versions: dict[str, dict[str, dt.date | None]] = field(default_factory=dict)  # final, not yanked
    pypi_yanked: dict[str, dict[str, str]] = field(default_factory=dict)  # version -> the reason PyPI gives
    asked: list[str] = field(default_factory=list)  # source keys, in order
    failures: list[str] = field(default_factory=list)
    # what a source listed that the parsers could not read: reported, never skipped in silence
    unparsed: list[str] = field(default_factory=list)
    unparsed_releases: list[str] = field(default_factory=list)  # a release we cannot read may be the new one

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

TAG_PREFIXES = ("therock-", "rocm-", "rocm", "v")
VERSION_TOKEN = re.compile(r"(?<![\w.])v?([0-9]+\.[0-9]+(?:\.[0-9]+)?(?:(?:a|b|rc)[0-9]+)?)(?![\w.])")


def _tag_version(tag: str) -> Version | None:
    """The ROCm version a release tag carries: therock-7.14, therock-7.9.0, rocm-7.2.4, v10.1.0, 10.1.0."""
    for prefix in ("",) + TAG_PREFIXES:
        if tag.startswith(prefix):
            try:
                version = Version(tag[len(prefix) :])
            except InvalidVersion:
                continue
            if 2 <= len(version.release) <= 3 and not version.local and version.epoch == 0:
                return version
    return None


ROCM_IN_NAME = re.compile(
    r"(?:rocm|therock)[\s_-]*(?:release[\s_-]*)?v?([0-9]+\.[0-9]+(?:\.[0-9]+)?(?:(?:a|b|rc)[0-9]+)?)(?![\w.])", re.I
)


def _name_versions(name: str) -> set[Version]:
    """The versions a release name gives ("ROCm 10.0.0", "therock release v7.14", "TheRock 7.14.1"): those
    after "ROCm" / "TheRock" when there are any (so "ROCm 10.1.0, PyTorch 2.14" is 10.1.0), else every one."""
    named = ROCM_IN_NAME.findall(name or "")
    return {Version(v) for v in (named or VERSION_TOKEN.findall(name or ""))}


def _three(version: Version) -> str:
    return ".".join(str(p) for p in (list(version.release) + [0, 0])[:3])


def read_release(item: dict) -> tuple[RocmRelease | None, str | None]:
    """One GitHub release: (the final ROCm release it is, None) or (None, why it cannot be read).

    Both the tag and the release name are read. A series tag (therock-10.0) takes the patch
    version from the name (ROCm 10.0.0); a tag and a name that disagree are not guessed at.
    Drafts, pre-releases and nightly versions come back as (None, None): known, not releases.
    """
    tag, name = str(item.get("tag_name") or ""), str(item.get("name") or "")
    if item.get("draft") or item.get("prerelease"):
        return None, None
    from_tag, from_name = _tag_version(tag), _name_versions(name)
    if (from_tag and from_tag.is_prerelease) or any(v.is_prerelease for v in from_name):
        return None, None
    where = f"TheRock release tag {tag!r} name {name!r} ({item.get('html_url') or 'no URL'})"
    if from_tag is None and not from_name:
        return None, f"{where}: neither the tag nor the name holds a ROCm version"
    if from_tag is None and len(from_name) > 1:
        return None, f"{where}: the name holds several versions ({', '.join(map(str, sorted(from_name)))})"
    if from_tag is None:
        (version,) = from_name
    else:
        same_series = {v for v in from_name if v.release[:2] == from_tag.release[:2]}
        other = {v for v in from_name if v.release[0] == from_tag.release[0] and v.release[:2] != from_tag.release[:2]}
        full = {v for v in same_series if len(v.release) == 3}
        if other or len(full) > 1 or (len(from_tag.release) == 3 and full and from_tag not in full):
            return None, f"{where}: the tag and the name disagree on the version"
        version = from_tag if len(from_tag.release) == 3 or not full else next(iter(full))
    return RocmRelease(_three(version), _date(item.get("published_at")), item.get("html_url") or "", tag, name), None


def parse_releases(response: Response, unparsed: list[str] | None = None) -> list[RocmRelease]:
    """Final ROCm releases in a GitHub releases API answer, read from their tags and names.

    A release whose version cannot be read is appended to ``unparsed`` (when given), never dropped silently.
    """
    data = _json(response, "GitHub releases")
    if not isinstance(data, list):
        raise SourceError(f"GitHub releases: expected a list, got {type(data).__name__}")
    found = []
    for item in data:
        if not isinstance(item, dict):
            raise SourceError(f"GitHub releases: expected release objects, got {type(item).__name__}")
        release, problem = read_release(item)
        if release:
            found.append(release)
        elif problem and unparsed is not None:
            unparsed.append(problem)
    return found


class _Anchors(html.parser.HTMLParser):
    """The file links of a PEP 503 page (PEP 592: ``data-yanked`` marks a yanked file)."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []
        self.yanked: set[str] = set()
        self.tags = 0

    def handle_starttag(self, tag, attrs):
        self.tags += 1
        if tag == "a":
            attributes = dict(attrs)
            href = attributes.get("href") or ""
            name = urllib.parse.unquote(href.split("#")[0].rsplit("/", 1)[-1])
            self.names.append(name)
            if "data-yanked" in attributes:
                self.yanked.add(name)


def index_files(response: Response) -> tuple[list[str], set[str]]:
    """(file names, the yanked ones among them) of a simple-index project page: PEP 691 JSON or PEP 503 HTML.

    An answer in neither format is a SourceError: a page the parser does not know is never read as empty.
    """
    if response.status == 404:
        return [], set()
    if response.content_type not in INDEX_TYPES:
        raise SourceError(f"{response.url}: not a package index page (content type {response.content_type})")
    if "json" in response.content_type:
        data = _json(response, response.url)
        files = data.get("files") if isinstance(data, dict) else None
        if not isinstance(files, list):
            raise SourceError(f"{response.url}: PEP 691 answer without a 'files' list")
        names = [f["filename"] for f in files if isinstance(f, dict) and f.get("filename")]
        return names, {f["filename"] for f in files if isinstance(f, dict) and f.get("filename") and f.get("yanked")}
    parser = _Anchors()
    parser.feed(response.text)
    if not parser.tags or ("<html" not in response.text.lower() and not parser.names):
        raise SourceError(f"{response.url}: an HTML answer that is not a PEP 503 page")
    return [n for n in parser.names if n], parser.yanked


def index_filenames(response: Response) -> list[str]:
    """File names of a simple-index project page that are not yanked."""
    names, yanked = index_files(response)
    return [n for n in names if n not in yanked]


def _read_wheel(name: str):
    if name.endswith((".tar.gz", ".zip")):
        return None  # an sdist: a file of the index, not a build
    return parse_wheel_filename(name)


def parse_torch_wheels(response: Response, index: str, unparsed: list[str] | None = None) -> list[WheelBuild]:
    """ROCm torch wheels (local label rocm...) listed on one index page; file names that are
    not wheel or sdist names are appended to ``unparsed``."""
    builds, unknown = set(), []
    for name in index_filenames(response):
        try:
            wheel = _read_wheel(name)
        except (InvalidWheelFilename, InvalidVersion):
            unknown.append(name)
            continue
        if wheel is None:
            continue
        project, version, _build, tags = wheel
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
    if unknown and unparsed is not None:
        unparsed.append(f"{response.url}: {len(unknown)} file name(s) not understood: {', '.join(unknown[:5])}")
    return sorted(builds, key=lambda b: (Version(b.torch), b.local, Version(b.python), b.platform))


def versions_on_index(response: Response, project: str, *, with_yanked: bool = False) -> set[str]:
    """Every version (local label kept) of ``project`` a simple-index page lists (yanked files left out,
    unless ``with_yanked``)."""
    found = set()
    names, yanked = index_files(response)
    for name in names:
        if name in yanked and not with_yanked:
            continue
        try:
            wheel = _read_wheel(name) or parse_sdist_filename(name)
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        if canonical(wheel[0]) == canonical(project):
            found.add(str(wheel[1]))
    return found


# rocm/pytorch release tags: rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0 and, from ROCm 10,
# series-only ones such as rocm10.0_ubuntu26.04_py3.14_pytorch_release_2.13.0.
IMAGE_TAG = re.compile(
    r"^rocm([0-9]+\.[0-9]+(?:\.[0-9]+)?)_ubuntu[0-9.]+_py([0-9]+\.[0-9]+)_pytorch_(?:release_)?([0-9]+\.[0-9]+\.[0-9]+)$"
)


def parse_docker_tags(response: Response, unparsed: list[str] | None = None) -> tuple[list[ImageTag], str | None]:
    """rocm/pytorch release tags on one page of Docker Hub's tags API, and the next page's URL.
    Tags outside the naming scheme are appended to ``unparsed``."""
    data = _json(response, "Docker Hub tags")
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise SourceError("Docker Hub tags: no 'results' list")
    tags, unknown = [], []
    for item in results:
        name = str(item.get("name", "")) if isinstance(item, dict) else ""
        match = IMAGE_TAG.match(name)
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
        else:
            unknown.append(name or repr(item)[:80])
    if unknown and unparsed is not None:
        unparsed.append(
            f"{response.url}: {len(unknown)} tag(s) outside the rocm/pytorch naming scheme: {', '.join(unknown[:5])}"
        )
    return tags, data.get("next") or None


def parse_pypi_releases(response: Response) -> tuple[dict[str, dt.date | None], dict[str, str]]:
    """({final version: upload date} of releases with a file not yanked, {yanked version: reason})."""
    data = _json(response, "PyPI")
    releases = data.get("releases") if isinstance(data, dict) else None
    if not isinstance(releases, dict):
        raise SourceError("PyPI: no 'releases' table")
    good, yanked = {}, {}
    for raw, files in releases.items():
        try:
            version = Version(raw)
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease or not files:
            continue
        if all(f.get("yanked") for f in files):
            yanked[str(version)] = next((f.get("yanked_reason") for f in files if f.get("yanked_reason")), "") or ""
            continue
        good[str(version)] = min(filter(None, (_date(f.get("upload_time_iso_8601")) for f in files)), default=None)
    return good, yanked


def parse_pypi(response: Response) -> tuple[str, dt.date | None]:
    """Newest final, non-yanked release in a PyPI JSON API answer, with its upload date."""
    good, _yanked = parse_pypi_releases(response)
    if not good:
        raise SourceError("PyPI: no final, non-yanked release")
    newest = max(good, key=Version)
    return newest, good[newest]


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
    indexes = {e.install.index_url for e in live if e.install.method == "multiarch"}
    if new_series:
        indexes |= set(THEROCK_INDEXES)
    for index in sorted(indexes):
        asker.ask(f"wheels {index}", lambda i=index: _wheels(asker, i))
    pytorch_series = {series(e.rocm) for e in live} | {series(e.rocm) for e in rocm if e.install.method == "wheel"}
    for rocm_series in sorted(pytorch_series | new_series):
        index = pytorch_index(rocm_series)
        asker.ask(f"wheels {index}", lambda i=index: _wheels(asker, i))
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
        asker.upstream.releases.extend(parse_releases(response, asker.upstream.unparsed_releases))


# Static indexes on S3 behind a CDN answer 403 AccessDenied, not 404, for a path that does not exist
# (an index for a ROCm series that PyTorch or AMD has not published).
ABSENT_AS_403 = ("download.pytorch.org", "repo.amd.com", "stable.repo.amd.com", "nightly.repo.amd.com")


def _wheels(asker: _Asker, index: str) -> None:
    url = project_url(index, "torch")
    try:
        response = asker.get(url, accept=ACCEPT_INDEX)
    except SourceError as err:
        if not ("HTTP 403" in str(err) and urllib.parse.urlsplit(url).hostname in ABSENT_AS_403):
            raise
        return  # no such index (yet)
    asker.upstream.wheels.extend(parse_torch_wheels(response, index, asker.upstream.unparsed))


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
    good, yanked = parse_pypi_releases(response)
    if not good:
        raise SourceError(f"{response.url}: no final, non-yanked release")
    newest = max(good, key=Version)
    asker.upstream.pypi[package] = (newest, good[newest])
    asker.upstream.pypi_versions[package] = good
    asker.upstream.pypi_yanked[package] = yanked
