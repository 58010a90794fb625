"""The rules every lab of solutions/ must satisfy: sources valid, labs/ in step, every graded test
proven by execution, a row in the README's table, and what the hub's image and profiles need of it."""

import re
from pathlib import Path

import pytest
from test_hub_helm import SINGLEUSER, dockerfile_stages

from rocmlab.build.assignments import drift
from rocmlab.build.verify import mistake_notebook, verify_lab
from rocmlab.course import lab_table
from rocmlab.course.catalog import discover
from rocmlab.course.notebooks import solution_notebook
from rocmlab.course.source import read_notebook
from rocmlab.execution.run import local_target
from rocmlab.grading.cells import cell_points
from rocmlab.harness import lab_checks, mistakes_of

ROOT = Path(__file__).resolve().parents[2]
LABS = discover(ROOT)


def test_every_lab_source_is_valid():
    assert LABS, "no labs under solutions/"
    for lab in LABS:
        read_notebook(lab)
        assert (lab.folder / "CHANGELOG.md").is_file(), f"{lab.id}: missing CHANGELOG.md"
        assert lab.version in (lab.folder / "CHANGELOG.md").read_text(), f"{lab.id}: CHANGELOG.md lacks {lab.version}"


def test_every_lab_that_loads_the_course_model_declares_it():
    needing = sorted(lab.id[:2] for lab in LABS if lab.profile("smoke").requires.course_model)
    assert needing == ["02", "03", "05", "06", "07", "08", "09", "10"]


def test_the_readme_table_is_in_step_with_the_labs():
    table = lab_table.readme_table(ROOT, LABS)
    assert table is not None and table.in_step, "run: rocmlab build"


def test_every_lab_has_each_profile_the_hub_offers():
    for lab in LABS:
        for entry in SINGLEUSER["profileList"]:
            name = entry["kubespawner_override"]["environment"]["ROCMLAB_PROFILE"]
            assert name in lab.profiles, f"{lab.id}/lab.toml has no [profiles.{name}] (profile {entry['slug']})"


def test_the_hub_image_holds_every_model_the_gpu_profiles_name():
    """Pods run offline: each real MODEL of a [profiles.gpu] is fetched into the image at build time."""
    named = {
        lab.profile("gpu").params["MODEL"]
        for lab in LABS
        if "gpu" in lab.profiles and "MODEL" in lab.profile("gpu").params
    } - {"tiny-qwen-zh"}
    learner = dockerfile_stages()["learner"][1]
    fetched = re.search(r'^ARG GPU_MODELS="([^"]*)"$', learner, re.MULTILINE)
    assert fetched, "the learner stage needs ARG GPU_MODELS"
    assert named <= set(fetched.group(1).split()), (
        f"not fetched into the image: {named - set(fetched.group(1).split())}"
    )
    assert 'rocmlab assets fetch "$model"' in learner and "HF_HUB_OFFLINE=1" in learner


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_every_test_cell_is_graded_by_checks_that_add_up_to_its_points(lab):
    checks = lab_checks(lab.checks, cell_points(solution_notebook(lab, "en")))
    assert len({c.name for c in checks}) == len(checks), f"{lab.id}: two checks share a name"


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_every_listed_mistake_redefines_an_answer_function(lab):
    """What ``build --verify`` runs for each @mistake builds (the run itself is the slow test below)."""
    checks = lab_checks(lab.checks, cell_points(solution_notebook(lab, "en")))
    for item in mistakes_of(checks):
        assert item.rule["en"].strip() and item.rule["zh"].strip(), f"{lab.id}: {item.check}: a mistake needs zh and en"
        mistake_notebook(lab, "zh", item)


@pytest.mark.slow
def test_generated_labs_match_the_sources():
    assert drift(ROOT, LABS, ["zh", "en"], ROOT / "labs") == []


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_zh_solution_passes_and_student_version_fails_every_graded_test(lab, tmp_path, monkeypatch):
    """``rocmlab build --verify`` as a learner's notebook runs: the zh notebook alone (with its public
    data) in an empty folder outside the repository, no ROCMLAB_ROOT. Once, in zh: both languages
    run the same code cells (read_notebook refuses a code cell with a language tag), so an en run
    would execute the same code again."""
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    result = verify_lab(ROOT, lab, local_target(), tmp_path / "out", lang="zh")
    assert result.tests, f"{lab.id}: no graded tests"
    assert result.ok, "\n".join(result.problems)
