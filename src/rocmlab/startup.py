"""Optional modules a rocmlab process never uses but its libraries import, blocked at its start.

Each costs start-up time when imported and is used by no code path of ours. Blocking one makes its
``import`` fail, so the library takes the path it has for the module missing. jsonschema's IRI
grammar (``rfc3987_syntax``, compiled at import: about 2 s of CPU; rocmlab's and nbformat's schemas
have no IRI field) is blocked in every process; the notebook worker also blocks what papermill's
imports pull in for cloud storage and Parquet, which a local notebook run never touches (about 1.5 s).
"""

from __future__ import annotations

import sys

UNUSED_IN_CLI = ("rfc3987_syntax",)
UNUSED_IN_WORKER = (*UNUSED_IN_CLI, "pyarrow", "gcsfs", "github", "azure", "boto3", "botocore")


def block_unused_imports(names: tuple[str, ...] = UNUSED_IN_WORKER) -> None:
    """Make ``import name`` fail for each of ``names`` not imported yet (a ``None`` in ``sys.modules``)."""
    for name in names:
        sys.modules.setdefault(name, None)
