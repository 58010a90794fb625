"""The pull request that proposals become: its Markdown body (``render_body``, with new entries in
the matrix file's own TOML style) and the edit of env/matrix.toml (``apply``), made with tomlkit:
real tables are found by name, comments and layout stay, and an invalid result is not written."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import tomli_w
import tomlkit
from packaging.requirements import Requirement

from .matrix import Matrix, MatrixError, canonical, parse_matrix, read_matrix, sort_newest_first
from .proposals import Findings, Update


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


def render_body(findings: Findings, matrix_path: str = "env/matrix.toml", runs: list[dict] | None = None) -> str:
    """A ready PR / issue body (Markdown). ``runs``: what the freshness run of the branch runs."""
    lines = ["## Upstream releases newer than the rocmlab matrix", ""]
    if findings.needs_person:
        lines += [
            "**A person is needed**" + (" (partial check: not a complete answer)" if findings.partial else "") + ":",
            "",
            *[f"- {reason}" for reason in findings.needs_person],
            "",
        ]
    elif not findings.anything:
        lines += ["Nothing newer than the matrix was found.", ""]
    if findings.new_entries:
        lines += [f"### Entries to add to `{matrix_path}`", "", "```toml"]
        lines += [render_entries_toml(findings.new_entries).rstrip(), "```", ""]
    if findings.updates:
        lines += ["### Updates to existing entries", ""]
        lines += [
            f"- {u.entry}: {u.field} {u.old} -> {u.new} ({u.fact}" + (f"; {u.url})" if u.url else ")")
            for u in findings.updates
        ]
        lines.append("")
    if findings.yanked:
        lines += ["### Pinned releases yanked on PyPI", ""]
        lines += [f"- {y.entry}: {y.package}=={y.version} is yanked ({y.reason}; {y.url})" for y in findings.yanked]
        lines.append("")
    if findings.held:
        lines += ["### Held back (listed in the entry's `held`)", "", *[f"- {h}" for h in findings.held], ""]
    if findings.notices:
        lines += ["### Also seen", "", *[f"- {n}" for n in findings.notices], ""]
    if findings.unparsed:
        lines += ["### Not understood (reported, not skipped)", "", *[f"- {u}" for u in findings.unparsed], ""]
    if findings.restated:
        lines += ["### Facts that name a replaced value", "", *[f"- {r}" for r in findings.restated], ""]
    if runs:
        where = {
            "gpu": "on a GPU runner",
            "github": "on GitHub's runners",
            "none": "not run: no GPU runner (ROCMLAB_GPU_RUNNERS=none); run its labs on a ROCm machine before merging",
        }
        lines += [
            "### What runs again",
            "",
            "The freshness run dispatched on this branch runs the labs on exactly these entries, and on no other:",
            "",
            *[f"- {run['entry']} {where[run['runner']]}" for run in runs],
            "",
        ]
    lines += [
        "### Checklist",
        "",
        "- [ ] every fact listed in `unverified` checked against its primary source, then removed from the list",
        "- [ ] `rocmlab env dockerfiles` run and env/docker/ committed",
        "- [ ] freshness run of the changed entries passed; `rocmlab report --stamp` committed",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------- editing env/matrix.toml in place

SCALAR_FIELDS = ("rocm", "released", "pytorch", "status")
FACTS_OF = {
    "rocm": ["rocm"],
    "released": ["released"],
    "pytorch": ["pytorch"],
    "requirement": ["install"],
    "image": ["install"],
}


def apply(path: Path, findings: Findings, today: dt.date | None = None) -> list[str]:
    """Write the findings into the matrix file; returns what changed.

    The file is edited with tomlkit, so its comments, order and layout stay, and an entry is found
    among the real [[rocm]] / [[cpu]] tables by its name (a ``[[rocm]]`` in a comment is text). New
    entries go in front of the first [[rocm]] table. The facts an update's source states are taken out
    of ``unverified``. The result is validated; an invalid result is not written.
    """
    today = today or dt.date.today()
    path = Path(path)
    original = path.read_text(encoding="utf-8")
    try:
        doc = tomlkit.parse(original)
    except tomlkit.exceptions.ParseError as err:
        raise MatrixError(f"{path}: not valid TOML: {err}") from None
    changes = []
    by_source: dict[tuple[str, str], tuple[list[str], str]] = {}
    for update in findings.updates:
        _apply_update(doc, update)
        changes.append(f"{update.entry}: {update.field} {update.old} -> {update.new}")
        if update.url:
            facts = ["pins"] if update.field.startswith("pin:") else FACTS_OF.get(update.field, [])
            known, fact = by_source.setdefault((update.entry, update.url), ([], update.fact))
            known += [f for f in facts if f not in known]
    for (name, url), (facts, fact) in by_source.items():
        _add_source(_table(doc, name), {"url": url, "seen": today, "facts": facts, "fact": fact})
    for proposal in findings.new_entries:
        block = tomlkit.parse(_render_entry(proposal) + "\n")["rocm"][0]
        if "rocm" in doc:
            doc["rocm"].insert(0, block)
        else:
            doc["rocm"] = tomlkit.aot()
            doc["rocm"].append(block)
        changes.append(f"{proposal['name']}: new entry (ROCm {proposal['rocm']}, PyTorch {proposal['pytorch']})")
    text = tomlkit.dumps(doc)
    try:
        parse_matrix(text, path)
    except MatrixError as err:
        raise MatrixError(f"the proposed edit of {path} would not be valid: {err}") from None
    path.write_text(text, encoding="utf-8")
    return changes


def _table(doc, name: str):
    for kind in ("rocm", "cpu", "canary"):
        for table in doc.get(kind, []):
            if table.get("name") == name:
                return table
    raise MatrixError(f"no entry named {name!r} to update")


def _apply_update(doc, update: Update) -> None:
    table = _table(doc, update.entry)
    if update.field in SCALAR_FIELDS:
        table[update.field] = dt.date.fromisoformat(update.new) if update.field == "released" else update.new
    elif update.field == "requirement":
        table["install"]["requirement"] = update.new
    elif update.field == "image":
        table["install"]["image"] = update.new
        if "digest" in table["install"]:  # the digest was of the old tag: verify-pins records the new one
            del table["install"]["digest"]
    elif update.field.startswith("pin:"):
        package = update.field.split(":", 1)[1]
        pins = table["pins"]
        index = next(
            (i for i, pin in enumerate(pins) if canonical(Requirement(str(pin)).name) == canonical(package)), None
        )
        if index is None:
            raise MatrixError(f"{update.entry}: no pin of {package} to update")
        pins[index] = f"{Requirement(str(pins[index])).name}=={update.new}"
    else:
        raise MatrixError(f"{update.entry}: cannot apply an update of {update.field!r}")


def _add_source(table, source: dict) -> None:
    """Put the source first in the entry's ``sources`` and take the facts it states out of ``unverified``."""
    inline = tomlkit.parse(f"s = {_toml_value(source)}\n")["s"]
    table["sources"].insert(0, inline)
    if "unverified" in table:
        left = [f for f in table["unverified"] if f not in source["facts"]]
        if left:
            table["unverified"] = tomlkit.parse(f"u = {_toml_value(left)}\n")["u"]
        else:
            del table["unverified"]


# ---------------------------------------------------------------- the sentences that name the newest entries

# README and docs name the newest entries in marked spans, `<!-- matrix:NAME -->text<!-- /matrix -->`:
# the text is rendered from env/matrix.toml, `releases check --apply` rewrites it with the matrix, and
# tests/freshness/test_release_docs.py fails when a span and the matrix disagree.
SENTENCE_FILES = ("README.md", "docs/freshness.md", "docs/release-matrix.md")
MARKED = re.compile(r"<!-- matrix:(?P<name>[a-z-]+) -->(?P<text>.*?)<!-- /matrix -->", re.S)


def _newest(matrix: Matrix, kind: str):
    """The entry freshness is judged on (``matrix.newest_environment``'s rule): the newest current one."""
    entries = [e for e in sort_newest_first(list(matrix.entries)) if e.kind == kind]
    return ([e for e in entries if e.status == "current"] or entries)[0]


SENTENCES = {
    "newest-entries": lambda m: (
        f"**{_newest(m, 'rocm').name}** and **{_newest(m, 'cpu').name}** (torch {_newest(m, 'cpu').pin('torch')})"
    ),
    "newest-names": lambda m: f"`{_newest(m, 'rocm').name}` and `{_newest(m, 'cpu').name}`",
    "cpu-previous-torch": lambda m: f"`torch=={m.get('cpu-previous').pin('torch')}`",
}


def render_sentences(text: str, matrix: Matrix, where: str = "") -> str:
    """``text`` with every marked span rendered from ``matrix``; an unknown span name is an error."""

    def render(match: re.Match) -> str:
        name = match["name"]
        if name not in SENTENCES:
            raise MatrixError(f"{where}: <!-- matrix:{name} --> names no sentence (known: {', '.join(SENTENCES)})")
        return f"<!-- matrix:{name} -->{SENTENCES[name](matrix)}<!-- /matrix -->"

    return MARKED.sub(render, text)


def stale_sentences(root: Path, matrix: Matrix | None = None) -> dict[str, str]:
    """{file: its text rendered from the matrix} for each file whose marked spans disagree with it."""
    matrix = matrix or read_matrix(Path(root) / "env" / "matrix.toml")
    stale = {}
    for name in SENTENCE_FILES:
        path = Path(root) / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        rendered = render_sentences(text, matrix, name)
        if rendered != text:
            stale[name] = rendered
    return stale


def rewrite_sentences(root: Path) -> list[str]:
    """Rewrite the marked spans of README/docs under ``root`` from its env/matrix.toml; the files changed."""
    stale = stale_sentences(root)
    for name, text in stale.items():
        (Path(root) / name).write_text(text, encoding="utf-8")
    return sorted(stale)
