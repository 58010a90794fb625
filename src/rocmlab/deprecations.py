"""Deprecation notices in a cell's output, and the version each says the old API goes away in.

Three shapes reach a cell's streams (recorded from torch 2.13, transformers 4.57 and 5.24 in
tests/fixtures/deprecations/):

- Python warnings, ``file:line: Category: message``: ``DeprecationWarning``,
  ``PendingDeprecationWarning`` and ``FutureWarning`` always count; any other category (PyTorch
  raises ``UserWarning`` for "TypedStorage is deprecated", and its C++ ``TORCH_WARN`` arrives
  as a ``UserWarning``) counts when its text announces a deprecation.
- Library log lines on stderr: Hugging Face's ``logger.warning_once`` prints the bare message
  (transformers 4.x) or ``[transformers] message`` (5.x); they count when their text announces
  a deprecation.
- Anything else is the lab's own output and is ignored.
"""

from __future__ import annotations

import re

ALWAYS = ("DeprecationWarning", "PendingDeprecationWarning", "FutureWarning")
WARNING_LINE = re.compile(
    r"^(?P<file>[^\n]*?):(?P<line>\d+): (?P<category>\w*Warning): (?P<message>.*)$",
    re.MULTILINE,
)
LOGGER_PREFIX = re.compile(r"^\[(?P<logger>[A-Za-z_][\w.-]*)\] (?P<message>.*)$")
ANNOUNCES = re.compile(
    r"\bdeprecat|will be removed|\b(?:upcoming|future|next(?: major)?) (?:release|version)\b", re.IGNORECASE
)
REMOVAL = re.compile(
    r"(?:removed|removal|deleted|dropped)\s+(?:starting\s+)?(?:in|from|by|after|with)\s+"
    r"(?:(?:the\s+)?(?P<package>[A-Za-z][\w-]*)\s+)?(?:version\s+|v)?(?P<version>\d+(?:\.\d+){0,2})\b"
    r"(?:\s+of\s+(?P<package_after>[A-Za-z][\w-]*))?",
    re.IGNORECASE,
)
NOT_PACKAGES = {"a", "an", "the", "version", "release", "future"}
SITE_PACKAGE = re.compile(r"(?:^|/)(?:site|dist)-packages/(?P<package>[A-Za-z_]\w*)")
NAMED_MODULE = re.compile(r"^`?(?P<package>[a-z_][a-z0-9_]*)\.[A-Za-z_]")


def removal(message: str) -> dict | None:
    """``{"version", "package"}`` of the removal a message announces ("removed in Transformers v6",
    "will be removed in v5.13", "removed starting from version 5.40.0"); None when it names no version.
    ``package`` is None when the message does not say whose version it is."""
    match = REMOVAL.search(message)
    if not match:
        return None
    named = [p.lower() for p in (match["package"], match["package_after"]) if p and p.lower() not in NOT_PACKAGES]
    return {"version": match["version"], "package": named[0] if named else None}


def removal_version(message: str) -> str | None:
    found = removal(message)
    return found["version"] if found else None


def find_deprecations(text: str, cell_index: int, stream: str = "stderr") -> list[dict]:
    """The deprecation notices in one stream output of one cell, each once."""
    found = _python_warnings(text, cell_index)
    if stream == "stderr":
        found += _log_lines(text, cell_index, {w["message"] for w in found})
    return found


def _python_warnings(text: str, cell_index: int) -> list[dict]:
    seen, found = set(), []
    for match in WARNING_LINE.finditer(text):
        category, message = match["category"], match["message"].strip()
        if category not in ALWAYS and not ANNOUNCES.search(message):
            continue
        key = (category, match["file"], match["line"], message)
        if key in seen:
            continue
        seen.add(key)
        filename = match["file"].strip()
        found.append(
            _notice(category, message, cell_index, filename=filename, lineno=int(match["line"]), source="warnings")
        )
    return found


def _log_lines(text: str, cell_index: int, already: set[str]) -> list[dict]:
    found, seen = [], set(already)
    after_warning = False
    for raw in text.splitlines():
        if WARNING_LINE.match(raw):
            after_warning = True
            continue
        if after_warning and raw.startswith((" ", "\t")):
            continue  # the source line Python prints under a warning
        after_warning = False
        line = raw.strip()
        prefixed = LOGGER_PREFIX.match(line)
        logger, message = (prefixed["logger"], prefixed["message"]) if prefixed else (None, line)
        if not message or not ANNOUNCES.search(message) or message in seen:
            continue
        seen.add(message)
        found.append(_notice("log", message, cell_index, logger=logger, source="logger"))
    return found


def _notice(category: str, message: str, cell: int, *, source: str, filename: str = "", lineno: int = 0, logger=None):
    found = removal(message) or {}
    package = found.get("package") or logger or _package_of(filename, message)
    return {
        "category": category,
        "message": message,
        "filename": filename,
        "lineno": lineno,
        "cell": cell,
        "source": source,
        "package": package.lower() if package else None,
        "removal": found.get("version"),
    }


def _package_of(filename: str, message: str) -> str | None:
    """The library a notice is about: the one whose file raised it, else the module its text starts with."""
    match = SITE_PACKAGE.search(filename) or NAMED_MODULE.match(message)
    return match["package"] if match else None
