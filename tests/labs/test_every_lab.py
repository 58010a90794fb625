"""The rules every lab of solutions/ must satisfy: sources valid, labs/ in step, every graded test
proven by execution, a row in the README's table, and what the hub's image and profiles need of it."""

import functools
import re
import tomllib
from pathlib import Path

import pytest
from prose_numbers import prose_numbers
from test_hub_helm import SINGLEUSER, dockerfile_stages

from rocmlab.build.assignments import drift
from rocmlab.build.verify import mistake_notebook, verify_lab
from rocmlab.course import lab_table
from rocmlab.course.catalog import discover
from rocmlab.course.notebooks import solution_notebook
from rocmlab.course.source import read_notebook
from rocmlab.grading.cells import cell_points
from rocmlab.harness import lab_checks, mistakes_of
from rocmlab.sandbox.limits import choose_backend, fork_server_applies, is_root

ROOT = Path(__file__).resolve().parents[2]
LABS = discover(ROOT)
BY_ID = {lab.id: lab for lab in LABS}


@functools.cache
def _solution_notebook(lab_id: str, lang: str):
    """A lab's solution notebook in ``lang``, read once for this file's tests: they only read it
    (jupytext parses lab.py for each, 2-4 times per lab and language here)."""
    return solution_notebook(BY_ID[lab_id], lang)


def notebook(lab, lang):
    return _solution_notebook(lab.id, lang)


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


@pytest.mark.parametrize(
    "lab", [lab for lab in LABS if lab.profile("smoke").requires.course_model], ids=lambda lab: lab.id
)
def test_every_lab_that_needs_the_course_model_says_how_long_it_waits_for_it(lab):
    """Issue 53: a learner without a built model waited minutes on a cell whose text did not say so."""
    for lang in ("zh", "en"):
        markdown = (c.source for c in notebook(lab, lang).cells if c.cell_type == "markdown")
        prose = " ".join(" ".join(markdown).split())  # a wrapped line is a space
        assert "rocmlab assets build-model" in prose and "ROCMLAB_CACHE" in prose, f"{lab.id} [{lang}]"
        took = r"3–5\s*minutes" if lang == "en" else r"3–5\s*分钟"  # the text may wrap between them
        assert re.search(took, prose), f"{lab.id} [{lang}]: how long the build takes"


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_every_test_cell_is_graded_by_checks_that_add_up_to_its_points(lab):
    checks = lab_checks(lab.checks, cell_points(notebook(lab, "en")))
    assert len({c.name for c in checks}) == len(checks), f"{lab.id}: two checks share a name"


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_every_listed_mistake_redefines_an_answer_function(lab):
    """What ``build --verify`` runs for each @mistake builds (the run itself is the slow test below)."""
    checks = lab_checks(lab.checks, cell_points(notebook(lab, "en")))
    for item in mistakes_of(checks):
        assert item.rule["en"].strip() and item.rule["zh"].strip(), f"{lab.id}: {item.check}: a mistake needs zh and en"
        mistake_notebook(lab, "zh", item)


@pytest.mark.slow
def test_generated_labs_match_the_sources():
    assert drift(ROOT, LABS, ["zh", "en"], ROOT / "labs") == []


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_zh_solution_passes_and_student_version_fails_every_graded_test(lab, tmp_path, monkeypatch):
    """``rocmlab build --verify``, which grades the zh solution and the built student version as
    ``rocmlab grade`` grades a class (issue 47: one grading path): here as root, bubblewrap with
    kernels forked from a zygote, each learner as a grader user in its own work folder. The
    solution scores full marks and raises nowhere; the student version scores its blank score (0)
    and fails every visible test; every hidden check tells them apart. The other backends grade
    the same class in tests/grading/test_grade_references.py."""
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    # The listed mistakes' full runs (one notebook run each) are left to `rocmlab build --verify`: CI's budget has no
    # room for them. CI proves each in process instead (tests/labs/test_lab08.py, test_lab10.py), and the machinery
    # on a small lab (tests/build/test_verify_mistakes.py).
    result = verify_lab(ROOT, lab, tmp_path / "out", lang="zh", mistakes=False)
    assert result.tests, f"{lab.id}: no graded tests"
    assert result.ok, "\n".join(result.problems)
    assert result.sandbox["backend"] == choose_backend(None)
    assert result.sandbox["forked_kernels"] == fork_server_applies(result.sandbox["backend"], is_root())
    (score, max_score), (blank, _) = result.scores["solution"], result.scores["student"]
    assert score == max_score > 0 and blank == 0, result.scores


PROSE_NUMBERS = Path(__file__).with_name("prose_numbers.toml")
KINDS = ("cited", "text", "derived", "recorded", "asserted")


def stated_numbers(lab) -> dict[str, str]:
    """Each number the lab's markdown states (both languages) -> where, for the message."""
    found = {}
    for lang in ("en", "zh"):
        for index, cell in enumerate(notebook(lab, lang).cells):
            if cell.cell_type == "markdown":
                for number in prose_numbers(cell.source):
                    found.setdefault(number, f"{lang} markdown cell {index + 1}: {cell.source[:60]!r}")
    return found


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_no_measured_number_is_typed_into_prose(lab):
    """A number the run measures is printed by the run or asserted by the lab's test; every other number in
    the prose says what it is in tests/labs/prose_numbers.toml (a cited, textual, derived or recorded figure)."""
    allowed = tomllib.loads(PROSE_NUMBERS.read_text(encoding="utf-8")).get(lab.id, {})
    assert set(allowed) <= set(KINDS), f"{lab.id}: unknown kinds {set(allowed) - set(KINDS)}"
    listed = {n for kind in KINDS for n in allowed.get(kind, [])}
    stated = stated_numbers(lab)
    unlisted = {n: where for n, where in stated.items() if n not in listed}
    assert not unlisted, (
        f"{lab.id}: numbers typed into prose that prose_numbers.toml does not account for: {unlisted}. A number "
        "the run produces is printed by a code cell or asserted by the lab's test ('asserted'); otherwise say "
        "what it is (cited, text, derived, recorded)"
    )
    assert not listed - set(stated), (
        f"{lab.id}: prose_numbers.toml lists numbers the prose no longer states: {sorted(listed - set(stated))}"
    )
    for number, test in allowed.get("asserted", {}).items():
        path, _, function = test.partition("::")
        source = (Path(__file__).parent / path).read_text(encoding="utf-8")
        assert f"def {function}(" in source, f"{lab.id}: {number} is asserted by {test}, which does not exist"


def test_prose_numbers_reads_what_a_stale_sentence_would_state():
    """Lab 08 1.3.0's stale sentences, and what is not a prose number."""
    assert prose_numbers("all five formats give a perplexity near 116, within 0.5 % of each other") == ["0.5", "116"]
    assert prose_numbers("JSON 有效率 fp32 为 0.92，困惑度都在 116 左右，约 336 GB/s") == ["0.92", "116", "336"]
    assert prose_numbers("about 12 ms at C = 12; 4 ms → 12 ms") == ["12", "4"]
    not_numbers = "`x = 0.5`, [spec](https://a.b/1.0), arXiv:2206.02915, Qwen2.5-0.5B, torch 2.13.0, {{version}}"
    assert prose_numbers(not_numbers) == []


def test_prose_numbers_reads_a_whole_number_with_a_unit_and_no_bare_count():
    """A measured figure has a unit (283 s, 60 %, 192 GB, 4×, 5 分钟); a section number, a year, a count of
    things or a model size has none and floods nothing."""
    measured = (
        "the build took 283 s, 60 % busy, 192 GB, 336 GB/s, 16 B per parameter, 4× faster, 等了 5 分钟，占 30%的时间"
    )
    assert prose_numbers(measured) == ["283", "60", "192", "336", "16", "4", "5", "30"]
    counts = "section 6, in 2024, 8 GPUs, a 7B model, 3 UTF-8 bytes, 7 links, exercise 5, 4 × 256 slots, step 400"
    assert prose_numbers(counts) == []
