"""The numbers a lab's prose states, as the prose-numbers test reads them (tests/labs/test_every_lab.py).

A number a run measures must not be typed into prose: the run prints it, or the lab's test asserts it.
What is read as such a number: a decimal (``0.92``, ``2614.9``) and a whole number that the text
marks as approximate (``near 116``, ``about 15``, ``≈ 13``, ``约 336``, ``116 左右``). Code spans,
links, arXiv numbers, model names, dates and version-like strings (``1.2.3``, ``{{version}}``) are not prose numbers.
"""

from __future__ import annotations

import re

NOT_PROSE = re.compile(
    r"`[^`\n]*`"  # code spans
    r"|https?://\S+"  # links
    r"|\]\([^)]*\)"  # markdown link targets
    r"|arXiv:\s*\d+\.\d+|abs/\d+\.\d+"  # paper numbers
    r"|\d+(?:\.\d+){2,}"  # versions and dates in dots
    r"|\{\{[^}]*\}\}"
    r"|\bQwen[\w.\-]*",  # model names (Qwen2.5-0.5B)
    re.IGNORECASE,
)
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)")
APPROXIMATE = re.compile(
    r"(?:\b(?:near|about|around|roughly|some)\s+|[≈~]\s?|约\s?|大约\s?)(\d[\d,]*\d|\d)(?![\d.])"
    r"|(?<![\d.])(\d[\d,]*)\s?(?:左右)"
)


def prose_numbers(markdown: str) -> list[str]:
    """The numbers ``markdown`` states, in order, each once."""
    text = NOT_PROSE.sub(" ", markdown)
    found = [m.group() for m in DECIMAL.finditer(text)]
    found += [(m.group(1) or m.group(2)).replace(",", "") for m in APPROXIMATE.finditer(text)]
    return list(dict.fromkeys(found))
