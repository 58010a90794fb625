"""Grading a class in shards (``rocmlab grade LAB --shard K/N``) and merging them (``rocmlab grade merge``).

**Partition.** The learners found in the submissions folder, sorted by id, are dealt round-robin:
the i-th (from 0) goes to shard ``i % N + 1``. Every shard lists the same folder, so the shards
are disjoint and together the class; each records in its ``summary.json`` (key ``shard``) its
number, the number of shards and a digest of the whole class it saw, so that ``merge`` can tell
when shards saw different folders (a submission collected while they ran) and refuses to merge.

**Merge.** Each shard's output folder holds its executed notebooks
(``course/submitted/<learner>/<lab>/``), feedback pages and summary. ``merge`` builds one
gradebook by handing every executed notebook to nbgrader's autograde again (no learner code
runs: the notebooks are already executed, exactly as the unsharded run hands them over) and
zeroing the ungradable ones; it checks that each learner's score comes out as the shard had it,
then writes ``grades.csv``, ``summary.json``, the feedback pages and the class page, the same
files an unsharded run writes.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import nbformat

from ..course.catalog import discover, select
from ..course.notebooks import solution_notebook
from ..errors import CommandFailed, ExitCode, InputError
from ..execution.results import write_json_atomic
from . import analytics
from .grader import summary_grading_errors

SHARD = re.compile(r"(\d+)/(\d+)")


@dataclass(frozen=True)
class Shard:
    index: int  # from 1
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    match = SHARD.fullmatch(text.strip())
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise InputError(f"--shard: expected K/N with 1 <= K <= N (e.g. 2/3), got {text!r}")
    return Shard(int(match.group(1)), int(match.group(2)))


def class_digest(students: list[str]) -> str:
    ids = "\n".join(sorted(students)).encode("utf-8", errors="surrogateescape")
    return hashlib.sha256(ids).hexdigest()


def select_shard(submissions: list, shard: Shard) -> list:
    """The submissions of ``shard``: every N-th learner by id, starting at the K-th."""
    ordered = sorted(submissions, key=lambda sub: sub.student)
    return [sub for i, sub in enumerate(ordered) if i % shard.count == shard.index - 1]


def shard_record(shard: Shard, everyone: list) -> dict:
    students = [sub.student for sub in everyone]
    return {"index": shard.index, "count": shard.count, "class_size": len(students), "class": class_digest(students)}


def record_shard(out: Path, shard: Shard, everyone: list) -> None:
    """Add the shard's identity to the summary ``rocmlab grade`` wrote in ``out``."""
    summary = analytics.read_summary(out)
    summary["shard"] = shard_record(shard, everyone)
    write_json_atomic(out / "summary.json", summary)


def write_empty_shard(out: Path, lab, profile: str, shard: Shard, everyone: list) -> None:
    """A shard that got no learner (more shards than learners) still says so, for ``merge``."""
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "lab": lab.id,
        "version": lab.version,
        "profile": profile,
        "graded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "students": [],
        "shard": shard_record(shard, everyone),
    }
    write_json_atomic(out / "summary.json", summary)


# ------------------------------------------------------------------ merging


def read_shards(outs: list[Path]) -> list[tuple[Path, dict]]:
    """Each shard's summary, checked: one lab, version and profile, every shard once, one class."""
    if not outs:
        raise InputError("merge: expected the output folders of the shards (OUT ...)")
    shards = []
    for out in outs:
        summary = analytics.read_summary(out)
        record = summary.get("shard")
        if not isinstance(record, dict) or not {"index", "count", "class", "class_size"} <= set(record):
            raise InputError(f"{out / 'summary.json'}: field shard: missing; grade with --shard K/N to merge")
        shards.append((out, summary))
    first = shards[0][1]
    for out, summary in shards:
        for key in ("lab", "version", "profile"):
            if summary.get(key) != first.get(key):
                raise InputError(
                    f"{out / 'summary.json'}: field {key}: {summary.get(key)!r}, but {shards[0][0]} has "
                    f"{first.get(key)!r}: shards of one grading run only"
                )
        if (summary["shard"]["count"], summary["shard"]["class"]) != (first["shard"]["count"], first["shard"]["class"]):
            raise InputError(
                f"{out / 'summary.json'}: field shard: shard {summary['shard']['index']}/{summary['shard']['count']} "
                f"saw another class than {shards[0][0]} (submissions changed while the shards ran?): grade again"
            )
    count = first["shard"]["count"]
    indices = sorted(summary["shard"]["index"] for _out, summary in shards)
    if indices != list(range(1, count + 1)):
        missing = sorted(set(range(1, count + 1)) - set(indices))
        extra = sorted({i for i in indices if indices.count(i) > 1})
        raise InputError(
            f"merge: expected shards 1..{count} once each; missing {missing or 'none'}, repeated {extra or 'none'}"
        )
    students = [entry["student"] for _out, summary in shards for entry in summary["students"]]
    if len(students) != len(set(students)) or len(students) != first["shard"]["class_size"]:
        raise InputError(
            f"merge: the shards hold {len(students)} learner(s) ({len(set(students))} distinct), "
            f"the class has {first['shard']['class_size']}"
        )
    return sorted(shards, key=lambda item: item[1]["shard"]["index"])


def executed_notebook(shard_out: Path, lab_id: str, student: str):
    """The notebook the shard handed to nbgrader, or None (ungradable, or refused by nbgrader)."""
    if not _safe_component(student):
        return None
    path = shard_out / "course" / "submitted" / student / lab_id / f"{lab_id}.ipynb"
    if path.is_symlink() or not path.is_file():
        return None
    return nbformat.read(str(path), as_version=4)


def _safe_component(student: str) -> bool:
    return student not in ("", ".", "..") and "/" not in student and "\0" not in student


def merge(root: Path, outs: list[Path], out: Path, db_url: str | None = None, progress=print) -> dict:
    """Merge the shards' outputs ``outs`` into ``out``; returns the merged summary."""
    from .gradebook import Course
    from .nbgrader_compat import shared_gradebook_engines

    shards = read_shards(outs)
    first = shards[0][1]
    lab = select(discover(root), [first["lab"]])[0]
    if lab.version != first["version"]:
        raise InputError(
            f"{lab.source}: lab {lab.id} is version {lab.version} in {root}, the shards graded {first['version']}: "
            "merge with the checkout the shards used"
        )
    out.mkdir(parents=True, exist_ok=True)
    students = []
    with shared_gradebook_engines():
        course = Course(root, lab, out / "course", db_url)
        course.create_assignment(solution_notebook(lab, "en"))
        learners = sorted(
            ((shard_out, entry) for shard_out, summary in shards for entry in summary["students"]),
            key=lambda item: item[1]["student"],
        )
        for shard_out, entry in learners:  # in order of id, as in the gradebook of an unsharded run with one job
            student = entry["student"]
            graded = entry.get("status") == "graded"
            course.record(student, executed_notebook(shard_out, lab.id, student) if graded else None)
            score, max_score, _grades = course.scores(student)
            if (score, max_score) != (entry["score"], entry["max_score"]):
                raise CommandFailed(
                    f"{shard_out}: learner {student!r} scored {entry['score']:g}/{entry['max_score']:g} in the "
                    f"shard, {score:g}/{max_score:g} in the merged gradebook: the shard's notebooks changed?"
                )
            _copy_feedback(shard_out, out, lab.id, student)
            students.append(entry)
        course.export_csv(out / "grades.csv")
    progress(f"merged {len(shards)} shard(s) of {lab.id}: {len(students)} learner(s)")
    merged = _merged_summary(shards, students, course.db_url)
    write_json_atomic(out / "summary.json", merged)
    analytics.write_class_page(out)
    return merged


def _copy_feedback(shard_out: Path, out: Path, lab_id: str, student: str) -> None:
    if not _safe_component(student):
        return
    page = shard_out / "feedback" / student / f"{lab_id}.html"
    if page.is_file() and not page.is_symlink():
        target = out / "feedback" / student / page.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, target)


def _merged_summary(shards: list[tuple[Path, dict]], students: list[dict], db_url: str) -> dict:
    from sqlalchemy.engine import make_url

    graded = [summary for _out, summary in shards if summary["students"]]
    base = dict(graded[0] if graded else shards[0][1])
    flags = list(dict.fromkeys(flag for summary in graded for flag in summary.get("flag_counts", {})))
    base.pop("shard", None)
    base.update(
        graded_at=max(summary["graded_at"] for _out, summary in shards),
        gradebook=make_url(db_url).render_as_string(hide_password=True),
        students=sorted(students, key=lambda entry: entry["student"]),
        flag_counts={flag: sum(flag in entry.get("flags", []) for entry in students) for flag in flags},
        grading_errors=summary_grading_errors(sorted(students, key=lambda entry: entry["student"])),
        merged_from=[
            {
                "out": str(out),
                "shard": summary["shard"],
                "graded_at": summary["graded_at"],
                "sandbox": summary.get("sandbox"),
            }
            for out, summary in shards
        ],
    )
    return base


def merge_command(
    root: Path, shard_outputs, out: str | None, gradebook: str | None, submissions, shard, feedback_to=None
) -> int:
    """``rocmlab grade merge OUT... --out DIR [--gradebook URL] [--feedback-to COURSE_ROOT]``."""
    if submissions or shard:
        raise InputError("merge: --submissions and --shard belong to grading; merge takes OUT... and --out")
    if not out:
        raise InputError("merge: --out DIR: expected the folder of the merged gradebook and pages")
    folders, target = [Path(folder).resolve() for folder in shard_outputs], Path(out).resolve()
    if target in folders:
        raise InputError(f"merge: --out {target} is one of the shards: merge into a folder of its own")
    merged = merge(root, folders, target, gradebook, progress=lambda msg: print(msg, file=sys.stderr))
    print(
        f"merged {len(folders)} shard(s), {len(merged['students'])} learner(s) of {merged['lab']} "
        f"{merged['version']}: {target / 'grades.csv'}, summary.json, {analytics.PAGE}, feedback/"
    )
    if feedback_to:
        from .feedback import stage_feedback

        staged = stage_feedback(Path(feedback_to).resolve(), merged["lab"], target)
        print(
            f"feedback of {len(staged)} learner(s) staged: release it with `nbgrader release_feedback {merged['lab']}`"
        )
    return ExitCode.OK
