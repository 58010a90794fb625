"""The README, the docs, the Makefile and env/matrix.toml say the same thing about the newest
entries and the CPU torch pin: the matrix is the one place it is written, the others follow it."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rocmlab.freshness import pull_request, releases

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
    """The sentences that name the newest entries are marked spans rendered from the matrix (whatever it
    says today): each file holds its span, and every span agrees with env/matrix.toml."""
    spans = {
        name: [m["name"] for m in pull_request.MARKED.finditer(read(name))] for name in pull_request.SENTENCE_FILES
    }
    assert spans["README.md"] == ["cpu-previous-torch", "newest-entries"]
    assert spans["docs/freshness.md"] == ["newest-names"]
    assert pull_request.stale_sentences(ROOT) == {}, "run `rocmlab releases check --apply` or fix the spans"
    rocm, cpu, torch = newest("rocm"), newest("cpu"), cpu_torch()
    assert f"<!-- matrix:newest-entries -->**{rocm}** and **{cpu}** (torch {torch})<!-- /matrix -->" in read(
        "README.md"
    )
    matrix_doc = read("docs/release-matrix.md")
    heading = re.search(r"### Why cpu-current pins torch (\S+), not PyPI's (\S+)", matrix_doc)
    assert heading and heading[1] == torch


def test_the_spans_follow_another_matrix(tmp_path):
    """A copy of the repository's files with a newer ROCm entry: rewrite_sentences names it, and an
    unknown span name is an error naming the file."""
    for name in (*pull_request.SENTENCE_FILES, "env/matrix.toml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    matrix = tmp_path / "env" / "matrix.toml"
    text = matrix.read_text(encoding="utf-8").replace(
        'name = "rocm-10.1"\nrocm = "10.1.0"', 'name = "rocm-10.9"\nrocm = "10.9.0"'
    )
    text = text.replace("==2.14.0+rocm10.1.0", "==2.14.0+rocm10.9.0")
    matrix.write_text(text, encoding="utf-8")
    assert pull_request.rewrite_sentences(tmp_path) == ["README.md", "docs/freshness.md"]
    assert "**rocm-10.9** and **cpu-current**" in (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "`rocm-10.9` and `cpu-current`" in (tmp_path / "docs" / "freshness.md").read_text(encoding="utf-8")
    assert pull_request.rewrite_sentences(tmp_path) == []
    (tmp_path / "README.md").write_text("<!-- matrix:newest-typo -->x<!-- /matrix -->", encoding="utf-8")
    with pytest.raises(releases.MatrixError, match="README.md: <!-- matrix:newest-typo --> names no sentence"):
        pull_request.stale_sentences(tmp_path)


def test_the_exit_code_table_of_the_docs_is_the_code_s():
    doc = read("docs/release-matrix.md")
    table = doc[doc.index("<!-- exit-codes:start -->") : doc.index("<!-- exit-codes:end -->")]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [(int(r[0][2:]), r[1].strip("`"), r[2].rstrip(" |")) for r in rows] == [
        (code, name, meaning) for name, code, meaning in releases.EXIT_CODES
    ]
    assert len({code for _n, code, _m in releases.EXIT_CODES}) == len(releases.EXIT_CODES)


def test_the_exit_codes_command_prints_what_the_scripts_eval(capsys):
    assert releases.main(releases_command="exit-codes") == releases.EXIT_UP_TO_DATE
    printed = dict(line.split("=") for line in capsys.readouterr().out.splitlines())
    assert printed == {name: str(code) for name, code, _m in releases.EXIT_CODES}
    for script in ("ci/release_check.sh", "ci/freshness_report.sh"):
        assert "releases exit-codes" in read(script), script
