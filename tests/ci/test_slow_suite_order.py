"""The slow suite's order (tests/conftest.py): the tests that grade a whole lab (``runs_a_lab``)
are collected before every other test, so that `--dist loadgroup` hands them out before the
short one-test groups and no worker starts one while the other has nothing left."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a pytest of its own collecting two modules: 5 CPU-s, the slow suite's own order
def test_lab_gradings_are_collected_before_the_tests_of_modules_collected_earlier():
    earlier = "tests/grading/test_grade_adversarial.py"  # collected before the next module by name
    gradings = "tests/grading/test_grade_references.py"
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--collect-only",
            "-m",
            "slow",
            "-p",
            "no:cacheprovider",
            earlier,
            gradings,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.splitlines()
    ids = [line for line in listed if "::" in line]
    first_other = next(i for i, nodeid in enumerate(ids) if not nodeid.startswith(gradings))
    assert first_other > 0 and all(nodeid.startswith(earlier) for nodeid in ids[first_other:]), ids
    assert any(nodeid.startswith(earlier) for nodeid in ids)
