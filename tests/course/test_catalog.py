import json
import re
from pathlib import Path

import pytest
from conftest import GOOD_TOML

from rocmlab import cli
from rocmlab.course.catalog import LOOPBACK_TCP, LabError, discover, select
from rocmlab.course.listing import main
from rocmlab.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def write_toml(make_course, text, lab_id="01-demo"):
    return make_course({lab_id: (text, None)})


def test_discovers_and_types_a_valid_lab(make_course):
    root = make_course()
    (lab,) = discover(root)
    assert lab.id == "01-demo" and lab.version == "1.0.0" and lab.minutes == 10
    smoke = lab.profile("smoke")
    assert smoke.params == {"SCALE": 2} and smoke.timeout_s == 60 and smoke.cell_timeout_s == 60
    assert smoke.requires.gpus == 0


@pytest.mark.parametrize(
    "mutation, message",
    [
        (lambda t: t.replace('version = "1.0.0"', 'version = "1.0"'), "field version: expected a semantic version"),
        (lambda t: t.replace("minutes = 10", 'minutes = "ten"'), "field minutes: expected a positive integer"),
        (lambda t: t.replace("minutes = 10\n", ""), "missing field minutes"),
        (lambda t: t.replace('en = "Test"', 'fr = "Test"'), "unknown field title.fr (allowed: en, zh)"),
        (lambda t: t.replace('en = "Test"', 'en = " "'), "field title.en: expected a table with non-empty zh and en"),
        (lambda t: t.replace("timeout_s = 60", "timeout = 60"), "unknown field profiles.smoke.timeout"),
        (lambda t: t.replace("[profiles.smoke]", "[profiles.huge]"), "unknown field profiles.huge (allowed: gpu"),
        (lambda t: 'color = "red"\n' + t, "unknown field color"),
        (lambda t: 'summary = "two\\nlines"\n' + t, "field summary: expected one non-empty line"),
        (
            lambda t: t.replace("timeout_s = 60", "timeout_s = 60\ncell_timeout_s = 90"),
            "cell_timeout_s: expected a positive integer no larger than timeout_s",
        ),
        (
            lambda t: t + "[profiles.gpu]\ntimeout_s = 10\nrequires = { gpus = -1 }\n",
            "field profiles.gpu.requires.gpus: expected a non-negative integer, got -1",
        ),
        (
            lambda t: t.replace("timeout_s = 60", 'timeout_s = "60"'),
            "profiles.smoke.timeout_s: expected a positive integer",
        ),
        (lambda t: t.replace("minutes = 10", "minutes = true"), "field minutes: expected a positive integer, got True"),
        (lambda t: t.replace('id = "01-demo"', 'id = "01-other"'), "field id: expected the folder name '01-demo'"),
        (lambda t: t.replace("minutes = 10", "minutes = ["), "not valid TOML"),
        (
            lambda t: t + 'requires = { course_model = "yes" }\n',
            "field profiles.smoke.requires.course_model: expected true or false",
        ),
        (
            lambda t: t.replace("SCALE = 2", 'SCALE = 2, MODEL = "tiny-qwen-zh"'),
            "field profiles.smoke.requires.course_model: expected true, since params.MODEL is 'tiny-qwen-zh'",
        ),
        (
            lambda t: t + "requires = { qc_adapter = true }\n",
            "field profiles.smoke.requires.course_model: expected true, since requires.qc_adapter is true",
        ),
        (
            lambda t: t + "requires = { course_model = true, qc_adapter = 1 }\n",
            "field profiles.smoke.requires.qc_adapter: expected true or false",
        ),
        (
            lambda t: t.replace("minutes = 10", 'minutes = 10\nneeds = ["internet"]'),
            "expected a list of distinct names among: loopback-tcp",
        ),
    ],
)
def test_bad_lab_toml_names_file_and_field(make_course, mutation, message):
    root = write_toml(make_course, mutation(GOOD_TOML.format(id="01-demo")))
    with pytest.raises(LabError) as err:
        discover(root)
    assert message in str(err.value)
    assert "lab.toml" in str(err.value)


def test_a_profile_declares_the_course_model_it_needs(make_course):
    text = GOOD_TOML.format(id="01-demo") + "requires = { course_model = true }\n"
    declared, plain = discover(make_course({"01-demo": (text, None), "02-demo": (None, None)}))
    assert declared.profile("smoke").requires.course_model is True
    assert plain.profile("smoke").requires.course_model is False
    assert declared.profile("smoke").requires.qc_adapter is False


def test_a_profile_declares_lab_03s_adapter_on_the_course_model(make_course):
    text = GOOD_TOML.format(id="01-demo") + "requires = { course_model = true, qc_adapter = true }\n"
    (lab,) = discover(make_course({"01-demo": (text, None)}))
    assert lab.profile("smoke").requires.qc_adapter is True


def test_smoke_profile_is_required(make_course):
    text = GOOD_TOML.format(id="01-demo").replace("[profiles.smoke]", "[profiles.gpu]")
    with pytest.raises(LabError, match="missing field profiles.smoke"):
        discover(write_toml(make_course, text))


def test_duplicate_ids_are_rejected(make_course, tmp_path):
    root = make_course({"01-demo": (None, None)})
    copy = root / "solutions" / "01-demo-copy"
    copy.mkdir()
    (copy / "lab.toml").write_text(GOOD_TOML.format(id="01-demo"))
    with pytest.raises(LabError, match="field id"):
        discover(root)


def test_select_by_number_and_suggests_closest(make_course):
    root = make_course({"01-demo": (None, None), "02-inference": (None, None)})
    labs = discover(root)
    assert [lab.id for lab in select(labs, ["02"])] == ["02-inference"]
    assert [lab.id for lab in select(labs, [])] == ["01-demo", "02-inference"]
    with pytest.raises(LabError, match="did you mean '02-inference'"):
        select(labs, ["02-inferense"])


def _lab_notebook(path, lab_id, version="1.0.0", lang="zh", title="# Lab 01 · 演示"):
    path.parent.mkdir(parents=True, exist_ok=True)
    nb = {
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": [title + "\n", "\ntext"]}],
        "metadata": {"rocmlab": {"id": lab_id, "version": version, "lang": lang}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")


def test_list_outside_a_course_shows_the_lab_notebooks_here(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    _lab_notebook(tmp_path / "09-profiling.ipynb", "09-profiling", "1.2.0", "en", "# Lab 09 · Profiling")
    _lab_notebook(tmp_path / "course" / "07" / "07-triton-kernels.ipynb", "07-triton-kernels", "1.2.0")
    _lab_notebook(tmp_path / ".ipynb_checkpoints" / "09-profiling-checkpoint.ipynb", "09-profiling")
    (tmp_path / "notes.ipynb").write_text('{"cells": [], "metadata": {}}', encoding="utf-8")
    (tmp_path / "broken.ipynb").write_text("{not json", encoding="utf-8")
    assert main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["07-triton-kernels", "1.2.0", "zh"] and "演示" in lines[0]
    assert lines[1].split()[:3] == ["09-profiling", "1.2.0", "en"] and "Lab 09 · Profiling" in lines[1]
    assert len(lines) == 3 and "rocmlab check" in lines[2]
    assert main(labs=["09"], as_json=True) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["id"] == "09-profiling" and row["path"].endswith("09-profiling.ipynb")


def test_list_outside_a_course_without_notebooks_speaks_to_learners(tmp_path, monkeypatch):
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="Learners: run rocmlab list in the folder that holds your lab notebooks"):
        main()
    _lab_notebook(tmp_path / "a.ipynb", "07-triton-kernels")
    with pytest.raises(InputError, match="no notebook of lab '09' here"):
        main(labs=["09"])


def test_list_in_a_course_still_lists_its_sources(make_course, monkeypatch, capsys):
    root = make_course()
    monkeypatch.chdir(root / "solutions")  # the command line finds the course above
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    assert cli.main(["list"]) == 0
    assert capsys.readouterr().out.split()[:3] == ["01-demo", "1.0.0", "10"]


def test_a_notebook_title_is_its_first_heading_after_any_banner(tmp_path):
    from rocmlab.course.learner_labs import read_lab_notebook

    path = tmp_path / "run.ipynb"
    _lab_notebook(path, "09-profiling", title="<span>An exception was raised</span>")
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "# Lab 09 · Profiling\n"})
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert read_lab_notebook(path).title == "Lab 09 · Profiling"


# What starts processes that talk over loopback TCP: rocmlab.lab.launch's torchrun (``lab.run_torchrun``),
# torchrun itself, or a process group joined from the notebook.
LAUNCHES_RANKS = re.compile(r"run_torchrun\(|rocmlab\.lab\.launch|\btorchrun\b.*--nproc|init_process_group\(")
# a server on 127.0.0.1: lab 02's scripted SSE server, lab 06's redis-server on a free port
OPENS_LOOPBACK = re.compile(r"ScriptedSSEServer\(|\.bind\(\(\"127\.0\.0\.1\"|HTTPServer\(")


def test_every_lab_that_launches_ranks_or_serves_on_loopback_declares_it_needs_loopback_tcp():
    """Graded on a backend without loopback TCP (Landlock) such a lab would fail every learner;
    the grader refuses it only when the lab says so (rocmlab.grading.preflight.check_sandbox_gives)."""
    labs = discover(REPO)
    launching = [lab.id for lab in labs if LAUNCHES_RANKS.search(lab.source.read_text(encoding="utf-8"))]
    assert {"04-collectives-rccl", "05-distributed-training", "10-fsdp2"} <= set(launching)
    serving = [lab.id for lab in labs if OPENS_LOOPBACK.search(lab.source.read_text(encoding="utf-8"))]
    assert {"02-llm-inference", "06-multi-agent"} <= set(serving)
    launching += serving
    undeclared = [lab.id for lab in labs if lab.id in launching and LOOPBACK_TCP not in lab.needs]
    assert not undeclared, (
        f'these labs launch ranks or serve on 127.0.0.1 but their lab.toml lacks needs = ["{LOOPBACK_TCP}"]'
    )


def test_needs_is_read_into_the_lab(make_course):
    text = GOOD_TOML.format(id="01-demo").replace("minutes = 10", 'minutes = 10\nneeds = ["loopback-tcp"]')
    declared, plain = discover(make_course({"01-demo": (text, None), "02-demo": (None, None)}))
    assert declared.needs == (LOOPBACK_TCP,) and plain.needs == ()
