"""From upstream's answers to changes of env/matrix.toml: new entries, updates, what is reported.

Rules: the newest ROCm series newer than the matrix becomes a proposed entry, once one of its
channels (TheRock's indexes, rocm/pytorch images, PyTorch's rocmX.Y index) has a torch build for
it; until then it is reported as pending, never proposed with another release's torch. A patch
release of a series updates its entry; a PyTorch bump is proposed only from the entry's own
channel (its AMD index, its PyTorch rocmX.Y index, or rocm/pytorch tags of its ROCm version);
nothing is proposed for ``eol`` entries. A package listed in a CPU entry's ``held`` is reported,
not bumped; so is a release that crosses a cap in pyproject.toml (``transformers<6``), with the
newest release below the cap proposed instead, and a new major that nothing caps or holds, with the
newest of the pinned major proposed instead. A pinned release that PyPI has yanked is reported.
Only a wheel that installs where the entry runs counts (``upstream_pages.installable``), a multi-arch
torch with its runner's device package. What a person must look at is ``Findings.needs_person``.
``pull_request`` turns the findings into the PR: its body and the edited matrix file.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .matrix import Entry, canonical, era_of, series
from .upstream import DOCKER_TAGS, THEROCK_INDEXES, THEROCK_RELEASES, Upstream, device_versions, pytorch_index
from .upstream_pages import ImageTag, RocmRelease, WheelBuild


@dataclass(frozen=True)
class Update:
    """One field of one entry to change, with the source that shows it."""

    entry: str
    field: str  # rocm | released | pytorch | requirement | image | status | pin:<package>
    old: str
    new: str
    url: str
    fact: str


@dataclass(frozen=True)
class YankedPin:
    """A pinned release that PyPI has yanked: it may no longer install."""

    entry: str
    package: str
    version: str
    reason: str
    url: str


@dataclass
class Findings:
    new_entries: list[dict] = field(default_factory=list)
    updates: list[Update] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    yanked: list[YankedPin] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # released, but no torch build on any channel yet
    notices: list[str] = field(default_factory=list)  # worth knowing, nothing to change
    unparsed: list[str] = field(default_factory=list)  # what a source listed that could not be read
    failures: list[str] = field(default_factory=list)
    restated: list[str] = field(default_factory=list)  # facts that still state a value an update replaces
    capped: list[str] = field(default_factory=list)  # a release that crosses a pyproject.toml cap
    majors: list[str] = field(default_factory=list)  # a major jump of a dependency nothing caps or holds
    unwatched: list[str] = field(default_factory=list)  # releases seen that the check proposes nothing for
    unreadable: list[str] = field(default_factory=list)  # releases whose version could not be read
    checked: list[str] = field(default_factory=list)  # CPU entries whose pins were checked for yanks

    @property
    def anything(self) -> bool:
        return bool(self.new_entries or self.updates or self.yanked)

    @property
    def partial(self) -> bool:
        """A source failed or a release could not be read: the answer is not complete."""
        return bool(self.failures or self.unreadable)

    @property
    def needs_person(self) -> list[str]:
        """Every reason a person must look, whatever else the check found: the tracking issue stays open."""
        return [
            *(f"failed source: {f}" for f in self.failures),
            *(f"unreadable release: {u}" for u in self.unreadable),
            *(f"waiting for torch: {p}" for p in self.pending),
            *(f"held at a cap: {c}" for c in self.capped),
            *(f"unmarked major: {m}" for m in self.majors),
            *(f"not watched: {w}" for w in self.unwatched),
        ]

    @property
    def changed_entries(self) -> list[str]:
        """The entries whose environment changes (new, or a pin / version / install moved): the ones
        whose labs must run again. A status change alone (current -> previous) is not among them."""
        names = [e["name"] for e in self.new_entries]
        names += [u.entry for u in self.updates if u.field != "status"]
        return list(dict.fromkeys(names))

    def as_json(self) -> dict:
        return {
            "new_entries": [
                {k: str(v) if isinstance(v, dt.date) else v for k, v in e.items()} for e in self.new_entries
            ],
            "updates": [asdict(u) for u in self.updates],
            "changed_entries": self.changed_entries,
            "held": self.held,
            "yanked": [asdict(y) for y in self.yanked],
            "pending": self.pending,
            "notices": self.notices,
            "unparsed": self.unparsed,
            "failures": self.failures,
            "restated": self.restated,
            "capped": self.capped,
            "majors": self.majors,
            "unwatched": self.unwatched,
            "unreadable": self.unreadable,
            "needs_person": self.needs_person,
            "checked": self.checked,
            "partial": self.partial,
        }


def compare(
    entries: list[Entry], upstream: Upstream, today: dt.date | None = None, caps: dict | None = None
) -> Findings:
    """What upstream has that the matrix lacks. ``caps``: {package: (SpecifierSet, where)} from pyproject.toml."""
    today = today or dt.date.today()
    findings = Findings(failures=list(upstream.failures), unparsed=list(upstream.unparsed))
    rocm = [e for e in entries if e.kind == "rocm"]
    _unreadable_releases(rocm, upstream, findings)
    newest_known = max((Version(e.rocm) for e in rocm), default=Version("0"))
    known = {series(e.rocm): e for e in rocm}
    proposed = False
    for rocm_series, release in sorted(_newest_by_series(upstream.releases).items(), reverse=True):
        entry = known.get(rocm_series)
        if entry is None and _on_an_older_line(release, rocm, newest_known):
            findings.unwatched.append(
                f"ROCm {release.version} ({release.tag or release.url}, published {release.date}) is a new series "
                "on an older line than the matrix's newest: no entry is proposed for it; add one by hand if the "
                "course should run on it"
            )
        elif entry is None and Version(release.version) > newest_known:
            if proposed:
                findings.notices.append(
                    f"ROCm {release.version} ({release.tag or release.url}) is newer than the matrix but older "
                    "than the series proposed: no entry proposed for it"
                )
                continue
            proposal = propose_entry(release, rocm, upstream, today)
            if proposal is None:
                findings.pending.append(
                    f"ROCm {release.version} released {release.date} ({release.url or THEROCK_RELEASES}): no torch "
                    f"build for it yet that installs on Linux x86_64 with its device package, on "
                    f"{', '.join(_channels_asked(release.version, upstream))}; the entry is proposed once one appears"
                )
            else:
                findings.new_entries.append(proposal)
                findings.updates.extend(_retire_oldest_current(rocm))
            proposed = True
        elif entry is not None and entry.status != "eol" and Version(release.version) > Version(entry.rocm):
            if _newest_torch(entry, release.version, upstream) is None:
                findings.pending.append(
                    f"{entry.name}: ROCm {release.version} released {release.date} ({release.url or THEROCK_RELEASES}): "
                    f"no torch build for it yet on the entry's {entry.install.method} channel that installs on "
                    "Linux x86_64 with its device package; the entry is patched once one appears"
                )
            else:
                findings.updates.extend(_patch_release(entry, release, upstream, today))
    for entry in rocm:
        if entry.status == "eol" or any(u.entry == entry.name and u.field == "pytorch" for u in findings.updates):
            continue
        bump = _torch_bump(entry, entry.rocm, upstream, today)
        findings.updates.extend(bump)
        if not bump:
            findings.notices.extend(_pytorch_index_notice(entry, upstream))
    findings.unwatched.extend(_legacy_patch_images(rocm, upstream))
    findings.notices.extend(_legacy_entries(rocm))
    _compare_pypi([e for e in entries if e.kind == "cpu"], upstream, findings, caps or {})
    findings.restated = facts_stating_replaced_values(entries, findings.updates)
    return findings


def _unreadable_releases(rocm: list[Entry], upstream: Upstream, findings: Findings) -> None:
    """A release whose version cannot be read, published after the matrix's newest release, may be the new
    one: the check is partial. One published before it cannot be, and is reported as seen."""
    newest = max((e.released for e in rocm), default=None)
    for problem, published in upstream.unparsed_releases:
        if published is None or newest is None or published > newest:
            findings.unreadable.append(problem)
        else:
            findings.notices.append(f"{problem} (published {published}, before the matrix's newest release)")


def _on_an_older_line(release: RocmRelease, rocm: list[Entry], newest_known: Version) -> bool:
    """A new series of a major line the matrix already has, newer than that line's newest entry, but not
    the newest overall (7.15.0 while the matrix has 7.14 and 10.1): nothing proposes it, so it is reported."""
    version = Version(release.version)
    line = [Version(e.rocm) for e in rocm if Version(e.rocm).major == version.major]
    return version <= newest_known and bool(line) and version > max(line)


def _legacy_entries(rocm: list[Entry]) -> list[str]:
    """Entries of the ROCm releases before TheRock: their releases (github.com/ROCm/ROCm) are not asked."""
    return [
        f"{e.name} (ROCm {e.rocm}, era {e.era}) is a release of the ROCm line before TheRock: its releases are not "
        "watched; only rocm/pytorch images of its series are (a newer patch image is reported)"
        for e in rocm
        if e.status != "eol" and e.era != "therock"
    ]


def _legacy_patch_images(rocm: list[Entry], upstream: Upstream) -> list[str]:
    """rocm/pytorch images of a newer patch of a legacy image entry's series (rocm7.2.5_… beside 7.2.4)."""
    found = []
    for entry in rocm:
        if entry.status == "eol" or entry.era == "therock" or entry.install.method != "image":
            continue
        full = {i.rocm for i in upstream.images if i.rocm.count(".") == 2 and series(i.rocm) == series(entry.rocm)}
        newer = sorted((v for v in full if Version(v) > Version(entry.rocm)), key=Version)
        if newer:
            tags = sorted(i.tag for i in upstream.images if i.rocm == newer[-1])
            found.append(
                f"{entry.name}: rocm/pytorch has images of ROCm {newer[-1]} ({', '.join(tags[:3])}), newer than the "
                f"entry's {entry.rocm}; its release is not watched: confirm it and update the entry by hand"
            )
    return found


def facts_stating_replaced_values(entries: list[Entry], updates: list[Update]) -> list[str]:
    """The sources of updated entries whose fact names an old value ("newest transformers 5.24.0"):
    applying the update leaves them stating what the matrix no longer says."""
    by_name = {e.name: e for e in entries}
    stale = []
    for update in updates:
        entry = by_name.get(update.entry)
        old = re.compile(rf"(?<![\w.]){re.escape(update.old)}(?![\w]|\.\d)")
        for source in entry.sources if entry and update.old else ():
            if old.search(source.fact):
                stale.append(
                    f"{update.entry}: {update.field} {update.old} -> {update.new}, but the fact of {source.url} "
                    f"(seen {source.seen}) still names {update.old}: read the source again and restate it"
                )
    return list(dict.fromkeys(stale))


def _retire_oldest_current(rocm: list[Entry]) -> list[Update]:
    """With a new current entry, at most two ROCm entries stay current: the oldest becomes previous."""
    current = [e for e in rocm if e.status == "current"]
    if len(current) < 2:
        return []
    oldest = min(current, key=lambda e: Version(e.rocm))
    return [Update(oldest.name, "status", "current", "previous", "", "a newer ROCm series is added")]


def _channels_asked(rocm: str, upstream: Upstream) -> list[str]:
    indexes = sorted({w.index for w in upstream.wheels} | set(THEROCK_INDEXES) | {pytorch_index(series(rocm))})
    return [*indexes, f"rocm/pytorch tags rocm{'.'.join(rocm.split('.')[:2])}"]


def _newest_by_series(releases: list[RocmRelease]) -> dict[tuple[int, int], RocmRelease]:
    newest: dict[tuple[int, int], RocmRelease] = {}
    for release in releases:
        key = series(release.version)
        if key not in newest or Version(release.version) > Version(newest[key].version):
            newest[key] = release
    return newest


# ---------------------------------------------------------------- one entry's own channel


def channel_wheels(entry: Entry, rocm: str, upstream: Upstream) -> list[WheelBuild]:
    """Wheels of ``entry``'s channel built for ROCm ``rocm`` that install on the entry (``installable``:
    its platform and Python; a multi-arch torch only with its runner's device package)."""
    method = entry.install.method
    if method == "multiarch":
        return multiarch_wheels(entry.install.index_url, rocm, entry.python, entry.runner_gfx, upstream)
    if method != "wheel":
        return []
    index, label = pytorch_index(series(rocm)), f"rocm{'.'.join(rocm.split('.')[:2])}"
    return [
        w
        for w in upstream.wheels
        if w.index.rstrip("/") == index.rstrip("/") and w.local == label and w.installs_on(entry.python)
    ]


def multiarch_wheels(index: str, rocm: str, python: str, gfx: str, upstream: Upstream) -> list[WheelBuild]:
    """torch ``+rocm<rocm>`` builds on a multi-arch index that install with ``python`` on Linux x86_64 and
    whose ``amd-torch-device-<gfx>`` of the same version is there too (what `pip install torch[device-gfx]`
    needs; verify-pins checks the same two files)."""
    devices = device_versions(upstream, index, gfx, python)
    return [
        w
        for w in upstream.wheels
        if w.index.rstrip("/") == index.rstrip("/")
        and w.local == f"rocm{rocm}"
        and w.installs_on(python)
        and f"{w.torch}+{w.local}" in devices
    ]


def _image_of(image: ImageTag, rocm: str) -> bool:
    """An image of ROCm ``rocm``: tagged with the full version (rocm7.2.4_…) or, as from ROCm 10, with the
    series only (rocm10.0_…: the series' current release)."""
    return image.rocm == rocm or image.rocm == ".".join(rocm.split(".")[:2])


def channel_images(entry: Entry, rocm: str, upstream: Upstream) -> list[ImageTag]:
    return [i for i in upstream.images if _image_of(i, rocm) and i.python == entry.python]


def _newest_torch(entry: Entry, rocm: str, upstream: Upstream) -> tuple[str, str, str] | None:
    """(torch version, install detail, source URL) of the newest build on the entry's own channel."""
    if entry.install.method == "image":
        image = max(channel_images(entry, rocm, upstream), key=lambda i: Version(i.pytorch), default=None)
        return (
            (
                image.pytorch,
                f"rocm/pytorch:{image.tag}",
                DOCKER_TAGS.format(name=f"rocm{'.'.join(rocm.split('.')[:2])}"),
            )
            if image
            else None
        )
    wheel = max(channel_wheels(entry, rocm, upstream), key=lambda w: Version(w.torch), default=None)
    return (wheel.torch, f"{wheel.torch}+{wheel.local}", wheel.index) if wheel else None


def _torch_bump(entry: Entry, rocm: str, upstream: Upstream, today: dt.date) -> list[Update]:
    newest = _newest_torch(entry, rocm, upstream)
    if not newest or Version(newest[0]) <= Version(entry.pytorch):
        return []
    torch, detail, url = newest
    fact = f"{detail} on the entry's channel ({today})"
    updates = [Update(entry.name, "pytorch", entry.pytorch, torch, url, fact)]
    if entry.install.method == "image":
        updates.append(Update(entry.name, "image", entry.install.image, detail, url, fact))
    else:
        updates.append(
            Update(entry.name, "requirement", entry.install.requirement, _requirement(entry, torch, rocm), url, fact)
        )
    return updates


def _requirement(entry: Entry, torch: str, rocm: str) -> str:
    if entry.install.method == "multiarch":
        return f"torch[device-{{gfx}}]=={torch}+rocm{rocm}"
    return f"torch=={torch}+rocm{'.'.join(rocm.split('.')[:2])}"


def _patch_release(entry: Entry, release: RocmRelease, upstream: Upstream, today: dt.date) -> list[Update]:
    """A newer release of the entry's series: ROCm version and date, and the torch built for it."""
    url = release.url or THEROCK_RELEASES
    updates = [
        Update(
            entry.name,
            "rocm",
            entry.rocm,
            release.version,
            url,
            f"{release.tag or 'release'} ({release.name or release.version}) published {release.date}",
        ),
        Update(
            entry.name,
            "released",
            str(entry.released),
            str(release.date or today),
            url,
            f"{release.tag or 'release'} ({release.name or release.version}) published {release.date}",
        ),
    ]
    newest = _newest_torch(entry, release.version, upstream)
    torch = newest[0] if newest and Version(newest[0]) >= Version(entry.pytorch) else entry.pytorch
    if newest:
        fact = f"{newest[1]} on the entry's channel ({today})"
        if torch != entry.pytorch:
            updates.append(Update(entry.name, "pytorch", entry.pytorch, torch, newest[2], fact))
        if entry.install.method == "image":
            updates.append(Update(entry.name, "image", entry.install.image, newest[1], newest[2], fact))
        else:
            new = _requirement(entry, torch, release.version)
            updates.append(Update(entry.name, "requirement", entry.install.requirement, new, newest[2], fact))
    return updates


# ---------------------------------------------------------------- a new series


def propose_entry(release: RocmRelease, rocm: list[Entry], upstream: Upstream, today: dt.date) -> dict | None:
    """A matrix entry for a new ROCm series from what upstream shows, or None while no channel has a
    torch build for it. Facts copied from an older entry (gfx targets, runner) are marked unverified."""
    era = era_of(release.version)
    template = next((e for e in rocm if e.era == era), rocm[0] if rocm else None)
    python = template.python if template else "3.12"
    found = next(_install_candidates(release.version, era, template, python, upstream), None)
    if found is None:
        return None
    install, torch, python, url, detail = found
    sources = [
        {
            "url": release.url or THEROCK_RELEASES,
            "seen": today,
            "facts": ["rocm", "released"],
            "fact": f"{release.tag or 'release'} ({release.name or release.version}) published {release.date}",
        },
        {"url": url, "seen": today, "facts": ["pytorch", "python", "install"], "fact": detail},
    ]
    same_era = template is not None and template.era == era
    return {
        "name": f"rocm-{'.'.join(release.version.split('.')[:2])}",
        "rocm": release.version,
        "released": release.date or today,
        "era": era,
        "pytorch": torch,
        "python": python,
        "status": "current",
        "gfx": list(template.gfx) if template else ["gfx942"],
        "runner_gfx": template.runner_gfx if template else "gfx942",
        "install": install,
        "unverified": ["gfx"] if same_era else ["gfx", "runner_gfx"],
        "sources": sources,
        "notes": "Proposed by `rocmlab releases check`: confirm the facts marked unverified (gfx targets "
        "from SUPPORTED_GPUS.md / RELEASES.md) and remove them from `unverified`.",
    }


def _install_candidates(rocm: str, era: str, template: Entry | None, python: str, upstream: Upstream):
    """(install, torch, python, source URL, detail) for a new release: TheRock's indexes first (the
    template's, then the stable channels, newest first), then rocm/pytorch images of that ROCm version
    (full or series tag), then PyTorch's rocmX.Y index."""
    if era == "therock":
        preferred = [template.install.index_url] if template and template.install.method == "multiarch" else []
        gfx = template.runner_gfx if template else "gfx942"
        for index in dict.fromkeys(preferred + list(THEROCK_INDEXES)):
            wheels = multiarch_wheels(index, rocm, python, gfx, upstream)
            if wheels:
                torch = max((w.torch for w in wheels), key=Version)
                requirement = f"torch[device-{{gfx}}]=={torch}+rocm{rocm}"
                install = {"method": "multiarch", "index_url": index, "requirement": requirement}
                yield install, torch, python, index, f"torch {torch}+rocm{rocm} for Python {python} on {index}"
    images = [i for i in upstream.images if _image_of(i, rocm)]
    if images:
        image = max(images, key=lambda i: (Version(i.pytorch), i.python == python, Version(i.python)))
        url = DOCKER_TAGS.format(name=f"rocm{'.'.join(rocm.split('.')[:2])}")
        yield {"method": "image", "image": f"rocm/pytorch:{image.tag}"}, image.pytorch, image.python, url, image.tag
    label, index = f"rocm{'.'.join(rocm.split('.')[:2])}", pytorch_index(series(rocm))
    wheels = [w for w in upstream.wheels if w.index == index and w.local == label and w.installs_on(w.python)]
    if wheels:
        wheel = max(wheels, key=lambda w: (Version(w.torch), w.python == python, Version(w.python)))
        install = {"method": "wheel", "index_url": index, "requirement": f"torch=={wheel.torch}+{label}"}
        yield install, wheel.torch, wheel.python, index, f"torch {wheel.torch}+{label} on {index}"


def _pytorch_index_notice(entry: Entry, upstream: Upstream) -> list[str]:
    """PyTorch's own rocmX.Y index, for an entry that installs from elsewhere: a newer torch there is news."""
    if entry.install.method == "wheel":
        return []
    index, label = pytorch_index(series(entry.rocm)), f"rocm{'.'.join(entry.rocm.split('.')[:2])}"
    newer = [
        w.torch
        for w in upstream.wheels
        if w.index == index
        and w.local == label
        and w.installs_on(entry.python)
        and Version(w.torch) > Version(entry.pytorch)
    ]
    if not newer:
        return []
    newest = max(newer, key=Version)
    return [
        f"{entry.name}: PyTorch's own index {index} has torch {newest}+{label}; the entry installs "
        f"torch {entry.pytorch} from its {entry.install.method} channel, which has nothing newer yet"
    ]


# ---------------------------------------------------------------- PyPI


def pyproject_caps(path: Path) -> dict[str, tuple[SpecifierSet, str]]:
    """{package: (its specifier, where)} for every requirement of pyproject.toml with an upper bound."""
    try:
        project = tomllib.loads(Path(path).read_text(encoding="utf-8")).get("project", {})
    except (FileNotFoundError, tomllib.TOMLDecodeError):
        return {}
    groups = {"dependencies": project.get("dependencies", [])}
    groups |= {f"extra {k}": v for k, v in (project.get("optional-dependencies") or {}).items()}
    caps = {}
    for where, lines in groups.items():
        for line in lines:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if any(s.operator in ("<", "<=", "~=", "==", "===") for s in req.specifier):
                caps.setdefault(canonical(req.name), (req.specifier, f"pyproject.toml {where}: {line}"))
    return caps


def _compare_pypi(cpu: list[Entry], upstream: Upstream, findings: Findings, caps: dict) -> None:
    for entry in cpu:
        if entry.status == "eol":
            continue
        findings.checked.append(entry.name)
        for package, yanked in sorted(upstream.pypi_yanked.items()):
            pinned = entry.pin(package)
            if pinned and not Version(pinned).local and pinned in yanked:
                url = f"https://pypi.org/project/{package}/{pinned}/"
                findings.yanked.append(YankedPin(entry.name, package, pinned, yanked[pinned] or "no reason given", url))
    current = next((e for e in cpu if e.status == "current"), None)
    if current is None:
        return
    previous = next((e for e in cpu if e.status == "previous"), None)
    for package, (latest, date) in sorted(upstream.pypi.items()):
        pinned = current.pin(package)
        if not pinned or Version(latest) <= Version(Version(pinned).public):
            continue
        if package in current.held:
            findings.held.append(f"{current.name}: {package} {pinned} held; PyPI has {latest} ({date})")
            continue
        target = _pypi_target(current, previous, package, pinned, latest, date, upstream, findings, caps)
        if target is None:
            continue
        when = upstream.pypi_versions[package].get(target, date)
        url = f"https://pypi.org/project/{package}/{target}/"
        findings.updates.append(
            Update(current.name, f"pin:{package}", pinned, target, url, f"{package} {target} on PyPI ({when})")
        )


def _pypi_target(current, previous, package, pinned, latest, date, upstream, findings, caps) -> str | None:
    """The release to move ``package`` to: the newest, or the newest below a cap (the crossing release is
    reported as capped), or the newest of the pinned major when nothing marks the major jump (reported)."""
    old_major = Version(Version(pinned).public).major
    cap = caps.get(package)
    if cap and not cap[0].contains(latest, prereleases=False):
        generation = f"{package} {old_major}.x"
        rotate = (
            f"rotate {previous.name} to {current.name}'s generation ({generation}), raise the cap, then "
            f"move {current.name} to {latest}"
            if previous
            else f"add a cpu-previous entry at {generation}, raise the cap, then move {current.name} to {latest}"
        )
        findings.capped.append(
            f"{current.name}: {package} {latest} ({date}) crosses the cap `{cap[0]}` ({cap[1]}): it cannot be "
            f"installed with rocmlab, so it is not proposed. To take it: {rotate}"
        )
        allowed = [v for v in upstream.pypi_versions.get(package, {}) if cap[0].contains(v, prereleases=False)]
    elif not cap and Version(latest).major > old_major:
        findings.majors.append(
            f"{current.name}: {package} {latest} ({date}) is a new major over the pinned {pinned}, and nothing marks "
            f"it (no cap in pyproject.toml, not in `held`): not proposed. Cap it (`{package}<{old_major + 1}`) and "
            f"rotate cpu-previous, or move the pin by hand once the labs run on {latest}"
        )
        allowed = [v for v in upstream.pypi_versions.get(package, {}) if Version(v).major == old_major]
    else:
        return latest
    newer = [v for v in allowed if Version(v) > Version(Version(pinned).public)]
    return max(newer, key=Version) if newer else None
