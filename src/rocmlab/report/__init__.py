"""Freshness: the run history and the verdict per (lab, matrix entry), rendered for people.

One module per job: ``history`` (the append-only ledger under ci/history/), ``verdict`` (the
verdict per pair and whether a lab is fresh), ``diff`` (what changed since the previous run),
``render`` (Markdown, JSON, the CI step summary), ``dashboard`` (the HTML page), ``badges``
(shields.io endpoint JSON), ``stamp`` (write it all into the repository) and ``command``
(`rocmlab report`).
"""

from .history import Run, read_ledger
from .verdict import Freshness, build

__all__ = ["Freshness", "Run", "build", "read_ledger"]
