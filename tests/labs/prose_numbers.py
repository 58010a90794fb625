"""The numbers a lab's prose states, as the prose-numbers test reads them (tests/labs/test_every_lab.py).

A number a run measures must not be typed into prose: the run prints it, or the lab's test asserts it.
What is read as such a number: a decimal (``0.92``, ``2614.9``), a whole number that the text
marks as approximate (``near 116``, ``about 15``, ``≈ 13``, ``约 336``, ``116 左右``), and a whole
number with a unit of measure (``283 s``, ``12 ms``, ``60 %``, ``192 GB``, ``336 GB/s``, ``16 B``,
``4×``, ``5 分钟``): what a run measures has a unit. A bare count, a section number or a year has
none and is not read (``section 6``, ``2024``, ``8 GPUs``, ``7B``). Code spans,
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


UNITS = (
    r"ns|µs|us|ms|s|sec|seconds?|minutes?|min|hours?|"  # time
    r"%|bytes?|B|KB|KiB|MB|MiB|GB|GiB|TB|TiB|"  # shares and sizes ("16 B", never "7B": a space before B)
    r"[KMGT]B/s|TFLOPS|PFLOPS|GFLOPS|tokens?/s|tok/s|it/s|W|"  # rates and power
    r"秒|毫秒|微秒|分钟|小时|字节|倍"
)
MEASURE = re.compile(r"(?<![\w.,\-])(\d[\d,]*\d|\d)(?:\s(?:" + UNITS + r")|\s?(?:%|秒|毫秒|微秒|分钟|小时|字节|倍)|×)(?![A-Za-z0-9_/])")


def prose_numbers(markdown: str) -> list[str]:
    """The numbers ``markdown`` states, in order, each once."""
    text = NOT_PROSE.sub(" ", markdown)
    found = [m.group() for m in DECIMAL.finditer(text)]
    found += [(m.group(1) or m.group(2)).replace(",", "") for m in APPROXIMATE.finditer(text)]
    found += [m.group(1).replace(",", "") for m in MEASURE.finditer(text)]
    return list(dict.fromkeys(found))
