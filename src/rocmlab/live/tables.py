"""Tables of the live service's own (hints, regrades) kept in the live queue's SQLite file, so
that a restart of the service loses none of them."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path


class QueueTables:
    """The tables of ``SCHEMA`` (a subclass's), made if missing, in ``path`` (the queue's database)."""

    SCHEMA = ""

    def __init__(self, path: Path):
        self.path = Path(path)
        with closing(self._connect()) as db, db:
            db.executescript(self.SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        return db
