"""Grading in shards (rocmlab.grading.shards): the partition, and what merge refuses. The real
3-shard run against the unsharded one is test_grade_shards_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmlab.cli import main
from rocmlab.errors import InputError
from rocmlab.grading.shards import Shard, _merged_summary, parse_shard, read_shards, select_shard, shard_record
from rocmlab.grading.submissions import Submission


def make_class(names):
    return [Submission(name, Path(f"/class/{name}.ipynb")) for name in names]


@pytest.mark.parametrize("text, shard", [("1/1", Shard(1, 1)), ("2/3", Shard(2, 3)), (" 10/10 ", Shard(10, 10))])
def test_a_shard_is_k_of_n(text, shard):
    assert parse_shard(text) == shard


@pytest.mark.parametrize("text", ["0/3", "4/3", "1", "a/b", "1/0", "-1/3", "1/3/4"])
def test_a_bad_shard_is_bad_input(text):
    with pytest.raises(InputError, match=r"--shard: expected K/N with 1 <= K <= N"):
        parse_shard(text)


@pytest.mark.parametrize("learners, count", [(7, 3), (200, 8), (2, 3), (1, 1)])
def test_the_shards_are_disjoint_balanced_and_cover_the_class(learners, count):
    everyone = make_class([f"learner{i:03d}" for i in range(learners)])
    parts = [select_shard(everyone, Shard(k, count)) for k in range(1, count + 1)]
    names = [sub.student for part in parts for sub in part]
    assert sorted(names) == sorted(sub.student for sub in everyone)
    assert len(names) == len(set(names))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_the_partition_does_not_depend_on_the_listing_order():
    names = ["zoe", "ada", "mia", "bob", "kai"]
    forward, backward = make_class(names), make_class(list(reversed(names)))
    for k in (1, 2):
        assert [s.student for s in select_shard(forward, Shard(k, 2))] == [
            s.student for s in select_shard(backward, Shard(k, 2))
        ]
    assert [s.student for s in select_shard(forward, Shard(1, 2))] == ["ada", "kai", "zoe"]


def write_shard(out: Path, part: Shard, students: list[str], everyone: list[str], **fields) -> Path:
    summary = {
        "lab": "01-grade",
        "version": "1.1.0",
        "profile": "smoke",
        "graded_at": "2026-12-01T10:00:00+00:00",
        "students": [{"student": s, "status": "graded", "score": 1.0, "max_score": 5.0} for s in students],
        "shard": shard_record(part, make_class(everyone)),
        **fields,
    }
    out.mkdir(parents=True)
    (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return out


def test_merge_reads_every_shard_once(tmp_path):
    everyone = ["ada", "bob", "cy"]
    outs = [write_shard(tmp_path / str(k), Shard(k, 2), s, everyone) for k, s in ((2, ["bob"]), (1, ["ada", "cy"]))]
    assert [summary["shard"]["index"] for _out, summary in read_shards(outs)] == [1, 2]


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", r"expected shards 1..3 once each; missing \[3\]"),
        ("repeated", r"missing \[3\], repeated \[2\]"),
        ("other class", "saw another class than"),
        ("other version", "field version: '1.0.0', but"),
        ("not a shard", "field shard: missing; grade with --shard K/N"),
        ("lost learner", r"the shards hold 2 learner\(s\) \(2 distinct\), the class has 3"),
    ],
)
def test_merge_refuses_shards_that_do_not_make_one_class(tmp_path, case, message):
    everyone = ["ada", "bob", "cy"]
    outs = [
        write_shard(tmp_path / "1", Shard(1, 3), ["ada"], everyone),
        write_shard(tmp_path / "2", Shard(2, 3), ["bob"], everyone),
    ]
    if case == "repeated":
        outs.append(write_shard(tmp_path / "2b", Shard(2, 3), ["bob"], everyone))
    elif case == "other class":
        outs.append(write_shard(tmp_path / "3", Shard(3, 3), ["cy"], [*everyone, "dan"]))
    elif case == "other version":
        outs.append(write_shard(tmp_path / "3", Shard(3, 3), ["cy"], everyone, version="1.0.0"))
    elif case == "not a shard":
        outs.append(write_shard(tmp_path / "3", Shard(3, 3), ["cy"], everyone, shard=None))
    elif case == "lost learner":
        outs.append(write_shard(tmp_path / "3", Shard(3, 3), [], everyone))
    with pytest.raises(InputError, match=message):
        read_shards(outs)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["grade", "merge", "{tmp}/a", "{tmp}/b"], "merge: --out DIR"),
        (
            ["grade", "merge", "{tmp}/a", "--out", "{tmp}/m", "--shard", "1/2"],
            "--submissions and --shard belong to grading",
        ),
        (["grade", "merge", "--out", "{tmp}/m"], "merge: expected the output folders of the shards"),
        (["grade", "merge", "{tmp}/a", "--out", "{tmp}/a"], "is one of the shards"),
        (["grade", "01"], "expected `rocmlab grade LAB --submissions DIR`"),
        (["grade", "01", "{tmp}/a", "--submissions", "{tmp}"], "OUT folders only with `merge`"),
        (["grade", "01", "--submissions", "{tmp}", "--shard", "3/2"], "--shard: expected K/N"),
        (["grade", "merge", "{tmp}/nothing", "--out", "{tmp}/m"], "nothing/summary.json: not a readable summary"),
    ],
)
def test_cli_bad_input_exits_2(tmp_path, capsys, argv, message):
    import classroom

    argv = ["--root", str(classroom.COURSE), *(word.replace("{tmp}", str(tmp_path)) for word in argv)]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_shard_without_learners_still_writes_its_summary(tmp_path, capsys):
    import classroom

    for name in ("ada", "bob"):
        (tmp_path / "class" / f"{name}.ipynb").parent.mkdir(exist_ok=True)
        (tmp_path / "class" / f"{name}.ipynb").write_text("{}", encoding="utf-8")
    out = tmp_path / "shard-3"
    argv = ["--root", str(classroom.COURSE), "grade", "01", "--submissions", str(tmp_path / "class")]
    assert main([*argv, "--shard", "3/3", "--out", str(out)]) == 0
    assert "no learner of the 2 falls in this shard" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["students"] == [] and (summary["lab"], summary["version"]) == ("01-grade", "1.1.0")
    assert summary["shard"] == shard_record(Shard(3, 3), make_class(["ada", "bob"]))
    others = [write_shard(tmp_path / str(k), Shard(k, 3), [s], ["ada", "bob"]) for k, s in ((1, "ada"), (2, "bob"))]
    assert len(read_shards([*others, out])) == 3


def test_the_merged_summary_keeps_every_shards_grading_errors(tmp_path):
    """A check that failed itself in any shard stays on the merged class page, not only the first shard's."""
    everyone = ["ada", "bob", "cy"]
    failed = {"grade_id": "t-1", "name": "scales", "passed": False, "error": "GradingError: the reference raised"}
    fine = {"grade_id": "t-1", "name": "scales", "passed": True}
    outs = [write_shard(tmp_path / str(k), Shard(k, 2), s, everyone) for k, s in ((1, ["ada", "cy"]), (2, ["bob"]))]
    shards = read_shards(outs)
    learners = [entry for _out, summary in shards for entry in summary["students"]]
    checks = {"ada": [fine], "bob": [failed], "cy": [dict(failed, error="GradingError: its temp folder")]}
    for entry in learners:
        entry["checks"] = checks[entry["student"]]
    merged = _merged_summary(shards, learners, f"sqlite:///{tmp_path / 'gradebook.db'}")
    assert merged["grading_errors"] == [
        {"student": "bob", "grade_id": "t-1", "check": "scales", "error": "GradingError: the reference raised"},
        {"student": "cy", "grade_id": "t-1", "check": "scales", "error": "GradingError: its temp folder"},
    ]
