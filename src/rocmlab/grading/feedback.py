"""A learner's feedback page, and staging it for nbgrader's release_feedback.

A rule shows its text in the learner's language and, when its check said so, a learner-safe
detail: the part of a failed check's message that a check writes first as ``[[learner: ...]]``
(a format, a shape, a dtype: never an input; the rest of the message stays the instructor's).
A rule about an error raised that does not count yet, because no value rule of its cell passed,
is marked as not counted rather than as failed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ..course.catalog import Lab
from ..harness import ERRORS_ALONE
from ..pages import render_page
from .self_check import is_optional
from .submissions import StudentResult

TEXT = {
    "en": {
        "title": "Feedback",
        "score": "Score",
        "test": "Test",
        "points": "Points",
        "result": "Result",
        "message": "Message",
        "pass": "passed",
        "fail": "failed",
        "rules": "Rules checked",
        "how": "Each rule was checked on inputs drawn for you. A rule about an error raised counts once "
        "the exercise also returns right answers on valid inputs, and a rule about an empty case "
        "(nothing left, an empty input) once the rule it qualifies holds.",
        "pending": "not counted yet: it counts once the exercise returns right answers on valid inputs",
        "optional": "optional",
        "core": "core",
        "notes": "Notes from the grader",
        "invalid": "This submission could not be graded.",
        "not_graded": "not graded: the grader failed on this rule, not your code; your instructor will regrade",
        "flags": {
            "invalid": "not a gradable notebook of this lab",
            "wrong_lab": "a notebook of another lab",
            "old_version": "made from an older version of the lab",
            "tampered": "test cells were changed: the original tests were used",
            "timeout": "a time limit was reached",
            "crashed": "the notebook's kernel stopped",
            "output_truncated": "too much output: it was cut",
            "memory_limit": "the memory limit was reached",
            "network": "a network connection was refused",
        },
    },
    "zh": {
        "title": "评分反馈",
        "score": "得分",
        "test": "测试",
        "points": "分数",
        "result": "结果",
        "message": "信息",
        "pass": "通过",
        "fail": "未通过",
        "rules": "检查的规则",
        "how": "每条规则都用为你单独生成的输入检查。关于抛出错误的规则，只有在该练习对有效输入也返回正确结果时才计分；"
        "关于空情形的规则（不留任务、空输入），只有在它所限定的规则成立时才计分。",
        "pending": "暂不计分：该练习对有效输入返回正确结果后才计分",
        "optional": "选做",
        "core": "核心",
        "notes": "评分说明",
        "invalid": "该提交无法评分。",
        "not_graded": "未评分：出错的是评分程序而不是你的代码，老师会重新评分",
        "flags": {
            "invalid": "不是本实验可评分的笔记本",
            "wrong_lab": "是另一个实验的笔记本",
            "old_version": "基于旧版本的实验",
            "tampered": "测试单元被改动：已使用原始测试",
            "timeout": "超出时间限制",
            "crashed": "笔记本内核已终止",
            "output_truncated": "输出过多，已被截断",
            "memory_limit": "超出内存限制",
            "network": "网络连接被拒绝（评分时离线）",
        },
    },
}


LEARNER_DETAIL = re.compile(r"wrong: \[\[learner: ([^\[\]\n]{1,240})\]\]")
ZH_DETAIL = "|zh|"  # between a learner detail's English and its Chinese (check_compare.learner_says)


def learner_detail(detail: str, lang: str = "en") -> str:
    """The learner-safe part of a check's detail (what it wrote first as ``[[learner: ...]]``), in
    ``lang`` where the check wrote that language too (``en |zh| zh``), else as written; or ""."""
    match = LEARNER_DETAIL.match(detail or "")
    if not match:
        return ""
    en, _, zh = match.group(1).partition(ZH_DETAIL)
    return (zh if lang == "zh" and zh.strip() else en).strip()


def _rule_row(rule: dict, lang: str) -> dict:
    detail = rule.get("detail", "")
    return {
        "passed": rule["passed"],
        "not_graded": bool(rule.get("grading_error")),
        "pending": not rule["passed"] and detail == ERRORS_ALONE,
        "text": rule["rule"][lang],
        "shown": "" if rule["passed"] else learner_detail(detail, lang),
        "points": f"{rule['points']:g}/{rule['max_points']:g}",
    }


def _split(result: StudentResult) -> dict | None:
    """The core's and the optional exercises' points, when the lab has optional (stretch) exercises."""
    optional = [t for t in result.tests if is_optional(t.grade_id)]
    if not optional:
        return None
    core = [t for t in result.tests if not is_optional(t.grade_id)]

    def score(tests):
        return f"{sum(t.points for t in tests):g} / {sum(t.max_points for t in tests):g}"

    return {"core": score(core), "optional": score(optional)}


def feedback_html(lab: Lab, result: StudentResult) -> str:
    """The learner's page, from ``templates/feedback.html.j2``."""
    t = TEXT[result.lang]
    rows = [
        {
            "grade_id": test.grade_id,
            "optional": is_optional(test.grade_id),
            "passed": test.passed,
            "points": f"{test.points:g}",
            "max_points": f"{test.max_points:g}",
            "rules": [_rule_row(r, result.lang) for r in test.rules],
        }
        for test in result.tests
    ]
    return render_page(
        "feedback.html.j2",
        lang=result.lang,
        t=t,
        title=lab.title[result.lang],
        lab_id=lab.id,
        version=lab.version,
        student=result.student,
        score=f"{result.score:g}",
        split=_split(result),
        max_score=f"{result.max_score:g}",
        invalid=result.status == "invalid",
        rows=rows,
        flags=[t["flags"][f] for f in result.flags],
    )


def stage_feedback(course_root: Path, lab_id: str, grades: Path) -> list[str]:
    """Put ``rocmlab grade``'s feedback (``<grades>/feedback/<student>/<lab>.html``) where nbgrader's
    release_feedback takes it: ``<course_root>/feedback/<student>/<lab>/<lab>.html`` beside the
    timestamp and secret of the collected submission. Returns the learners staged."""
    staged = []
    for html_file in sorted((grades / "feedback").glob(f"*/{lab_id}.html")):
        student = html_file.parent.name
        submitted = course_root / "submitted" / student / lab_id
        if not (submitted / "timestamp.txt").is_file():
            continue
        dest = course_root / "feedback" / student / lab_id
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html_file, dest / f"{lab_id}.html")
        for name in ("timestamp.txt", "submission_secret.txt"):
            if (submitted / name).is_file():
                shutil.copyfile(submitted / name, dest / name)
        staged.append(student)
    return staged
