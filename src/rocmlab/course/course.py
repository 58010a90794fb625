"""The course a process works on: its repository root, found once where the process starts (the
command line's ``main``, the hub's configuration and launch, a worker's entry point) and passed
down as a ``Course``; what is derived from the root lives here, so nothing below the edge looks
for the root again (``tests/foundation/test_course_edge.py`` fails on a module that does)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..root import MARKER, find_root
from .catalog import Lab, discover, select

MATRIX_RELATIVE = Path("env") / "matrix.toml"


@dataclass(frozen=True)
class Course:
    """A course repository. Its ``root`` need not hold ``solutions/`` (a learner's image ships only
    the built labs): ``has_sources`` says whether it does, and ``labs()`` raises where it does not."""

    root: Path

    @classmethod
    def find(cls, named: str | os.PathLike | None = None) -> Course:
        """The course named by ``--root`` (``named``), ``$ROCMLAB_ROOT`` or the working directory
        (``root.find_root``); an ``InputError`` naming what was looked for where there is none."""
        return cls(find_root(named))

    @classmethod
    def here(cls, named: str | os.PathLike | None = None) -> Course | None:
        """The course, or None where there is none (a learner's folder). A root named on the command
        line that is not a folder is still an error: the learner asked for it."""
        try:
            return cls.find(named)
        except InputError:
            if named:
                raise
            return None

    @property
    def solutions(self) -> Path:
        return self.root / MARKER

    @property
    def has_sources(self) -> bool:
        return self.solutions.is_dir()

    def labs_dir(self, lang: str) -> Path:
        """The built student notebooks of one language: ``labs/<lang>/``."""
        return self.root / "labs" / lang

    @property
    def matrix_path(self) -> Path:
        """The release matrix, ``env/matrix.toml``."""
        return self.root / MATRIX_RELATIVE

    def labs(self) -> list[Lab]:
        """Every lab under ``solutions/``, sorted by id (``catalog.discover``)."""
        return discover(self.root)

    def select(self, wanted: list[str] | tuple[str, ...] | None) -> list[Lab]:
        """The labs named on the command line (id or number), all when none (``catalog.select``)."""
        return select(self.labs(), list(wanted or ()))

    def lab(self, lab_id: str) -> Lab | None:
        """The lab with id ``lab_id``, or None."""
        return next((lab for lab in self.labs() if lab.id == lab_id), None)
