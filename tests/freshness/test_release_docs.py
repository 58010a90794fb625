"""The README, the docs, the Makefile and env/matrix.toml say the same thing about the newest
entries and the CPU torch pin: the matrix is the one place it is written, the others follow it."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rocmlab.freshness import releases

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "env" / "matrix.toml"


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def newest(kind: str) -> str:
    return releases.newest_environment(kind, MATRIX).name


def cpu_torch(entry: str = "cpu-current") -> str:
    return releases.read_matrix(MATRIX).get(entry).pin("torch")


def test_the_makefile_installs_the_cpu_build_of_cpu_previous():
    make = shutil.which("make")
    if not make:
        pytest.skip("make is not installed")
    assert "torch==2." not in read("Makefile")  # not written twice
    printed = subprocess.run(
        [make, "-s", "--no-print-directory", "--eval", "print-torch: ; @echo $(TORCH)", "print-torch"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert printed.stdout.strip() == f"torch=={cpu_torch('cpu-previous')}" and "+cpu" in printed.stdout


def test_readme_and_docs_name_the_newest_entries_and_the_torch_pin():
    rocm, cpu, torch = newest("rocm"), newest("cpu"), cpu_torch()
    readme = read("README.md")
    assert f"today `torch=={cpu_torch('cpu-previous')}`" in readme
    assert f"The newest entries today: **{rocm}** and\n  **{cpu}** (torch {torch})" in readme
    assert f"today `{rocm}`\nand `{cpu}`" in read("docs/freshness.md")
    matrix_doc = read("docs/release-matrix.md")
    heading = re.search(r"### Why cpu-current pins torch (\S+), not PyPI's (\S+)", matrix_doc)
    assert heading and heading[1] == torch
    assert f'"torch=={torch}"' in read("env/matrix.toml")
