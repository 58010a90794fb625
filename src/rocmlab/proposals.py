"""From upstream's answers to changes of env/matrix.toml: new entries, updates, the PR body.

Rules: a new ROCm series newer than the matrix becomes a proposed entry; a patch release of a
series updates its entry; a PyTorch bump is proposed only from the entry's own channel (its
AMD index, its PyTorch rocmX.Y index, or rocm/pytorch tags of its ROCm version); nothing is
proposed for ``eol`` entries; a package listed in a CPU entry's ``held`` is reported, not bumped.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tomli_w
from packaging.version import Version

from .matrix import Entry, MatrixError, era_of, parse_matrix, series
from .upstream import DOCKER_TAGS, THEROCK_RELEASES, ImageTag, RocmRelease, Upstream, WheelBuild, pytorch_index


@dataclass(frozen=True)
class Update:
    """One field of one entry to change, with the source that shows it."""

    entry: str
    field: str  # rocm | released | pytorch | requirement | pin:<package>
    old: str
    new: str
    url: str
    fact: str


@dataclass
class Findings:
    new_entries: list[dict] = field(default_factory=list)
    updates: list[Update] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def anything(self) -> bool:
        return bool(self.new_entries or self.updates)

    def as_json(self) -> dict:
        return {
            "new_entries": [
                {k: str(v) if isinstance(v, dt.date) else v for k, v in e.items()} for e in self.new_entries
            ],
            "updates": [asdict(u) for u in self.updates],
            "held": self.held,
            "failures": self.failures,
            "partial": bool(self.failures),
        }


def compare(entries: list[Entry], upstream: Upstream, today: dt.date | None = None) -> Findings:
    today = today or dt.date.today()
    findings = Findings(failures=list(upstream.failures))
    rocm = [e for e in entries if e.kind == "rocm"]
    newest_known = max((Version(e.rocm) for e in rocm), default=Version("0"))
    known = {series(e.rocm): e for e in rocm}
    for rocm_series, release in sorted(_newest_by_series(upstream.releases).items(), reverse=True):
        entry = known.get(rocm_series)
        if entry is None and Version(release.version) > newest_known:
            findings.new_entries.append(propose_entry(release, rocm, upstream, today))
        elif entry is not None and entry.status != "eol" and Version(release.version) > Version(entry.rocm):
            findings.updates.extend(_patch_release(entry, release, upstream, today))
    for entry in rocm:
        if entry.status == "eol" or any(u.entry == entry.name and u.field == "pytorch" for u in findings.updates):
            continue
        findings.updates.extend(_torch_bump(entry, entry.rocm, upstream, today))
    _compare_pypi([e for e in entries if e.kind == "cpu"], upstream, findings)
    return findings


def _newest_by_series(releases: list[RocmRelease]) -> dict[tuple[int, int], RocmRelease]:
    newest: dict[tuple[int, int], RocmRelease] = {}
    for release in releases:
        key = series(release.version)
        if key not in newest or Version(release.version) > Version(newest[key].version):
            newest[key] = release
    return newest


# ---------------------------------------------------------------- one entry's own channel


def channel_wheels(entry: Entry, rocm: str, upstream: Upstream) -> list[WheelBuild]:
    """Wheels of ``entry``'s channel built for ROCm ``rocm``, for the entry's Python."""
    method = entry.install.method
    if method == "multiarch":
        index, label = entry.install.index_url, f"rocm{rocm}"
    elif method == "wheel":
        index, label = pytorch_index(series(rocm)), f"rocm{'.'.join(rocm.split('.')[:2])}"
    else:
        return []
    return [
        w
        for w in upstream.wheels
        if w.index.rstrip("/") == index.rstrip("/") and w.local == label and w.python == entry.python
    ]


def channel_images(entry: Entry, rocm: str, upstream: Upstream) -> list[ImageTag]:
    prefix = f"rocm{rocm}_"
    return [i for i in upstream.images if i.tag.startswith(prefix) and i.python == entry.python]


def _newest_torch(entry: Entry, rocm: str, upstream: Upstream) -> tuple[str, str, str] | None:
    """(torch version, install detail, source URL) of the newest build on the entry's own channel."""
    if entry.install.method == "image":
        image = max(channel_images(entry, rocm, upstream), key=lambda i: Version(i.pytorch), default=None)
        return (image.pytorch, f"rocm/pytorch:{image.tag}", DOCKER_TAGS.format(name=f"rocm{rocm}")) if image else None
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
        Update(entry.name, "rocm", entry.rocm, release.version, url, f"ROCm {release.version} released"),
        Update(entry.name, "released", str(entry.released), str(release.date or today), url, "release date"),
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


def propose_entry(release: RocmRelease, rocm: list[Entry], upstream: Upstream, today: dt.date) -> dict:
    """A matrix entry for a new ROCm series from what upstream shows; copied facts are marked unverified."""
    era = era_of(release.version)
    template = next((e for e in rocm if e.era == era), rocm[0] if rocm else None)
    python = template.python if template else "3.12"
    sources = [
        {
            "url": release.url or THEROCK_RELEASES,
            "seen": today,
            "facts": ["rocm", "released"],
            "fact": f"ROCm {release.version} released {release.date}",
        }
    ]
    unverified = ["gfx"]
    found = next(_install_candidates(release.version, template, python, upstream), None)
    if found:
        install, torch, python, url, detail = found
        sources.append({"url": url, "seen": today, "facts": ["pytorch", "python", "install"], "fact": detail})
    else:
        torch = template.pytorch if template else "0.0.0"
        install = {k: v for k, v in asdict(template.install).items() if v is not None} if template else {}
        unverified += ["pytorch", "python", "install"]
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
        "unverified": unverified,
        "sources": sources,
        "notes": "Proposed by `rocmlab releases check`: confirm the facts marked unverified (gfx targets "
        "from SUPPORTED_GPUS.md / RELEASES.md) and remove them from `unverified`.",
    }


def _install_candidates(rocm: str, template: Entry | None, python: str, upstream: Upstream):
    """(install, torch, python, source URL, detail) for a new release: the template's AMD index first,
    then rocm/pytorch images of that ROCm version, then PyTorch's rocmX.Y index."""
    if template is not None and template.install.method == "multiarch":
        index = template.install.index_url
        wheels = [w for w in upstream.wheels if w.index == index and w.local == f"rocm{rocm}" and w.python == python]
        if wheels:
            torch = max((w.torch for w in wheels), key=Version)
            requirement = f"torch[device-{{gfx}}]=={torch}+rocm{rocm}"
            install = {"method": "multiarch", "index_url": index, "requirement": requirement}
            yield install, torch, python, index, f"torch {torch}+rocm{rocm} on {index}"
    images = [i for i in upstream.images if i.tag.startswith(f"rocm{rocm}_")]
    if images:
        image = max(images, key=lambda i: (Version(i.pytorch), i.python == python, Version(i.python)))
        url = DOCKER_TAGS.format(name=f"rocm{rocm}")
        yield {"method": "image", "image": f"rocm/pytorch:{image.tag}"}, image.pytorch, image.python, url, image.tag
    label, index = f"rocm{'.'.join(rocm.split('.')[:2])}", pytorch_index(series(rocm))
    wheels = [w for w in upstream.wheels if w.index == index and w.local == label]
    if wheels:
        wheel = max(wheels, key=lambda w: (Version(w.torch), w.python == python, Version(w.python)))
        install = {"method": "wheel", "index_url": index, "requirement": f"torch=={wheel.torch}+{label}"}
        yield install, wheel.torch, wheel.python, index, f"torch {wheel.torch}+{label} on {index}"


# ---------------------------------------------------------------- PyPI


def _compare_pypi(cpu: list[Entry], upstream: Upstream, findings: Findings) -> None:
    current = next((e for e in cpu if e.status == "current"), None)
    if current is None:
        return
    for package, (latest, date) in sorted(upstream.pypi.items()):
        pinned = current.pin(package)
        if not pinned or Version(latest) <= Version(Version(pinned).public):
            continue
        if package in current.held:
            findings.held.append(f"{current.name}: {package} {pinned} held; PyPI has {latest} ({date})")
            continue
        url = f"https://pypi.org/project/{package}/{latest}/"
        findings.updates.append(
            Update(current.name, f"pin:{package}", pinned, latest, url, f"{package} {latest} on PyPI ({date})")
        )


# ---------------------------------------------------------------- the body


def render_entries_toml(proposals: list[dict]) -> str:
    """Proposed [[rocm]] tables in the matrix file's own style: one line per field, inline tables."""
    return "\n".join(_render_entry(p) for p in proposals)


def _render_entry(proposal: dict) -> str:
    lines = ["[[rocm]]"]
    for key, value in proposal.items():
        if key == "sources":
            lines += ["sources = ["] + [f"  {_toml_value(s)}," for s in value] + ["]"]
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dt.date):
        return value.isoformat()
    return tomli_w.dumps({"v": value}).split(" = ", 1)[1].strip()


def render_body(findings: Findings, matrix_path: str = "env/matrix.toml") -> str:
    """A ready PR / issue body (Markdown)."""
    lines = ["## Upstream releases newer than the rocmlab matrix", ""]
    if findings.failures:
        lines += [
            "**Partial check**: these sources could not be read, so this is not a complete answer:",
            "",
            *[f"- {f}" for f in findings.failures],
            "",
        ]
    elif not findings.anything:
        lines += ["Nothing newer than the matrix was found.", ""]
    if findings.new_entries:
        lines += [f"### Entries to add to `{matrix_path}`", "", "```toml"]
        lines += [render_entries_toml(findings.new_entries).rstrip(), "```", ""]
    if findings.updates:
        lines += ["### Updates to existing entries", ""]
        lines += [f"- {u.entry}: {u.field} {u.old} -> {u.new} ({u.fact}; {u.url})" for u in findings.updates]
        lines.append("")
    if findings.held:
        lines += ["### Held back on purpose", "", *[f"- {h}" for h in findings.held], ""]
    lines += [
        "### Checklist",
        "",
        "- [ ] every fact listed in `unverified` checked against its primary source, then removed from the list",
        "- [ ] `rocmlab env dockerfiles` run and env/docker/ committed",
        "- [ ] freshness run of the new entries passed; `rocmlab report --stamp` committed",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------- editing env/matrix.toml in place

FIELD_LINE = {"rocm": "rocm", "released": "released", "pytorch": "pytorch", "status": "status"}


def apply(path: Path, findings: Findings, today: dt.date | None = None) -> list[str]:
    """Write the findings into the matrix file, keeping its comments; returns what changed.

    New entries go in front of the first [[rocm]] table; when two ROCm entries were current
    already, the oldest of them becomes previous. The result is validated; an invalid result is not written.
    """
    today = today or dt.date.today()
    original = Path(path).read_text(encoding="utf-8")
    text, changes = original, []
    for update in findings.updates:
        text = _apply_update(text, update, today)
        changes.append(f"{update.entry}: {update.field} {update.old} -> {update.new}")
    for proposal in findings.new_entries:
        text = _retire_oldest_current(text, Path(path))
        block = _render_entry(proposal) + "\n"
        first = text.index("[[rocm]]")
        text = text[:first] + block + text[first:]
        changes.append(f"{proposal['name']}: new entry (ROCm {proposal['rocm']}, PyTorch {proposal['pytorch']})")
    try:
        parse_matrix(text, Path(path))
    except MatrixError as err:
        raise MatrixError(f"the proposed edit of {path} would not be valid: {err}") from None
    Path(path).write_text(text, encoding="utf-8")
    return changes


def _block(text: str, name: str) -> tuple[int, int]:
    """Start and end offsets of the [[...]] table whose name is ``name``."""
    starts = [m.start() for m in re.finditer(r"(?m)^\[\[(rocm|cpu|canary)\]\]\s*$", text)] + [len(text)]
    for start, end in zip(starts, starts[1:]):
        if re.search(rf'(?m)^name = "{re.escape(name)}"\s*$', text[start:end]):
            return start, end
    raise MatrixError(f"no entry named {name!r} to update")


def _set_line(block: str, key: str, value: str) -> str:
    new, count = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", block, count=1)
    if not count:
        raise MatrixError(f"field {key!r} not found as its own line")
    return new


def _apply_update(text: str, update: Update, today: dt.date) -> str:
    start, end = _block(text, update.entry)
    block = text[start:end]
    if update.field in FIELD_LINE:
        value = update.new if update.field == "released" else f'"{update.new}"'
        block = _set_line(block, FIELD_LINE[update.field], value)
    elif update.field in ("requirement", "image"):
        block = block.replace(f'"{update.old}"', f'"{update.new}"', 1)
    elif update.field.startswith("pin:"):
        package = update.field.split(":", 1)[1]
        block = re.sub(rf'"{re.escape(package)}=={re.escape(update.old)}"', f'"{package}=={update.new}"', block)
    facts = {"rocm": ["rocm"], "released": ["released"], "pytorch": ["pytorch"]}.get(update.field, ["install"])
    if update.field.startswith("pin:"):
        facts = ["pins"]
    inline = _toml_value({"url": update.url, "seen": today, "facts": facts, "fact": update.fact})
    block = block.replace("sources = [\n", f"sources = [\n  {inline},\n", 1)
    return text[:start] + block + text[end:]


def _retire_oldest_current(text: str, path: Path) -> str:
    current = [e for e in parse_matrix(text, path).entries if e.kind == "rocm" and e.status == "current"]
    if len(current) < 2:
        return text
    oldest = min(current, key=lambda e: Version(e.rocm))
    start, end = _block(text, oldest.name)
    return text[:start] + _set_line(text[start:end], "status", '"previous"') + text[end:]
