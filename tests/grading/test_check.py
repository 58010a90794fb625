"""``rocmlab check``: a learner's offline self-check."""

import shutil
from pathlib import Path

import classroom
import nbformat
import pytest

from rocmlab.cli import main
from rocmlab.course.course import Course
from rocmlab.errors import CommandFailed
from rocmlab.grading import self_check
from rocmlab.grading.preflight import check_learner_sandbox_gives
from rocmlab.grading.self_check import first_error, prepare
from rocmlab.sandbox import landlock
from rocmlab.sandbox import limits as sandbox

NEEDS_LANDLOCK = pytest.mark.skipif(
    landlock.abi() < landlock.SANDBOX_ABI, reason="the Landlock backend needs Landlock ABI 6 (Linux 6.12 or later)"
)


def test_missing_notebook_is_a_clear_error(tmp_path, capsys):
    assert main(["--root", str(classroom.COURSE), "check", str(tmp_path / "nope.ipynb")]) == 2
    assert "no such notebook" in capsys.readouterr().err


def test_not_a_notebook_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{ not json")
    assert main(["--root", str(classroom.COURSE), "check", str(bad)]) == 2
    assert "not a readable Jupyter notebook" in capsys.readouterr().err


def test_notebook_without_tests_is_a_clear_error(tmp_path, capsys):
    plain = tmp_path / "plain.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), str(plain))
    assert main(["--root", str(classroom.COURSE), "check", str(plain)]) == 2
    assert "no graded test cell" in capsys.readouterr().err


def test_prepare_drops_old_injected_parameters_unless_kept():
    test = nbformat.v4.new_code_cell("assert 1 == 1")
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1}
    test.outputs = [nbformat.v4.new_output("stream", name="stdout", text="old")]
    injected = nbformat.v4.new_code_cell("SCALE = 9")
    injected.metadata["tags"] = ["injected-parameters"]
    nb = prepare(nbformat.v4.new_notebook(cells=[injected, test]), keep_params=False)
    assert [c.source for c in nb.cells] == ["assert 1 == 1"] and nb.cells[0].outputs == []
    nb = prepare(nbformat.v4.new_notebook(cells=[injected, test]), keep_params=True)
    assert len(nb.cells) == 2


@pytest.mark.slow
def test_check_reports_visible_results_and_exit_status(tmp_path, capsys):
    base = classroom.student_notebook(classroom.COURSE, tmp_path)
    good = classroom.write(classroom.answer(base), tmp_path / "good" / "lab.ipynb")
    bad = classroom.write(classroom.answer(base, classroom.SUM_WRONG), tmp_path / "bad" / "lab.ipynb")
    assert main(["--root", str(classroom.COURSE), "check", str(good)]) == 0
    out = capsys.readouterr().out
    assert "PASS  01-grade-sum" in out and "visible score: 5 / 5" in out
    assert main(["--root", str(classroom.COURSE), "check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  01-grade-sum" in out and "should be 3" in out and "visible score: 3 / 5" in out
    assert "hidden checks" in out


def _ran(source, *, cell_id=None, nbgrader=None, error=None):
    cell = nbformat.v4.new_code_cell(source)
    if cell_id:
        cell.id = cell_id
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    if error:
        cell.outputs = [nbformat.v4.new_output("error", ename=error[0], evalue=error[1], traceback=[])]
    return cell


def test_the_first_failed_cell_is_named_with_whose_it_is_and_how_to_fix_it():
    test = {"grade": True, "grade_id": "t", "points": 1}
    answer = {"solution": True, "grade_id": "a"}
    lock = ("PermissionError", "[Errno 13] Permission denied: '/cache/models/x.lock'")
    course = {"cell-2": "model = load()"}
    nb = nbformat.v4.new_notebook(
        cells=[
            _ran("model = load()", cell_id="cell-2", error=lock),
            _ran("def f(): ...", nbgrader=answer),
            _ran("f(model)", nbgrader=test, error=("NameError", "name 'model' is not defined")),
        ]
    )
    first = first_error(nb, course)
    assert (first.position, first.owner) == (1, "course") and "PermissionError" in first.message
    assert "not your code" in first.describe() and "build-model" in first.hint
    nb.cells[0].source = "model = load(fast=True)"  # the learner edited the course cell
    assert first_error(nb, course).owner == "course-edited"
    assert first_error(nb, None).owner == "course"  # without the course: known by its id
    nb.cells[0] = _ran("x = 1")
    nb.cells[1].outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=[])]
    first = first_error(nb, course)
    assert (first.position, first.owner) == (2, "answer") and "fix this answer" in first.hint
    nb.cells[1].outputs = []
    assert first_error(nb, course) is None  # only the test failed: its own message says why


def test_check_validates_the_notebook_as_the_grader_does(tmp_path, capsys):
    real = tmp_path / "real.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), str(real))
    (tmp_path / "link.ipynb").symlink_to(real)
    assert main(["--root", str(classroom.COURSE), "check", str(tmp_path / "link.ipynb")]) == 2
    assert "not a readable Jupyter notebook" in capsys.readouterr().err
    broken = tmp_path / "broken.ipynb"
    broken.write_text(
        '{"cells": [{"cell_type": "code", "source": 7, "metadata": {}, "outputs": []}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    )
    assert main(["--root", str(classroom.COURSE), "check", str(broken)]) == 2
    assert "cell 1 is not a well-formed" in capsys.readouterr().err


def _param_cell(source, tag):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = [tag]
    return cell


def test_a_lone_notebook_s_own_parameters_are_read_from_its_parameters_cell():
    from rocmlab.course.parameters import notebook_parameters

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell('MODEL = "not-a-parameter"'),
            _param_cell(
                'MODEL = "tiny-qwen-zh"\nN = 4  # comment\nSIZES = [128]\nDEVICE = pick()\nA = B = 1', "parameters"
            ),
            _param_cell("N = 8", "injected-parameters"),
        ]
    )
    assert notebook_parameters(nb) == {"MODEL": "tiny-qwen-zh", "N": 8, "SIZES": [128]}


def test_cells_are_numbered_as_the_learner_sees_them_not_counting_the_injected_parameters():
    injected = _param_cell("N = 8", "injected-parameters")
    crash = _ran("load()", cell_id="cell-3", error=("RuntimeError", "boom"))
    nb = nbformat.v4.new_notebook(cells=[_param_cell("N = 4", "parameters"), injected, crash])
    assert first_error(nb, None).position == 2  # the run's own injected cell is not the learner's
    # --keep-params: an injected cell already in the learner's notebook is one of theirs, and counts
    assert first_error(nb, None, frozenset({injected.id})).position == 3


def test_check_on_a_downloaded_lab_08_notebook_gives_the_grader_s_preflight_message(tmp_path, monkeypatch, capsys):
    """In an empty folder, outside any course, with an empty cache: the notebook's own parameters name the
    course model, so the check stops before running anything, with ``rocmlab grade``'s preflight message."""
    from pathlib import Path

    from rocmlab.errors import CommandFailed
    from rocmlab.grading.preflight import check_model_cache

    lab08 = Path(__file__).resolve().parents[2] / "labs" / "en" / "08-low-precision" / "08-low-precision.ipynb"
    folder = tmp_path / "download"
    folder.mkdir()
    (folder / "08-low-precision.ipynb").write_bytes(lab08.read_bytes())
    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    monkeypatch.chdir(folder)
    with pytest.raises(CommandFailed) as grader:
        check_model_cache({"MODEL": "tiny-qwen-zh"}, other_user=False)
    assert main(["check", "08-low-precision.ipynb"]) == 1
    err = capsys.readouterr().err
    assert str(grader.value) in err and "rocmlab assets build-model" in err


def test_an_optional_exercise_is_labelled_and_scored_apart_from_the_core(capsys, monkeypatch):
    """Issue 53: lab 10's "optional" exercise 5 was 3 of 26 points of the one visible score."""
    from rocmlab.grading import self_check

    tests = [
        self_check.VisibleTest("10-memory-1", 3, True, ""),
        self_check.VisibleTest("10-stretch-comm-1", 3, False, "AssertionError: x"),
    ]
    monkeypatch.setattr(self_check, "run_check", lambda *a, **k: (tests, "", None))
    assert self_check.main(notebook="lab.ipynb") == 1
    out = capsys.readouterr().out
    assert "FAIL  10-stretch-comm-1                3 pts (optional)" in out
    assert "visible score: 3 / 3, optional exercises 0 / 3 (scored apart from the core)" in out


def test_check_on_a_downloaded_lab_03_notebook_says_the_adapter_is_missing_and_how_to_build_it(
    tmp_path, monkeypatch, capsys
):
    """A learner who downloaded lab 03 alone into an empty folder: the notebook's metadata (``cache_needs``,
    from lab.toml's smoke profile) names lab 03's adapter, so the check stops before running anything with
    ``rocmlab grade``'s preflight message and the command that builds it. The model's preflight, which runs
    first, is the lab 08 test's; here it is told the model is there, as on a machine that built only the model."""
    from pathlib import Path

    from rocmlab.errors import CommandFailed
    from rocmlab.grading import self_check
    from rocmlab.grading.preflight import check_adapter_cache
    from rocmlab.grading.self_check import notebook_cache_needs, read_learner_notebook

    lab03 = Path(__file__).resolve().parents[2] / "labs" / "en" / "03-lora-finetune-zh" / "03-lora-finetune-zh.ipynb"
    folder = tmp_path / "download"
    folder.mkdir()
    (folder / lab03.name).write_bytes(lab03.read_bytes())
    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "cache-without-adapter"))
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    monkeypatch.chdir(folder)
    model_checked = []
    monkeypatch.setattr(self_check, "check_model_cache", lambda params, other_user: model_checked.append(params))
    needs = notebook_cache_needs(read_learner_notebook(folder / lab03.name))
    assert needs.course_model and needs.qc_adapter
    with pytest.raises(CommandFailed) as grader:
        check_adapter_cache(needs, other_user=False)
    assert main(["check", lab03.name]) == 1
    err = capsys.readouterr().err
    assert str(grader.value) in err
    assert "lab 03's QC adapter is not in the cache" in err and "python -m rocmlab.lab.qc_adapter" in err
    assert model_checked and model_checked[0]["MODEL"] == "tiny-qwen-zh"


def test_a_notebook_s_cache_needs_ignore_what_the_course_does_not_build():
    from rocmlab.grading.self_check import notebook_cache_needs

    nb = nbformat.v4.new_notebook(metadata={"rocmlab": {"cache_needs": ["qc_adapter", "gpus", {"x": 1}]}})
    needs = notebook_cache_needs(nb)
    assert needs.qc_adapter and not needs.course_model and needs.gpus == 0
    assert (
        notebook_cache_needs(nbformat.v4.new_notebook(metadata={"rocmlab": {"cache_needs": "qc_adapter"}})).qc_adapter
        is False
    )


# ---- a lab whose ranks need loopback TCP, on a machine whose only sandbox is Landlock ----------

REPO = Path(__file__).resolve().parents[2]


def _learner_copy(lab_id: str, lang: str, folder: Path) -> Path:
    """The course's built notebook of ``lab_id`` in ``lang``, as a learner has it."""
    built = REPO / "labs" / lang / lab_id / f"{lab_id}.ipynb"
    folder.mkdir(parents=True)
    return Path(shutil.copy(built, folder / built.name))


class _NoSandbox:
    def __init__(self, *args, **kwargs):
        raise AssertionError("the check made a sandbox: it ran before refusing")


@pytest.mark.parametrize("lang, says", [("en", "TCP on 127.0.0.1"), ("zh", "127.0.0.1 上的 TCP")])
def test_check_refuses_a_loopback_lab_up_front_on_landlock_in_the_learners_language(
    lang, says, tmp_path, monkeypatch, capsys
):
    notebook = _learner_copy("04-collectives-rccl", lang, tmp_path / "me")
    monkeypatch.setattr(self_check, "choose_backend", lambda isolate: "landlock")  # a pod without user namespaces
    monkeypatch.delenv(sandbox.BACKEND_VARIABLE, raising=False)
    monkeypatch.setattr(self_check, "Sandbox", _NoSandbox)
    assert main(["--root", str(REPO), "check", str(notebook)]) == 1
    err = capsys.readouterr().err
    assert "04-collectives-rccl" in err and says in err and "Landlock" in err, err
    assert ("Nothing was run" if lang == "en" else "什么都没有运行") in err
    assert sandbox.BACKEND_VARIABLE not in err  # nothing forced: no variable to unset


@NEEDS_LANDLOCK
def test_check_with_landlock_forced_names_the_variable_to_unset(tmp_path, monkeypatch, capsys):
    notebook = _learner_copy("10-fsdp2", "zh", tmp_path / "me")
    monkeypatch.setenv(sandbox.BACKEND_VARIABLE, "landlock")  # as the grader's preflight tests force it
    monkeypatch.setattr(self_check, "Sandbox", _NoSandbox)
    assert main(["--root", str(REPO), "check", str(notebook)]) == 1
    err = capsys.readouterr().err
    assert "10-fsdp2" in err and "127.0.0.1 上的 TCP" in err and f"{sandbox.BACKEND_VARIABLE}=landlock" in err, err


@pytest.mark.parametrize("backend", sandbox.BACKENDS)
def test_only_a_backend_without_loopback_stops_the_check_of_a_loopback_lab(backend):
    course = Course(REPO)
    loopback, plain = course.lab("05-distributed-training"), course.lab("01-rocm-setup")
    check_learner_sandbox_gives(plain.id, plain.needs, backend, "zh")  # a lab that needs nothing: every backend
    if sandbox.LOOPBACK_TCP[backend]:
        check_learner_sandbox_gives(loopback.id, loopback.needs, backend, "en")
    else:
        with pytest.raises(CommandFailed, match="cannot check lab 05-distributed-training on this machine"):
            check_learner_sandbox_gives(loopback.id, loopback.needs, backend, "fr")  # unknown language: English


@pytest.mark.parametrize(
    "lab_id, lang", [("04-collectives-rccl", "zh"), ("05-distributed-training", "en"), ("10-fsdp2", "en")]
)
def test_a_loopback_lab_checked_alone_in_an_empty_folder_is_refused_up_front_on_landlock(
    lab_id, lang, tmp_path, monkeypatch, capsys
):
    """The student notebook copied alone into an empty folder, no course anywhere (no --root, no
    ROCMLAB_ROOT, the working directory outside the checkout): its metadata, written by
    ``rocmlab build`` from lab.toml's ``needs``, is all the check has, and it refuses before any sandbox."""
    notebook = _learner_copy(lab_id, lang, tmp_path / "alone")
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    monkeypatch.delenv(sandbox.BACKEND_VARIABLE, raising=False)
    monkeypatch.chdir(notebook.parent)
    monkeypatch.setattr(self_check, "choose_backend", lambda isolate: "landlock")
    monkeypatch.setattr(self_check, "Sandbox", _NoSandbox)
    assert main(["check", notebook.name]) == 1
    err = capsys.readouterr().err
    assert lab_id in err and ("TCP on 127.0.0.1" if lang == "en" else "127.0.0.1 上的 TCP") in err, err


def test_every_lab_s_notebooks_carry_its_sandbox_needs_and_nothing_else():
    """What ``rocmlab build`` wrote: each built notebook's ``metadata.rocmlab.needs`` is its lab.toml's."""
    course = Course(REPO)
    for lab in course.labs():
        for lang in ("zh", "en"):
            nb = nbformat.read(REPO / "labs" / lang / lab.id / f"{lab.id}.ipynb", as_version=4)
            assert self_check.notebook_needs(nb) == tuple(lab.needs), (lab.id, lang)
            assert nb.metadata["rocmlab"].get("needs", []) == list(lab.needs), (lab.id, lang)


def test_a_notebook_s_sandbox_needs_ignore_what_the_course_does_not_know():
    nb = nbformat.v4.new_notebook(metadata={"rocmlab": {"needs": ["gpu-direct", "loopback-tcp", {"x": 1}]}})
    assert self_check.notebook_needs(nb) == ("loopback-tcp",)
    assert self_check.notebook_needs(nbformat.v4.new_notebook(metadata={"rocmlab": {"needs": "loopback-tcp"}})) == ()
    assert self_check.notebook_needs(nbformat.v4.new_notebook()) == ()
