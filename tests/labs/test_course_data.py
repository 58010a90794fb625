"""The course data the checks compute on the harness's side (issue 47) is the notebook's for an
honest learner, and a rule about absence counts only with the rule it qualifies.

- ``rocmlab.course_data`` gives lab 02's ``PROMPTS``, ``EOS`` and ``PAD`` as the notebook builds
  them with transformers' tokenizer of the course model (``lab.load_model``).
- The constants a checks file keeps beside its checks equal the literal values in ``lab.py``.
- A do-nothing answer that holds a rule about absence ("an empty interval ...", "a rank with no
  labelled token contributes 0", "missing counters give None") earns nothing while the rule it
  qualifies fails (``counts_with``).
"""

import ast
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from in_process import InProcess

from rocmlab import course_data
from rocmlab.course.catalog import SMOKE, parse_lab
from rocmlab.harness import LabConstants, Learner, hidden_files, lab_constants, lab_parameters, load_checks, run_checks
from rocmlab.lab.answers import evaluate

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"
MODEL = "tiny-qwen-zh"


def _folder(lab: str) -> Path:
    return next(SOLUTIONS.glob(f"{lab}-*"))


def _lab_literal(lab: str, name: str):
    """The literal value ``lab.py`` assigns to ``name`` at its top level."""
    tree = ast.parse((_folder(lab) / "lab.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    raise AssertionError(f"lab {lab}: lab.py assigns no {name}")


def _checks_namespace(lab: str) -> dict:
    path = _folder(lab) / "checks.py"
    namespace = {
        "HIDDEN_FILES": hidden_files(path),
        "PARAMETERS": lab_parameters(path),
        "LAB_CONSTANTS": LabConstants(lab_constants(path)),
    }
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # noqa: S102 (our own checks)
    return namespace


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_lab02_prompts_eos_and_pad_are_the_notebooks():
    from rocmlab import lab

    tok = lab.load_model(MODEL, device="cpu")[1]
    prompts = [tok(r["description"] + "\n")["input_ids"] for r in lab.load_qc_reports("eval")]
    assert [list(p) for p in course_data.qc_prompts(MODEL)] == prompts
    assert course_data.eos_id(MODEL) == tok.eos_token_id
    assert course_data.pad_id(MODEL) == tok.pad_token_id
    assert course_data.token_ids(MODEL, "焊缝有气孔") == tok("焊缝有气孔")["input_ids"]


@pytest.mark.parametrize("name", ["CATEGORIES", "LEVER_CHOICES", "METRIC_CHOICES"])
def test_lab09_course_constants_in_the_checks_are_lab_pys(name):
    """One copy: the checks read them from lab.py through the harness (``LAB_CONSTANTS``)."""
    assert _checks_namespace("09")[name] == ast.literal_eval(_lab_literal("09", name))


def test_lab05_elastic_config_beside_the_checks_is_lab_pys():
    """ELASTIC_CFG's literal entries (its seed is the run's SEED, its ckpt a path of the run)."""
    node = _lab_literal("05", "ELASTIC_CFG")
    literal = {
        ast.literal_eval(k): ast.literal_eval(v) for k, v in zip(node.keys, node.values) if isinstance(v, ast.Constant)
    }
    assert _checks_namespace("05")["ELASTIC_FIXED"] == literal


# ---------------------------------------------------------------- absence counts with presence



def _results(lab: str, names: dict, grade_id: str) -> dict:
    path = _folder(lab) / "checks.py"
    parameters = lab_parameters(path, parse_lab(path.parent).profile(SMOKE).parameters)
    checks = [c for c in load_checks(path.read_text(encoding="utf-8"), str(path), hidden_files(path), parameters)]
    return {r.name: r for r in run_checks([c for c in checks if c.grade_id == grade_id], Learner(InProcess(names)), 47)}


def _first_category_is_everything(rows, categories):
    return {**dict.fromkeys(categories, 0.0), next(iter(categories)): 1.0, "other": 0.0}


def _all_missing(rows):
    return {r["Kernel_Name"]: {"dram_gbs": None, "mfma_bf16_tflops": None, "lds_conflicts_per_access": None}
            for r in rows}  # fmt: skip


LAZY = [
    # lab, grade_id, what a do-nothing learner defines, the rule about absence, the rule it qualifies
    ("09", "09-shares-1", {"self_time_shares": _first_category_is_everything}, "shares_keys", "shares_values"),
    ("09", "09-stretch-counters-1", {"counter_metrics": _all_missing}, "counters_missing", "counters_duration"),
    ("10", "10-loss-1", {"rank_loss": lambda *args: 0.0}, "loss_empty_rank", "loss_value"),
    ("02", "02-arrivals-1", {"arrival_times": lambda n, *a, **k: np.zeros(n)}, "arrivals_edges", "arrivals_gamma"),
]


@pytest.mark.parametrize("lab, grade_id, names, absence, presence", LAZY, ids=[row[3] for row in LAZY])
def test_a_rule_about_absence_counts_only_with_the_rule_it_qualifies(lab, grade_id, names, absence, presence):
    results = _results(lab, names, grade_id)
    assert not results[presence].passed, f"the do-nothing {sorted(names)} passes {presence}"
    assert results[absence].points == 0 and results[absence].detail.startswith("counts together with"), (
        f"{absence}: {results[absence].detail or 'passed'}: the do-nothing answer holds it, it must not count alone"
    )
