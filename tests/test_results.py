import json

import pytest

from rocmlab import results
from rocmlab.results import Record, read_record, write_record


def make_record(**kw):
    base = dict(
        lab="01-demo",
        lab_version="1.0.0",
        profile="smoke",
        env="local",
        status="passed",
        started_at="2026-11-01T10:00:00+00:00",
        duration_s=3.5,
    )
    base.update(kw)
    return Record(**base)


def test_record_round_trips(tmp_path):
    record = make_record(
        warnings=[{"category": "FutureWarning", "message": "m", "filename": "f", "lineno": 1, "cell": 2}]
    )
    path = tmp_path / "local" / "01-demo.json"
    write_record(record, path)
    assert read_record(path) == record
    data = json.loads(path.read_text())
    assert data["schema"] == 1 and data["status"] == "passed"


def test_unknown_status_is_refused():
    with pytest.raises(ValueError, match="status must be one of"):
        make_record(status="green")


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not a readable JSON result record"),
        ("[]", "expected a JSON object"),
        ('{"schema": 99}', "field schema: expected 1"),
        ('{"schema": 1, "lab": "x"}', "missing field lab_version"),
    ],
)
def test_malformed_records_name_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError) as err:
        read_record(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_atomic_write_keeps_the_old_file_when_serialisation_fails(tmp_path):
    path = tmp_path / "r.json"
    results.write_json_atomic(path, {"ok": 1})
    with pytest.raises(TypeError):
        results.write_json_atomic(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_fingerprint_names_the_stack(monkeypatch, tmp_path):
    info = results.fingerprint()
    assert info["python"].count(".") == 2
    assert {"torch", "transformers", "peft", "nbgrader", "papermill"} <= set(info["packages"])
    assert info["hip"] is None or isinstance(info["hip"], str)
    assert isinstance(info["gpus"], list)
