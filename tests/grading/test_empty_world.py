"""Every lab's hidden checks against learners who answer nothing real (issue 47): a kernel may
answer anything, so a check that compares two values the kernel computed, or holds a rule about
absence ("nothing left over", "[] for an empty table") on empty evidence, gave points to a learner
whose every answer was empty. Each such learner must score no more than the blank learner (whose
every function raises), lab by lab.

A learner who redefines the course helpers (``run_async``, ``retrieve``, a ``Trace``) changes
only what the kernel answers; every answer below is one such a learner can produce (the empty
trace of a ``Trace`` that records nothing, the ``[]`` of a ``run_async`` that runs nothing).
"""

import ast
from pathlib import Path

import pytest

from rocmlab.course.catalog import SMOKE, parse_lab
from rocmlab.harness import Learner, hidden_files, lab_parameters, load_checks, run_checks
from rocmlab.lab.answers import encode, encode_raised

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"
LABS = ["01", "02", "03", "04", "05", "06", "07", "09"]
EMPTY = {"None": None, "[]": [], "{}": {}, "()": (), "''": "", "0": 0, "0.0": 0.0, "False": False, "True": True}


def _arity(expr: str) -> int:
    """The number of items of a request that asks for a tuple literal (0 otherwise)."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return 0
    return len(node.elts) if isinstance(node, ast.Tuple) else 0


class EmptyWorld:
    """A kernel whose every answer is ``value``; asked for a tuple, a tuple of ``value``s (two
    values the kernel computed are then always equal)."""

    def __init__(self, value):
        self.value = value

    def ask(self, request):
        n = _arity(request["expr"])
        return encode((self.value,) * n if n else self.value)


class Blank:
    """The student version as handed out: every answer function raises."""

    def ask(self, request):
        return encode_raised(NotImplementedError())


@pytest.fixture(scope="module", params=LABS)
def lab_checks(request):
    path = next(SOLUTIONS.glob(f"{request.param}-*/checks.py"))
    parameters = lab_parameters(path, parse_lab(path.parent).profile(SMOKE).parameters)
    return path.parent.name, load_checks(path.read_text(encoding="utf-8"), str(path), hidden_files(path), parameters)


def _score(checks, channel, seed=47):
    results = run_checks(checks, Learner(channel), seed)
    return sum(r.points for r in results), [r.name for r in results if r.passed]


def test_an_empty_world_scores_no_more_than_the_blank_learner(lab_checks):
    lab, checks = lab_checks
    blank, _ = _score(checks, Blank())
    assert blank == 0, f"{lab}: the blank learner scores {blank}"
    earned = {}
    for label, value in EMPTY.items():
        for seed in (47, 4747):
            score, passed = _score(checks, EmptyWorld(value), seed)
            if score > blank:
                earned[f"{label} (seed {seed})"] = (score, passed)
    assert earned == {}, f"{lab}: learners that answer nothing earn points: {earned}"


def test_lab06_ranks_retrieval_with_the_labs_own_tokenizer_and_knowledge_base():
    """bm25_retrieval ranks documents in the harness (a learner can redefine ``retrieve``):
    its tokenizer and knowledge base must be the notebook's."""
    from labsource import LabSource

    source = LabSource("06-multi-agent")
    cell = next(c.source for c in source.code_cells if "def tokenize_zh" in c.source)
    names = source.run("import logging\nfrom rocmlab import lab", cell.split("class KeywordIndex")[0])
    path = source.folder / "checks.py"
    namespace = {"HIDDEN_FILES": hidden_files(path)}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # noqa: S102
    kb, kb_tokens = namespace["knowledge_base"]()
    assert kb == names["KB"] and kb_tokens == [names["tokenize_zh"](names["kb_text"](d)) for d in names["KB"]]
    query = "焊缝有气孔，怎么返工？"
    assert namespace["tokenize_zh"](query) == names["tokenize_zh"](query)


def test_lab06_retrieval_is_not_taken_from_a_redefined_retrieve():
    """A learner who redefines the course's ``retrieve`` to name the relevant documents, with a
    BM25 that scores nothing, does not pass "the relevant document ranks in the top 3"."""
    import json

    from rocmlab.lab.answers import evaluate

    path = SOLUTIONS / "06-multi-agent" / "checks.py"
    files = hidden_files(path)
    relevant = [q["relevant"] for q in json.loads(files["retrieval_queries_hidden.json"])]

    class FlatBM25:
        def __init__(self, docs, k1=1.5, b=0.75):
            self.n = len(docs)

        def scores(self, query):
            return [0.0] * self.n

    names = {"BM25": FlatBM25, "KB_TOKENS": [], "retrieve": lambda index, query, k=3: relevant}

    class Forger:
        def ask(self, request):
            return evaluate(request, names)

    checks = [c for c in load_checks(path.read_text(encoding="utf-8"), str(path), files) if c.name == "bm25_retrieval"]
    (result,) = run_checks(checks, Learner(Forger()), 47)
    assert not result.passed and result.detail.startswith("wrong"), result.detail
