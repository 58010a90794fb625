"""rocmlab.course.course.Course: the course found once at a process's edge, and what derives from its root."""

import pytest

from rocmlab.course.course import Course
from rocmlab.errors import InputError


def test_the_course_is_found_as_find_root_finds_it(make_course, tmp_path, monkeypatch):
    root = make_course()
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    monkeypatch.chdir(root / "solutions")
    assert Course.find() == Course.here() == Course(root)
    assert [lab.id for lab in Course.find().labs()] == ["01-demo"]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"no solutions/ folder in .* or above: .*pass --root"):
        Course.find()
    assert Course.here() is None  # a learner's folder


def test_a_named_root_that_is_no_folder_is_an_error_even_for_a_command_that_works_outside_a_course(tmp_path):
    with pytest.raises(InputError, match="--root .*nowhere: not a folder"):
        Course.here(tmp_path / "nowhere")


def test_the_course_derives_its_folders_from_the_root(tmp_path):
    course = Course(tmp_path)
    assert (course.solutions, course.labs_dir("zh"), course.matrix_path) == (
        tmp_path / "solutions",
        tmp_path / "labs" / "zh",
        tmp_path / "env" / "matrix.toml",
    )
    assert not course.has_sources


def test_its_labs_are_the_catalog_s(make_course):
    course = Course(make_course())
    assert course.has_sources and course.lab("01-demo").id == "01-demo" and course.lab("99-nope") is None
    assert [lab.id for lab in course.select(["01"])] == ["01-demo"]
