"""A class graded in 3 shards and merged equals the same class graded at once: score for score,
flag for flag, test for test, in the gradebook, grades.csv, summary.json, the feedback pages and
the class page's CSV files. Real grading (sandbox, nbgrader) through the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import classroom
import pytest

from rocmlab.cli import main
from rocmlab.grading import analytics

pytestmark = pytest.mark.slow

SHARDS = 3
FLAGGED = ("rewrites_test", "deletes_test", "invalid_json", "other_lab", "old_version", "exits_kernel")


def grade(*argv) -> None:
    assert main(["--root", str(classroom.COURSE), "grade", *map(str, argv)]) == 0


def learners(out: Path) -> dict:
    """Each learner's summary entry without its run time (the one field that depends on the machine)."""
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return {s["student"]: {k: v for k, v in s.items() if k != "duration_s"} for s in summary["students"]}


def gradebook(out: Path) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gb:
        return {
            s.student.id: (s.score, sorted((g.name, g.score) for nb in s.notebooks for g in nb.grades))
            for s in gb.assignment_submissions(classroom.LAB)
        }


def rows(path: Path, drop: str | None = None) -> list:
    with path.open(encoding="utf-8", newline="") as fh:
        return sorted(tuple(v for k, v in row.items() if k != drop) for row in csv.DictReader(fh))


def files(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_three_shards_merged_equal_one_run(tmp_path):
    base = classroom.student_notebook(classroom.COURSE, tmp_path)
    adversarial = classroom.adversarial_class(base, secrets={}, port=9)
    entries = {**classroom.regular_class(base), **{name: adversarial[name] for name in FLAGGED}}
    classroom.write_class(entries, tmp_path / "course" / "submitted", layout="nbgrader")
    submissions = tmp_path / "course"

    whole = tmp_path / "whole"
    grade(classroom.LAB, "--submissions", submissions, "--jobs", 2, "--out", whole)
    shard_outs = [tmp_path / f"shard-{k}" for k in range(1, SHARDS + 1)]
    for k, out in enumerate(shard_outs, start=1):  # the whole run's seeds: the same inputs for each learner
        seeds = ("--seeds", whole / "summary.json")
        grade(
            classroom.LAB, "--submissions", submissions, "--shard", f"{k}/{SHARDS}", "--jobs", 2, *seeds, "--out", out
        )
    merged = tmp_path / "merged"
    grade("merge", *shard_outs, "--out", merged)

    # every shard graded a part, the parts are disjoint and make the class
    parts = [set(learners(out)) for out in shard_outs]
    assert all(parts) and sum(map(len, parts)) == len(entries) == len(set().union(*parts))

    expected = learners(whole)
    assert set(expected) == set(entries)
    assert {name: (s["score"], set(s["flags"])) for name, s in expected.items()} == {
        name: (score, flags) for name, (_nb, score, flags) in entries.items()
    }
    assert learners(merged) == expected  # score, flags, reasons, tests and messages, learner by learner
    whole_summary, merged_summary = (json.loads((o / "summary.json").read_text()) for o in (whole, merged))
    assert merged_summary["flag_counts"] == whole_summary["flag_counts"]
    assert [s["student"] for s in merged_summary["students"]] == [s["student"] for s in whole_summary["students"]]
    assert (merged_summary["lab"], merged_summary["version"]) == (whole_summary["lab"], whole_summary["version"])

    assert gradebook(merged) == gradebook(whole)
    assert rows(merged / "grades.csv") == rows(whole / "grades.csv")
    assert files(merged / "feedback") == files(whole / "feedback")
    for name in ("exercises", "failures"):
        csv_file = analytics.CSV_FILES[name]
        assert (merged / csv_file).read_bytes() == (whole / csv_file).read_bytes(), csv_file
    learners_csv = analytics.CSV_FILES["learners"]
    assert rows(merged / learners_csv, drop="duration_s") == rows(whole / learners_csv, drop="duration_s")
    assert (merged / analytics.PAGE).is_file()


def test_merging_again_keeps_one_gradebook_entry_per_learner_and_stages_feedback(tmp_path):
    base = classroom.student_notebook(classroom.COURSE, tmp_path)
    entries = {k: v for k, v in classroom.regular_class(base).items() if k in ("correct", "partial")}
    classroom.write_class(entries, tmp_path / "course" / "submitted", layout="nbgrader")
    outs = [tmp_path / "s1", tmp_path / "s2"]
    for k, out in enumerate(outs, start=1):
        grade(classroom.LAB, "--submissions", tmp_path / "course", "--shard", f"{k}/2", "--out", out)
    grade("merge", *outs, "--out", tmp_path / "merged")
    first = gradebook(tmp_path / "merged")
    course = tmp_path / "course"
    for name in entries:  # what nbgrader collect leaves beside a submission
        (course / "submitted" / name / classroom.LAB / "timestamp.txt").write_text("2026-12-01 10:00:00 UTC\n")
    grade("merge", *outs, "--out", tmp_path / "merged", "--feedback-to", course)
    assert gradebook(tmp_path / "merged") == first
    for name in entries:
        staged = course / "feedback" / name / classroom.LAB
        page = tmp_path / "merged" / "feedback" / name / f"{classroom.LAB}.html"
        assert (staged / f"{classroom.LAB}.html").read_bytes() == page.read_bytes()
        assert (staged / "timestamp.txt").is_file()
    assert {name: score for name, (score, _grades) in first.items()} == {"correct": 5.0, "partial": 2.0}


def test_merge_fails_when_a_shard_no_longer_matches_its_notebooks(tmp_path, capsys):
    base = classroom.student_notebook(classroom.COURSE, tmp_path)
    entries = {k: v for k, v in classroom.regular_class(base).items() if k in ("correct", "partial")}
    classroom.write_class(entries, tmp_path / "course" / "submitted", layout="nbgrader")
    outs = [tmp_path / "s1", tmp_path / "s2"]
    for k, out in enumerate(outs, start=1):
        grade(classroom.LAB, "--submissions", tmp_path / "course", "--shard", f"{k}/2", "--out", out)
    summary_file = outs[0] / "summary.json"
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    summary["students"][0]["score"] = 4.0  # as if the executed notebook had been swapped since
    summary_file.write_text(json.dumps(summary), encoding="utf-8")
    argv = ["--root", str(classroom.COURSE), "grade", "merge", *map(str, outs), "--out", str(tmp_path / "merged")]
    assert main(argv) == 1
    assert "scored 4/5 in the shard, 5/5 in the merged gradebook" in capsys.readouterr().err
    assert not (tmp_path / "merged" / "summary.json").exists()
