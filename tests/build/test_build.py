import json

import pytest
from conftest import GOOD_PY

from rocmlab.build.assignments import build, drift
from rocmlab.course.catalog import LabError, discover


def test_build_writes_student_notebooks_without_solutions(make_course):
    root = make_course()
    labs = discover(root)
    build(root, labs, ["zh", "en"], root / "labs", progress=lambda _m: None)
    for lang in ("zh", "en"):
        path = root / "labs" / lang / "01-demo" / "01-demo.ipynb"
        text = path.read_text(encoding="utf-8")
        nb = json.loads(text)
        assert nb["metadata"]["rocmlab"]["lang"] == lang
        assert nb["metadata"]["rocmlab"]["version"] == "1.0.0"
        assert len(nb["metadata"]["rocmlab"]["source_sha256"]) == 64
        assert "return x * SCALE" not in text and "BEGIN SOLUTION" not in text
        assert "raise NotImplementedError()" in text
    assert drift(root, labs, ["zh", "en"], root / "labs") == []


def test_hidden_tests_in_the_notebook_are_refused(make_course):
    py = GOOD_PY.replace(
        "assert f(1) == SCALE",
        "assert f(1) == SCALE\n### BEGIN HIDDEN TESTS\nassert f(12345) == 12345 * SCALE\n### END HIDDEN TESTS",
    )
    root = make_course({"01-demo": (None, py)})
    with pytest.raises(LabError, match=r"lab.py.*hidden tests do not live in the notebook.*checks.py"):
        build(root, discover(root), ["en"], root / "labs", progress=lambda _m: None)
    assert not (root / "labs" / "en" / "01-demo").exists()


def test_drift_lists_changed_missing_and_extra_files(make_course):
    root = make_course()
    labs = discover(root)
    out = root / "labs"
    build(root, labs, ["en"], out, progress=lambda _m: None)
    (out / "en" / "01-demo" / "stray.txt").write_text("x")
    notebook = out / "en" / "01-demo" / "01-demo.ipynb"
    notebook.write_text(notebook.read_text().replace("English text", "Edited by hand"))
    lines = drift(root, labs, ["en", "zh"], out)
    assert "changed  labs/en/01-demo/01-demo.ipynb" in lines
    assert "extra    labs/en/01-demo/stray.txt" in lines
    assert "missing  labs/zh/01-demo/01-demo.ipynb" in lines
    (out / "en" / "09-removed").mkdir()
    assert "orphan   labs/en/09-removed/ (no solutions/09-removed)" in drift(root, labs, ["en"], out)
    assert not any("orphan" in line for line in drift(root, labs, ["en"], out, orphans=False))


def test_failed_build_leaves_labs_as_they_were(make_course):
    root = make_course({"01-demo": (None, None), "02-broken": (None, None)})
    labs = discover(root)
    out = root / "labs"
    build(root, labs, ["en"], out, progress=lambda _m: None)
    before = (out / "en" / "01-demo" / "01-demo.ipynb").read_bytes()
    (root / "solutions" / "01-demo" / "lab.py").write_text(GOOD_PY.replace("English text", "New text"))
    (root / "solutions" / "02-broken" / "lab.py").write_text(GOOD_PY.replace("    ### END SOLUTION\n", ""))
    with pytest.raises(LabError):
        build(root, discover(root), ["en"], out, progress=lambda _m: None)
    assert (out / "en" / "01-demo" / "01-demo.ipynb").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["en"]


def test_hidden_test_data_stays_out_of_student_folders(make_course):
    root = make_course()
    data = root / "solutions" / "01-demo" / "data"
    data.mkdir()
    (data / "queries.json").write_text("[]")
    (data / "queries_hidden.json").write_text("[1]")
    build(root, discover(root), ["en"], root / "labs", progress=lambda _m: None)
    shipped = sorted(p.name for p in (root / "labs" / "en" / "01-demo" / "data").iterdir())
    assert shipped == ["queries.json"]
