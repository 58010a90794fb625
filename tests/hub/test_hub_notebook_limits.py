"""A learner's notebook is parsed by a child with a memory ceiling, and checked against limits on
its structure, before anything of the live service parses it (issue 48: a 45 MB notebook took the
root worker to 15.7 GiB). The real-account attack is
tests/hub/test_hub_isolation.py::test_a_learners_notebook_is_parsed_by_a_child_with_a_ceiling_never_by_root."""

from __future__ import annotations

import json
import os
import resource

import pytest

from rocmlab.grading import notebook_limits
from rocmlab.grading.notebook_limits import NotebookRefused, check_notebook, structure_problem
from rocmlab.hub.delivery import read_regular, sha256, write_regular


def notebook(cells) -> dict:
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def code(outputs=()) -> dict:
    return {"cell_type": "code", "source": "x = 1", "metadata": {}, "outputs": list(outputs), "execution_count": 1}


def stream(text) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_a_notebook_within_the_limits_passes_in_the_child(tmp_path):
    path = tmp_path / "lab.ipynb"
    path.write_text(json.dumps(notebook([code([stream("hello\n")])])))
    check_notebook(path)


@pytest.mark.parametrize(
    ("nb", "named"),
    [
        (notebook([code()] * (notebook_limits.MAX_CELLS + 1)), "cells: at most"),
        (notebook([code(), code([stream("a")] * (notebook_limits.MAX_OUTPUTS + 1))]), "cell 2: more than"),
        (notebook([code([stream(["a"] * notebook_limits.MAX_VALUES)])]), "JSON values"),
        (
            notebook(
                [
                    {
                        **code(),
                        "metadata": {
                            "a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
                        },
                    }
                ]
            ),
            "nested deeper",
        ),
        (
            notebook(
                [
                    {
                        "cell_type": "markdown",
                        "source": "",
                        "metadata": {},
                        "attachments": {"x.png": {"image/png": "A" * (notebook_limits.MAX_ATTACHMENT_BYTES + 1)}},
                    }
                ]
            ),
            "attachment 'x.png'",
        ),
        ([1, 2], "not a Jupyter notebook"),
    ],
)
def test_each_structure_limit_is_named(nb, named):
    assert named in structure_problem(nb)


def test_a_notebook_built_to_be_costly_to_parse_costs_the_parent_nothing(tmp_path):
    """30 MB of tiny strings (under the size limit; the 45 MB of the attack is over it): gigabytes
    once parsed. Refused by the child; the parent's peak resident memory does not grow by anything
    near that."""
    path = tmp_path / "huge.ipynb"
    with path.open("w") as out:
        out.write('{"cells": [{"cell_type": "code", "source": "", "metadata": {}, "execution_count": 1, "outputs": ')
        out.write('[{"output_type": "stream", "name": "stdout", "text": ["a"')
        for _ in range(430):
            out.write(', "a\\n"' * 10_000)
        out.write(']}]}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    assert path.stat().st_size > 28 * 2**20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(NotebookRefused, match="huge.ipynb: more than 500000 JSON values"):
        check_notebook(path)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 * 1024, f"the parent grew by {grown_kib} KiB"


def test_a_file_over_the_size_limit_is_refused_before_any_parse(tmp_path):
    path = tmp_path / "big.ipynb"
    with path.open("wb") as out:
        out.truncate(notebook_limits.MAX_BYTES + 1)
    with pytest.raises(NotebookRefused, match="over 32 MiB"):
        check_notebook(path)


def test_deliveries_never_block_on_a_fifo(tmp_path):
    """Issue 48: a FIFO where a delivery reads or writes is not a regular file: read as nothing,
    written not at all (no reader: ENXIO at once), never waited on."""
    fifo = tmp_path / "lab.ipynb"
    os.mkfifo(fifo)
    assert read_regular(fifo) is None and sha256(fifo) == ""
    with pytest.raises(OSError):
        write_regular(fifo, b"{}")
    regular = tmp_path / "notes.txt"
    write_regular(regular, b"kept")
    assert read_regular(regular) == b"kept"
