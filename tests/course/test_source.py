import pytest
from conftest import GOOD_PY

from rocmlab.course.catalog import LabError, discover
from rocmlab.course.source import for_language, read_notebook


def lab_with(make_course, py):
    return discover(make_course({"01-demo": (None, py)}))[0]


def test_language_split_keeps_one_language_and_untagged_cells(make_course):
    lab = lab_with(make_course, GOOD_PY)
    nb = read_notebook(lab)
    zh = for_language(lab, nb, "zh")
    en = for_language(lab, nb, "en")
    zh_text = "".join(c.source for c in zh.cells)
    en_text = "".join(c.source for c in en.cells)
    assert "中文说明" in zh_text and "English text" not in zh_text
    assert "English text" in en_text and "中文说明" not in en_text
    assert [c.id for c in zh.cells if c.cell_type == "code"] == [c.id for c in en.cells if c.cell_type == "code"]
    assert zh.metadata["rocmlab"]["lang"] == "zh" and en.metadata["rocmlab"]["id"] == "01-demo"


def test_graded_cells_get_nbgrader_metadata(make_course):
    lab = lab_with(make_course, GOOD_PY)
    nb = for_language(lab, read_notebook(lab), "en")
    graded = {c.id: c.metadata["nbgrader"] for c in nb.cells if "nbgrader" in c.metadata}
    assert graded["t-sol"]["solution"] is True and graded["t-sol"]["grade"] is False
    assert graded["t-1"] == {
        "grade_id": "t-1",
        "grade": True,
        "locked": True,
        "solution": False,
        "points": 1,
        "schema_version": 3,
        "task": False,
    }
    params = [c for c in nb.cells if c.metadata.get("tags") == ["parameters"]]
    assert len(params) == 1


@pytest.mark.parametrize(
    "mutation, message",
    [
        (lambda s: s.replace('tags=["parameters"]', ""), "exactly one code cell tagged 'parameters'"),
        (lambda s: s.replace("SEED = 0\n", ""), "must assign SEED"),
        (lambda s: s.replace("SCALE = 1\n", ""), "profiles.smoke.params.SCALE: no such variable"),
        (lambda s: s.replace('grade_id="t-1" ', ""), "field grade_id"),
        (lambda s: s.replace("points=1", "points=0"), "field points: expected a positive number"),
        (lambda s: s.replace('grade_id="t-1"', 'grade_id="t-sol"'), "duplicate grade_id 't-sol'"),
        (lambda s: s.replace("    ### END SOLUTION\n", ""), "'### END SOLUTION'"),
        (lambda s: s.replace('tags=["solution"]', 'tags=["soluton"]'), "unknown tag 'soluton'"),
        (lambda s: s.replace('tags=["solution"]', 'tags=["solution", "en"]'), "a code cell tagged 'en'"),
        (lambda s: s.replace('# %% [markdown] tags=["en"]\n# English text\n', ""), "1 cells tagged zh and 0 tagged en"),
        (
            lambda s: s.replace('# %% tags=["parameters"]', '# %%\nx = compute()\n\n# %% tags=["parameters"]'),
            "only imports may come before",
        ),
        (
            lambda s: s.replace("assert f(1) == SCALE", "### BEGIN SOLUTION\nassert f(1) == SCALE\n### END SOLUTION"),
            "only allowed in a cell tagged 'solution'",
        ),
        (lambda s: s.replace("# English text", "# **Version** 0.9.0 · English text"), "states version 0.9.0"),
        (lambda s: s.replace("# English text", "# **Version** 0.9.0 · English text"), "field version is "),
        (lambda s: s.replace("# %%", "#"), "not jupytext percent format"),
    ],
)
def test_bad_lab_py_names_file_and_cell(make_course, mutation, message):
    lab = lab_with(make_course, mutation(GOOD_PY))
    with pytest.raises(LabError) as err:
        read_notebook(lab)
    assert message in str(err.value)
    assert "lab" in str(err.value)


def test_a_version_the_prose_states_is_lab_tomls(make_course):
    lab = lab_with(make_course, GOOD_PY.replace("# English text", "# **Version** 1.0.0 · English text"))
    assert any("**Version** 1.0.0" in cell.source for cell in read_notebook(lab).cells)


def test_title_fields_are_rendered_from_lab_toml(make_course):
    py = GOOD_PY.replace("# 中文说明", "# 版本 {{version}} · 约 {{minutes}} 分钟").replace(
        "# English text", "# Version {{version}} · about {{minutes}} minutes"
    )
    (lab,) = discover(make_course({"01-demo": (None, py)}))
    zh, en = (cell.source for cell in read_notebook(lab).cells[:2])
    assert zh == "版本 1.0.0 · 约 10 分钟" and en == "Version 1.0.0 · about 10 minutes"
