"""The README's lab table comes from the labs' lab.toml and is written by ``rocmlab build``:
adding a lab touches only its folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import GOOD_TOML

from rocmlab import cli
from rocmlab.course import lab_table
from rocmlab.course.catalog import LabError, discover

README = "# Course\n\n<!-- labs:start -->\nold\n<!-- labs:end -->\n\nmore\n"


def with_summary(lab_id: str, summary: str) -> str:
    return GOOD_TOML.format(id=lab_id).replace("minutes = 10", f'summary = "{summary}"\nminutes = 10')


def build(root: Path, *options: str) -> int:
    return cli.main(["--root", str(root), "build", "--lang", "en", *options])


def test_build_writes_the_row_of_a_new_lab_folder(make_course, capsys):
    root = make_course({"01-demo": (with_summary("01-demo", "a | pipe"), None)})
    readme = root / "README.md"
    readme.write_text(README, encoding="utf-8")
    assert build(root) == 0
    assert f"wrote the lab table of {readme}" in capsys.readouterr().out
    assert readme.read_text(encoding="utf-8") == (
        "# Course\n\n<!-- labs:start -->\n| id | 实验 | what the learner builds |\n| --- | --- | --- |\n"
        "| 01-demo | 测试 | a \\| pipe |\n<!-- labs:end -->\n\nmore\n"
    )
    make_course({"02-next": (with_summary("02-next", "the next thing"), None)})  # only the lab's folder
    assert build(root, "02") == 0  # a build of one lab still writes every lab's row
    assert readme.read_text(encoding="utf-8").endswith(
        "| 01-demo | 测试 | a \\| pipe |\n| 02-next | 测试 | the next thing |\n<!-- labs:end -->\n\nmore\n"
    )


def test_check_fails_on_a_stale_table_naming_the_readme(make_course, capsys):
    root = make_course({"01-demo": (with_summary("01-demo", "first words"), None)})
    readme = root / "README.md"
    readme.write_text(README, encoding="utf-8")
    assert build(root) == 0
    toml = root / "solutions" / "01-demo" / "lab.toml"
    toml.write_text(with_summary("01-demo", "other words"), encoding="utf-8")
    capsys.readouterr()
    before = readme.read_text(encoding="utf-8")
    assert build(root, "--check") == 1  # labs/ is in step: the README alone fails it
    out, err = capsys.readouterr()
    assert "labs matches solutions/" in out
    assert "changed  README.md (its lab table)" in out
    assert f"{readme}: the lab table is not in step with solutions/*/lab.toml: run `rocmlab build`" in err
    assert readme.read_text(encoding="utf-8") == before  # --check writes nothing


def test_a_lab_without_a_summary_is_named(make_course):
    root = make_course()
    with pytest.raises(LabError, match=r"solutions/01-demo/lab.toml: missing field summary"):
        lab_table.table(discover(root))


def test_a_readme_without_the_markers_fails_the_build_naming_it(make_course, capsys):
    root = make_course({"01-demo": (with_summary("01-demo", "x"), None)})
    (root / "README.md").write_text("# no table\n", encoding="utf-8")
    assert build(root) == 2
    assert f"{root / 'README.md'}: add the markers <!-- labs:start -->" in capsys.readouterr().err
    assert not (root / "labs").exists()  # refused before anything was built


def test_a_course_without_a_readme_builds_without_a_table(make_course):
    root = make_course()
    assert lab_table.readme_table(root, discover(root)) is None
    assert build(root) == 0 and not (root / "README.md").exists()
