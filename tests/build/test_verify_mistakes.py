"""``rocmlab build --verify`` on the classic mistakes a lab lists beside its checks (``@mistake``):
each must fail the check it is listed on and at least one visible test of the student notebook."""

import pytest
from conftest import GOOD_CHECKS

from rocmlab.build.verify import judge_mistake, mistake_notebook, verify_lab
from rocmlab.course.catalog import discover
from rocmlab.errors import LabError
from rocmlab.execution.outcome import Outcome
from rocmlab.harness import Mistake, check, load_checks, mistake, mistakes_of

ADDS_ONE = "def f(x):\n    return x * SCALE + 1\n"  # the visible test f(1) == SCALE fails
OFF_BY_ONE = "def f(x):\n    return x * SCALE if x == 1 else x * SCALE + 1\n"  # passes f(1) == SCALE, fails the check

CHECKS_WITH_MISTAKES = GOOD_CHECKS.replace(
    "from rocmlab.harness import check", "from rocmlab.harness import check, mistake"
).replace(
    '@check("t-1"',
    f"@mistake(en='adds one', zh='加一', code={ADDS_ONE!r})\n@mistake(en='off by one', zh='差一', code={OFF_BY_ONE!r})\n@check(\"t-1\"",
)


def course_with(make_course, checks_text):
    root = make_course()
    (root / "solutions" / "01-demo" / "checks.py").write_text(checks_text, encoding="utf-8")
    return root, discover(root)[0]


def test_mistake_goes_above_check_and_is_listed_in_order():
    @mistake(en="a", zh="甲", code="def g():\n    pass\n")
    @mistake(en="b", zh="乙", code="def g():\n    pass\n")
    @check("t-1", points=1, en="rule", zh="规则")
    def rule(learner, variant):
        pass

    assert [m.rule["en"] for m in mistakes_of([rule.rocmlab_check])] == ["a", "b"]
    assert {m.check for m in rule.rocmlab_mistakes} == {"rule"}
    with pytest.raises(TypeError, match="above @check"):
        mistake(en="c", zh="丙", code="")(lambda learner, variant: None)


def test_the_mistaken_code_follows_the_right_answer_in_its_answer_cell(make_course):
    root, lab = course_with(make_course, CHECKS_WITH_MISTAKES)
    checks = load_checks(lab.checks.read_text(encoding="utf-8"), str(lab.checks))
    nb = mistake_notebook(lab, "en", mistakes_of(checks)[0])
    (answer,) = [c for c in nb.cells if "def f(" in c.source]
    assert answer.source.index("return x * SCALE") < answer.source.index("return x * SCALE + 1")
    assert "### END SOLUTION" in answer.source  # the right answer is still there, redefined after it


@pytest.mark.parametrize(
    "code,why",
    [("def f(x:\n", "does not parse"), ("X = 1\n", "defines no function"), ("def g(x):\n    return x\n", "g is not")],
)
def test_a_broken_listing_is_a_build_error_naming_the_check(make_course, code, why):
    root, lab = course_with(make_course, GOOD_CHECKS)
    with pytest.raises(LabError, match=f"mistake listed on scales.*{why}"):
        mistake_notebook(lab, "en", Mistake("scales", {"en": "x", "zh": "x"}, code))


def outcome(test_error: bool, check_passed: bool) -> Outcome:
    cells = [{"graded": True, "grade_id": "t-1", "executed": True, "error": "AssertionError" if test_error else None}]
    harness = {"checks": [{"grade_id": "t-1", "name": "scales", "passed": check_passed}]}
    return Outcome("failed" if test_error else "passed", 1.0, cells=cells, harness=harness)


def test_judge_mistake():
    item = Mistake("scales", {"en": "wrong", "zh": "错"}, ADDS_ONE)
    verdict, problems = judge_mistake(item, "t-1", outcome(test_error=True, check_passed=False))
    assert verdict.check_failed and verdict.visible_failed == ["t-1"] and problems == []
    _, problems = judge_mistake(item, "t-1", outcome(test_error=False, check_passed=False))
    assert len(problems) == 1 and "passes every visible test" in problems[0]
    _, problems = judge_mistake(item, "t-1", outcome(test_error=True, check_passed=True))
    assert len(problems) == 1 and "did 'pass', not fail" in problems[0]
    _, problems = judge_mistake(item, "t-1", None)  # it never ran: both proofs are missing
    assert len(problems) == 2


@pytest.mark.slow
def test_verify_runs_each_mistake_and_names_the_one_the_visible_tests_miss(make_course, tmp_path, monkeypatch):
    """Four runs of a one-cell notebook (solution, student, two mistakes): about 20 s on two cores."""
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    root, lab = course_with(make_course, CHECKS_WITH_MISTAKES)
    result = verify_lab(root, lab, tmp_path / "out")
    by_rule = {m.rule: m for m in result.mistakes}
    assert by_rule["adds one"].check_failed and by_rule["adds one"].visible_failed == ["t-1"]
    assert by_rule["off by one"].check_failed and by_rule["off by one"].visible_failed == []
    assert not result.ok
    assert result.problems == [
        "mistake 'off by one': passes every visible test, so a learner's self-check says all passed and the grade "
        "takes points: add a visible case that it fails"
    ]


def test_a_mistake_may_redefine_a_coroutine_function():
    """Lab 06's answers are ``async def``: a mistake in one is a mistake like any other."""
    from rocmlab.build.verify import defined_functions

    assert defined_functions("async def call(fn):\n    return await fn()\n\ndef g():\n    pass\n") == ["call", "g"]
