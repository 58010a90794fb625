"""rocmlab.root.find_root: --root, then $ROCMLAB_ROOT, then the working directory or a folder above it."""

import pytest

from rocmlab.errors import InputError
from rocmlab.root import find_root


@pytest.fixture
def courses(tmp_path, monkeypatch):
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    named, from_env, here = (tmp_path / name for name in ("named", "from-env", "here"))
    for course in (named, from_env, here):
        (course / "solutions").mkdir(parents=True)
    (here / "labs" / "en").mkdir(parents=True)
    return named, from_env, here


def test_the_option_wins_then_the_variable_then_the_working_directory(courses, monkeypatch):
    named, from_env, here = courses
    monkeypatch.chdir(here / "labs" / "en")
    assert find_root() == here  # the nearest folder above holding solutions/
    monkeypatch.setenv("ROCMLAB_ROOT", str(from_env))
    assert find_root() == from_env
    assert find_root(str(named)) == named


def test_a_named_root_must_be_a_folder_and_nothing_found_says_what_to_do(courses, tmp_path, monkeypatch):
    with pytest.raises(InputError, match=r"--root .*nowhere: not a folder"):
        find_root(str(tmp_path / "nowhere"))
    monkeypatch.setenv("ROCMLAB_ROOT", str(tmp_path / "gone"))
    with pytest.raises(InputError, match=r"\$ROCMLAB_ROOT .*gone: not a folder"):
        find_root()
    monkeypatch.delenv("ROCMLAB_ROOT")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(InputError, match="pass --root or set \\$ROCMLAB_ROOT"):
        find_root()
