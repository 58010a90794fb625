"""The README's lab table comes from the labs' lab.toml: adding a lab touches only its folder."""

from __future__ import annotations

import pytest
from conftest import GOOD_TOML

from rocmlab.course import lab_table
from rocmlab.course.catalog import LabError, discover

README = "# Course\n\n<!-- labs:start -->\nold\n<!-- labs:end -->\n\nmore\n"


def with_summary(lab_id: str, summary: str) -> str:
    return GOOD_TOML.format(id=lab_id).replace("minutes = 10", f'summary = "{summary}"\nminutes = 10')


def test_a_new_lab_gets_its_row_from_its_own_lab_toml(make_course, capsys):
    root = make_course({"01-demo": (with_summary("01-demo", "a | pipe"), None)})
    readme = root / "README.md"
    readme.write_text(README, encoding="utf-8")
    assert lab_table.main(["--check", "--root", str(root), str(readme)]) == 1
    assert "not in step" in capsys.readouterr().out
    assert lab_table.main(["--root", str(root), str(readme)]) == 0
    assert readme.read_text(encoding="utf-8") == (
        "# Course\n\n<!-- labs:start -->\n| id | 实验 | what the learner builds |\n| --- | --- | --- |\n"
        "| 01-demo | 测试 | a \\| pipe |\n<!-- labs:end -->\n\nmore\n"
    )
    make_course({"02-next": (with_summary("02-next", "the next thing"), None)})
    assert lab_table.main(["--check", "--root", str(root), str(readme)]) == 1
    lab_table.main(["--root", str(root), str(readme)])
    assert "| 02-next | 测试 | the next thing |" in readme.read_text(encoding="utf-8")
    assert lab_table.main(["--check", "--root", str(root), str(readme)]) == 0


def test_a_lab_without_a_summary_is_named(make_course):
    root = make_course()
    with pytest.raises(LabError, match=r"solutions/01-demo/lab.toml: missing field summary"):
        lab_table.table(discover(root))


def test_a_readme_without_the_markers_is_an_error_naming_it(make_course, tmp_path, capsys):
    root = make_course({"01-demo": (with_summary("01-demo", "x"), None)})
    readme = tmp_path / "README.md"
    readme.write_text("# no table\n", encoding="utf-8")
    assert lab_table.main(["--root", str(root), str(readme)]) == 2
    assert f"{readme}: add the markers <!-- labs:start -->" in capsys.readouterr().err
