"""Generated Markdown tables kept between two marker comments of a file (the README's lab and
command tables)."""

from __future__ import annotations


def cell(text: str) -> str:
    return text.replace("|", "\\|")  # a pipe would end the Markdown table cell


def splice(text: str, start: str, end: str, table: str) -> str:
    """``text`` with what stands between ``start`` and ``end`` replaced by ``table``; the caller
    has checked that both markers are there."""
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{table}{end}{tail}"
