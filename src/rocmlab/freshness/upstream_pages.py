"""What each upstream source answers, read: TheRock's releases, the wheel indexes (PEP 691 JSON
or PEP 503 HTML), Docker Hub's rocm/pytorch tags and PyPI's projects, into ``RocmRelease``,
``WheelBuild``, ``ImageTag`` and versions. A parser raises ``SourceError`` on an answer it cannot
read, and lists what it skipped in ``unparsed``: nothing is dropped in silence. ``upstream`` asks."""

from __future__ import annotations

import datetime as dt
import html.parser
import json
import re
import urllib.parse
from dataclasses import dataclass

from packaging import tags as wheel_tags
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .matrix import canonical

INDEX_TYPES = (  # what a simple index may answer: PEP 691 JSON, PEP 503 HTML
    "application/vnd.pypi.simple.v1+json",
    "application/json",
    "text/html",
    "application/vnd.pypi.simple.v1+html",
)


class SourceError(Exception):
    """Upstream answered, but not with what was expected (HTTP error, unreadable body)."""


@dataclass(frozen=True)
class Response:
    url: str
    status: int
    text: str
    content_type: str = "application/json"
    link_next: str | None = None  # GitHub's Link: <...>; rel="next"


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
    filename: str = ""

    def installs_on(self, python: str) -> bool:
        """The one platform rule (``installable``), for this build's file."""
        return self.python == python and installable(self.filename, python)


# ---------------------------------------------------------------- the one platform rule

# Every entry runs on Linux x86_64: GitHub's runners and the GPU runners (Ubuntu 24.04, glibc 2.39),
# and the containers of env/docker/, whose oldest base is python:<X.Y>-slim-bookworm (containers.py;
# Debian 12 ships glibc 2.36, https://packages.debian.org/bookworm/libc6). A wheel counts when one
# of its tags is among the tags pip accepts there (packaging.tags, as pip computes them).
ENTRY_GLIBC_MINOR = 36
ENTRY_ARCH = "x86_64"


def entry_platforms() -> list[str]:
    """Platform tags an entry's machine accepts, most specific first (manylinux_2_36 … 2_5, legacy aliases, linux)."""
    platforms = [f"manylinux_2_{minor}_{ENTRY_ARCH}" for minor in range(ENTRY_GLIBC_MINOR, 4, -1)]
    return platforms + [f"manylinux{alias}_{ENTRY_ARCH}" for alias in ("2014", "2010", "1")] + [f"linux_{ENTRY_ARCH}"]


def entry_tags(python: str) -> frozenset:
    """Every wheel tag pip accepts for CPython ``python`` (e.g. "3.12") on an entry's machine."""
    version = tuple(int(part) for part in python.split(".")[:2])
    interpreter = f"cp{version[0]}{version[1]}"
    platforms = entry_platforms()
    found = set(wheel_tags.cpython_tags(version, platforms=platforms))
    found |= set(wheel_tags.compatible_tags(version, interpreter, platforms))
    return frozenset(found)


def installable(filename: str, python: str) -> bool:
    """Does pip install this file on an entry's machine with CPython ``python``? A wheel: when one of
    its tags is accepted there (a win_amd64 or macosx wheel never is); an sdist: yes (pip builds it);
    a name that is neither: no."""
    try:
        if filename.endswith(".whl"):
            return not parse_wheel_filename(filename)[3].isdisjoint(entry_tags(python))
        parse_sdist_filename(filename)
        return True
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return False


@dataclass(frozen=True)
class ImageTag:
    tag: str
    rocm: str
    python: str
    pytorch: str
    updated: dt.date | None = None
    digest: str | None = None


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


def parse_releases(
    response: Response, unparsed: list[str] | None = None, dated: list[tuple[str, dt.date | None]] | None = None
) -> list[RocmRelease]:
    """Final ROCm releases in a GitHub releases API answer, read from their tags and names.

    A release whose version cannot be read is appended to ``unparsed`` (when given), and with its
    publication date to ``dated``: never dropped silently.
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
        elif problem:
            for found_list, value in ((unparsed, problem), (dated, (problem, _date(item.get("published_at"))))):
                if found_list is not None:
                    found_list.append(value)
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
                        filename=name,
                    )
                )
    if unknown and unparsed is not None:
        unparsed.append(f"{response.url}: {len(unknown)} file name(s) not understood: {', '.join(unknown[:5])}")
    return sorted(builds, key=lambda b: (Version(b.torch), b.local, Version(b.python), b.platform))


def versions_on_index(
    response: Response, project: str, *, with_yanked: bool = False, python: str | None = None
) -> set[str]:
    """Every version (local label kept) of ``project`` a simple-index page lists (yanked files left out,
    unless ``with_yanked``; with ``python``, only files ``installable`` on an entry with that Python)."""
    found = set()
    names, yanked = index_files(response)
    for name in names:
        if (name in yanked and not with_yanked) or (python and not installable(name, python)):
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


def parse_pypi_releases(
    response: Response, unparsed: list[str] | None = None
) -> tuple[dict[str, dt.date | None], dict[str, str]]:
    """({final version: upload date} of releases with a file not yanked, {yanked version: reason}).
    A version that is not PEP 440 is appended to ``unparsed``: reported, never skipped in silence."""
    data = _json(response, "PyPI")
    releases = data.get("releases") if isinstance(data, dict) else None
    if not isinstance(releases, dict):
        raise SourceError("PyPI: no 'releases' table")
    good, yanked, unknown = {}, {}, []
    for raw, files in releases.items():
        try:
            version = Version(raw)
        except InvalidVersion:
            unknown.append(raw)
            continue
        if version.is_prerelease or version.is_devrelease or not files:
            continue
        if all(f.get("yanked") for f in files):
            yanked[str(version)] = next((f.get("yanked_reason") for f in files if f.get("yanked_reason")), "") or ""
            continue
        good[str(version)] = min(filter(None, (_date(f.get("upload_time_iso_8601")) for f in files)), default=None)
    if unknown and unparsed is not None:
        unparsed.append(f"{response.url}: {len(unknown)} version(s) that are not PEP 440: {', '.join(unknown[:5])}")
    return good, yanked


def parse_pypi(response: Response) -> tuple[str, dt.date | None]:
    """Newest final, non-yanked release in a PyPI JSON API answer, with its upload date."""
    good, _yanked = parse_pypi_releases(response)
    if not good:
        raise SourceError("PyPI: no final, non-yanked release")
    newest = max(good, key=Version)
    return newest, good[newest]
