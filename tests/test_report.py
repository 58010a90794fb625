import json

from test_results import make_record

from rocmlab.catalog import discover
from rocmlab.report import freshness, order_environments, removal_version, to_html, to_json, to_markdown


def fp(torch):
    return {"packages": {"torch": torch}}


def test_stale_when_newest_environment_lacks_a_passing_run_of_the_current_version(make_course):
    root = make_course({"01-demo": (None, None), "02-other": (None, None)})
    labs = discover(root)
    records = [
        make_record(lab="01-demo", env="cpu-current", fingerprint=fp("2.13.0")),
        make_record(lab="01-demo", env="cpu-previous", status="failed", reason="cell 3: boom", fingerprint=fp("2.9.1")),
        make_record(lab="02-other", env="cpu-previous", fingerprint=fp("2.9.1")),
        make_record(lab="02-other", env="cpu-current", lab_version="0.9.0", fingerprint=fp("2.13.0")),
    ]
    report = freshness(labs, records, matrix_order=[])
    assert report.environments == ["cpu-current", "cpu-previous"]
    rows = {row.lab.id: row for row in report.rows}
    assert not rows["01-demo"].stale
    assert rows["02-other"].stale  # the newest env only ran an old version
    md = to_markdown(report)
    assert "| 01-demo | 1.0.0 | ✅ passed 4s | ❌ failed 4s |" in md
    assert "(v0.9.0)" in md and "⚠️ stale" in md and "cell 3: boom" in md
    data = json.loads(to_json(report))
    assert data["newest"] == "cpu-current"
    assert data["labs"][1]["stale"] is True
    html = to_html(report)
    assert html.startswith("<!doctype html>") and "<style>" in html and "stale" in html


def test_matrix_order_wins_over_torch_version():
    records = [
        make_record(env="rocm-7.14", fingerprint=fp("2.12.0")),
        make_record(env="local", fingerprint=fp("2.13.0")),
    ]
    assert order_environments(records, ["rocm-7.14"]) == ["rocm-7.14", "local"]
    assert order_environments(records, []) == ["local", "rocm-7.14"]


def test_latest_record_per_lab_and_env_is_shown(make_course):
    labs = discover(make_course())
    records = [
        make_record(status="failed", started_at="2026-11-01T00:00:00+00:00"),
        make_record(status="passed", started_at="2026-11-02T00:00:00+00:00"),
    ]
    row = freshness(labs, records, matrix_order=[]).rows[0]
    assert row.cells["local"].status == "passed"
    assert row.last_verified.started_at.startswith("2026-11-02")


def test_removal_version_is_read_from_warning_text():
    assert removal_version("`foo` is deprecated and will be removed in v5.0") == "5.0"
    assert removal_version("will be removed in version 4.50.1 of Transformers") == "4.50.1"
    assert removal_version("just deprecated") is None


def test_stamp_is_idempotent_and_fills_the_readme_markers(make_course):
    from rocmlab.report import README_END, README_START, stamp

    root = make_course()
    (root / "README.md").write_text(
        f"# Course\n\n{README_START}\nold table\n{README_END}\n\nMore text.\n", encoding="utf-8"
    )
    records = [make_record(env="cpu-current", fingerprint=fp("2.13.0"))]
    report = freshness(discover(root), records, matrix_order=[])
    first = stamp(report, records, root)
    assert {p.name for p in first} == {"01-demo.json", "freshness.json", "README.md"}
    readme = (root / "README.md").read_text()
    assert "old table" not in readme and "| 01-demo | 1.0.0 | ✅ passed 4s |" in readme and "More text." in readme
    report_again = freshness(discover(root), records, matrix_order=[])
    assert stamp(report_again, records, root) == []


def test_stamp_refuses_a_readme_without_markers(make_course):
    import pytest

    from rocmlab.report import stamp

    root = make_course()
    (root / "README.md").write_text("# Course\n")
    records = [make_record()]
    with pytest.raises(ValueError, match="add the markers"):
        stamp(freshness(discover(root), records, matrix_order=[]), records, root)


def test_a_lab_that_passed_only_some_repeats_is_flaky_never_fresh(make_course):
    labs = discover(make_course())
    runs = [{"run": 1, "status": "passed"}, {"run": 2, "status": "failed", "reason": "cell 11: rank aborted"}]
    records = [make_record(status="flaky", reason="cell 11: rank aborted", repeats=runs)]
    row = freshness(labs, records, matrix_order=[]).rows[0]
    assert row.verdict == "flaky" and row.stale
    md = to_markdown(freshness(labs, records, matrix_order=[]))
    assert "🔁 flaky" in md and "| fresh |" not in md
