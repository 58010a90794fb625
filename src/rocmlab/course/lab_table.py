"""The README's table of labs, generated from each lab's ``lab.toml`` so that adding a lab
touches only its own folder: ``rocmlab build`` rewrites it with the student notebooks, and
``rocmlab build --check`` reports it when it is out of step (rocmlab.build.command).

One row per lab under ``solutions/``: its id, its Chinese title and its ``summary`` (what the
learner builds), between ``<!-- labs:start -->`` and ``<!-- labs:end -->`` in the course's
``README.md``. A course without a README has no table to keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import LabError
from ..markdown_table import cell, splice
from .catalog import Lab

README = "README.md"
START, END = "<!-- labs:start -->", "<!-- labs:end -->"


def table(labs: list[Lab]) -> str:
    lines = ["| id | 实验 | what the learner builds |", "| --- | --- | --- |"]
    for lab in labs:
        if not lab.summary:
            raise LabError(f"{lab.folder / 'lab.toml'}: missing field summary (what the learner builds, one line)")
        lines.append(f"| {lab.id} | {cell(lab.title['zh'])} | {cell(lab.summary)} |")
    return "\n".join(lines) + "\n"


def stamped(readme_text: str, labs: list[Lab], readme: Path) -> str:
    """``readme_text`` with the table between the markers replaced by one made from ``labs``."""
    if START not in readme_text or END not in readme_text:
        raise LabError(f"{readme}: add the markers {START} and {END} where the lab table goes")
    return splice(readme_text, START, END, table(labs))


@dataclass(frozen=True)
class ReadmeTable:
    """The course README as it is (``text``) and with the lab table made from every lab (``fresh``)."""

    path: Path
    text: str
    fresh: str

    @property
    def in_step(self) -> bool:
        return self.text == self.fresh

    def write(self) -> bool:
        """Write the fresh table into the README; whether anything changed."""
        if self.in_step:
            return False
        self.path.write_text(self.fresh, encoding="utf-8")
        return True


def readme_table(root: Path, labs: list[Lab]) -> ReadmeTable | None:
    """The lab table of ``root``'s README for ``labs`` (every lab of the course); None when the
    course has no README. A README without the markers, or a lab without a summary, is a LabError
    naming the file."""
    path = root / README
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LabError(f"{path}: cannot read the README for its lab table: {exc}") from None
    return ReadmeTable(path, text, stamped(text, labs, path))
