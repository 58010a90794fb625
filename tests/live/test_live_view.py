"""The live page's data: pass rates, the most common failures, hint targeting, levels (issue 34)."""

from __future__ import annotations

from live_fakes import attempt, check

from rocmlab.live.view import exercise_rows, learner_rows, progress, stuck_learners

LAB = "02-hip-kernels"
WRONG_GRID = ("grid too small", "网格太小")
WRONG_SYNC = ("missing __syncthreads", "缺少 __syncthreads")


def class_of_four():
    """ada passes; bo fails `grid` then fixes it; cy fails `grid` (wrong grid) and `reduce`;
    dee fails `grid` the same way, then has a newer attempt still queued."""
    return [
        attempt("ada", LAB, 100, checks=[check("grid", True), check("reduce", True)]),
        attempt("bo", LAB, 100, checks=[check("grid", False, *WRONG_GRID), check("reduce", True)]),
        attempt("bo", LAB, 200, checks=[check("grid", True), check("reduce", True)]),
        attempt("cy", LAB, 150, checks=[check("grid", False, *WRONG_GRID), check("reduce", False, *WRONG_SYNC)]),
        attempt("dee", LAB, 120, checks=[check("grid", False, *WRONG_GRID), check("reduce", True)]),
        attempt("dee", LAB, 300, state="queued"),
    ]


def test_pass_rate_counts_each_learners_latest_graded_attempt():
    rows = {row.grade_id: row for row in exercise_rows(class_of_four())}
    assert (rows["grid"].passed, rows["grid"].graded, rows["grid"].pass_rate) == (2, 4, 0.5)
    assert (rows["reduce"].passed, rows["reduce"].graded, rows["reduce"].pass_rate) == (3, 4, 0.75)


def test_the_most_common_failure_is_the_rules_message_in_both_languages():
    rows = {row.grade_id: row for row in exercise_rows(class_of_four())}
    assert rows["grid"].failures == [("grid too small / 网格太小", 2)]  # bo's fixed failure is not counted
    assert rows["reduce"].failures == [("missing __syncthreads / 缺少 __syncthreads", 1)]


def test_a_failure_without_a_rule_is_counted_as_such():
    attempts = [attempt("ada", LAB, 1, checks=[check("grid", False)])]
    assert exercise_rows(attempts)[0].failures == [("(no rule recorded)", 1)]


def test_a_hint_targets_only_the_learners_whose_latest_graded_attempt_failed():
    attempts = class_of_four()
    assert stuck_learners(attempts, LAB, "grid") == ["cy", "dee"]  # not ada, not bo (fixed it)
    assert stuck_learners(attempts, LAB, "reduce") == ["cy"]
    assert stuck_learners(attempts, "01-rocm-setup", "grid") == []


def test_each_learners_row_has_the_current_lab_the_last_result_and_the_idle_time():
    attempts = class_of_four() + [attempt("ada", "03-attention", 400, state="grading", started_at=410)]
    rows = {row.learner: row for row in learner_rows(attempts, now=500)}
    assert (rows["ada"].lab, rows["ada"].state, rows["ada"].idle_s) == ("03-attention", "grading", 90)
    assert rows["ada"].score is None  # nothing graded in 03 yet
    assert (rows["bo"].score, rows["bo"].max_score, rows["bo"].failed) == (2, 2, [])
    assert (rows["cy"].score, rows["cy"].failed, rows["cy"].idle_s) == (0, ["grid", "reduce"], 347)
    # dee's newest submit is queued: the row shows it, with the score and failures of the last graded one
    assert (rows["dee"].state, rows["dee"].score, rows["dee"].failed, rows["dee"].idle_s) == (
        "queued",
        1,
        ["grid"],
        200,
    )


def test_levels_keep_the_best_score_and_every_exercise_ever_passed():
    attempts = [
        attempt("bo", LAB, 100, checks=[check("grid", True), check("reduce", False)]),
        attempt("bo", LAB, 200, checks=[check("grid", False), check("reduce", False)]),
        attempt("bo", "01-rocm-setup", 50, state="failed"),
        attempt("cy", LAB, 100, checks=[check("grid", True), check("reduce", True)]),
    ]
    labs = {lab.lab: lab for lab in progress(attempts, "bo")}
    assert (labs[LAB].best_score, labs[LAB].max_score, labs[LAB].attempts) == (1, 2, 2)
    assert labs[LAB].passed == ["grid"] and labs[LAB].failed == ["reduce"]
    assert (labs["01-rocm-setup"].best_score, labs["01-rocm-setup"].passed) == (0.0, [])
    assert labs[LAB].graded_at == 103  # the best attempt's, not the latest's


def test_every_learner_of_the_roster_has_a_row_submitted_or_not():
    from live_fakes import attempt, check

    from rocmlab.live.view import learner_rows

    rows = learner_rows([attempt("bo", "01-rocm-setup", 10, checks=[check("a", True)])], 20, roster=["ana", "bo"])
    assert [(r.learner, r.state, r.idle_s) for r in rows] == [("ana", "not submitted", None), ("bo", "graded", 7.0)]
