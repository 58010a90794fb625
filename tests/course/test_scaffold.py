"""``rocmlab new``: the folder it writes is a lab every command accepts, and bad input writes nothing."""

import json

import pytest

from rocmlab import cli
from rocmlab.build.assignments import build
from rocmlab.course.catalog import LabError, discover
from rocmlab.course.scaffold import TEMPLATES, scaffold
from rocmlab.execution.results import read_record

TITLES = dict(title_en="Hello ROCm", title_zh="你好 ROCm")


@pytest.fixture
def course(tmp_path):
    (tmp_path / "solutions").mkdir()
    return tmp_path


def test_the_scaffold_is_a_lab_the_catalog_and_the_build_accept(course):
    folder = scaffold(course / "solutions", "11-hello-rocm", summary="a measured copy", minutes=45, **TITLES)
    assert sorted(p.name for p in folder.iterdir()) == sorted(TEMPLATES)
    (lab,) = discover(course)
    assert (lab.id, lab.version, lab.minutes, lab.summary) == ("11-hello-rocm", "0.1.0", 45, "a measured copy")
    assert lab.title == {"zh": "你好 ROCm", "en": "Hello ROCm"}
    assert set(lab.profiles) == {"smoke", "gpu"}  # each profile the workshop hub offers (test_every_lab.py)
    build(course, [lab], ["zh", "en"], course / "labs", progress=lambda _m: None)
    for lang, heading in (("zh", "# 实验 11 · 你好 ROCm"), ("en", "# Lab 11 · Hello ROCm")):
        text = (course / "labs" / lang / lab.id / f"{lab.id}.ipynb").read_text(encoding="utf-8")
        assert heading in text and "0.1.0" in text and "{{version}}" not in text
        assert "raise NotImplementedError()" in text and "BEGIN SOLUTION" not in text
        cells = json.loads(text)["cells"]
        assert [
            c["metadata"]["nbgrader"]["grade_id"] for c in cells if c["metadata"].get("nbgrader", {}).get("grade")
        ] == ["11-bw-1"]


def test_a_title_with_quotes_stays_valid_toml(course):
    folder = scaffold(
        course / "solutions", "12-quotes", title_en='The "fast" path', title_zh="快\\路径", summary="", minutes=60
    )
    (lab,) = discover(course)
    assert lab.title["en"] == 'The "fast" path' and lab.title["zh"] == "快\\路径"
    assert lab.summary.startswith('The "fast" path') and folder.name == "12-quotes"


def test_a_chinese_title_is_written_readable_not_as_escapes(course):
    """lab.toml's values are written by a TOML writer (tomlkit), not JSON's ``\\u`` escapes."""
    folder = scaffold(
        course / "solutions", "13-zh", title_en="Hello", title_zh="你好 ROCm：带宽", summary="测量 HBM 带宽", minutes=60
    )
    text = (folder / "lab.toml").read_text(encoding="utf-8")
    assert 'title = { zh = "你好 ROCm：带宽", en = "Hello" }' in text and 'summary = "测量 HBM 带宽"' in text
    assert "\\u" not in text
    (lab,) = discover(course)
    assert lab.title["zh"] == "你好 ROCm：带宽" and lab.summary == "测量 HBM 带宽"


@pytest.mark.parametrize(
    "lab_id, needle",
    [
        ("11_hello", "is not a lab id"),
        ("1-hello", "is not a lab id"),
        ("11-Hello", "is not a lab id"),
        ("04-again", "already uses the number 04"),
    ],
)
def test_a_bad_or_taken_id_is_refused_and_nothing_is_written(course, lab_id, needle):
    (course / "solutions" / "04-collectives").mkdir()
    with pytest.raises(LabError, match=needle):
        scaffold(course / "solutions", lab_id, summary="", minutes=60, **TITLES)
    assert [p.name for p in (course / "solutions").iterdir()] == ["04-collectives"]


def test_the_command_names_the_next_steps_and_refuses_a_second_time(course, capsys):
    argv = ["--root", str(course), "new", "11-hello-rocm", "--title-en", "Hello ROCm", "--title-zh", "你好 ROCm"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "solutions/11-hello-rocm/" in out and "rocmlab build --verify 11-hello-rocm" in out
    assert cli.main(argv) == 2
    assert "already uses the number 11" in capsys.readouterr().err


@pytest.mark.slow
def test_the_scaffold_verifies_and_runs_in_the_smoke_profile(course, tmp_path):
    scaffold(course / "solutions", "11-hello-rocm", summary="a measured copy", minutes=45, **TITLES)
    root = ["--root", str(course)]
    assert cli.main([*root, "build", "--verify", "11-hello-rocm"]) == 0
    assert cli.main([*root, "run", "11-hello-rocm", "--out", str(tmp_path / "results")]) == 0
    assert read_record(tmp_path / "results" / "local" / "11-hello-rocm.json").status == "passed"
