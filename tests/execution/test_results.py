import dataclasses
import json
import time

import pytest
from harness_schema import harness_errors

from rocmlab.execution import results
from rocmlab.execution.results import Record, read_record, write_record
from rocmlab.schemas import schema, validate


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


RECORD = {
    "schema": 1,
    "lab": "01-demo",
    "lab_version": "1.0.0",
    "profile": "smoke",
    "env": "local",
    "status": "passed",
    "started_at": "2026-11-01T10:00:00+00:00",
}


def test_the_schema_describes_every_field_of_the_record_and_no_other():
    """A field added to Record (or to the schema) alone fails here: records are written from the
    dataclass and read through the schema, so both must change together."""
    record_schema = schema("record")
    fields = {f.name: f for f in dataclasses.fields(Record)}
    assert set(record_schema["properties"]) == set(fields)
    assert record_schema["additionalProperties"] is False
    without_default = {
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    assert set(record_schema["required"]) == without_default | {"schema"}


def test_every_record_run_writes_passes_the_schema(tmp_path):
    record = make_record(
        status="flaky",
        reason="cell 3: ValueError: x",
        failing_cell={"index": 3, "ename": "ValueError", "evalue": "x", "source": "f()"},
        warnings=[{"category": "FutureWarning", "message": "m", "filename": "f", "lineno": 1, "cell": 2}],
        fingerprint={"python": "3.11.7"},
        notebook="01-demo.ipynb",
        repeats=[
            {"run": 1, "status": "passed", "duration_s": 1.0, "reason": "", "failing_cell": None, "notebook": ""},
            {"run": 2, "status": "failed", "duration_s": 1.0, "reason": "r", "failing_cell": None, "notebook": "x"},
        ],
    )
    path = tmp_path / "local" / "01-demo.json"
    write_record(record, path)
    validate(json.loads(path.read_text()), "record", path)
    assert read_record(path).repeats_passed == 1


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
        (json.dumps({**RECORD, "colour": "red"}), "unknown field colour"),
        (json.dumps({**RECORD, "duration_s": "3 s"}), "field duration_s: expected a number of seconds, got '3 s'"),
        (json.dumps({**RECORD, "repeats": [{"run": 1, "status": "green"}]}), "field repeats.0.status"),
        (json.dumps({**RECORD, "warnings": [{"message": "m"}]}), "missing field warnings.0.category"),
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


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "/home/ci/course/.venv/lib/python3.11/site-packages/torch/functional.py:504: UserWarning: x",
            "torch/functional.py:504: UserWarning: x",
        ),
        ("/root/.pyenv/versions/3.11.7/lib/python3.11/contextlib.py:105", "python3.11/contextlib.py:105"),
        (
            "(Triggered internally at /__w/pytorch/pytorch/aten/src/ATen/x.cpp:1.)",
            "(Triggered internally at aten/src/ATen/x.cpp:1.)",
        ),
        ("open /home/ci/course/solutions/01/data/a.txt", "open solutions/01/data/a.txt"),
        ("/home/bob/notes.txt and /tmp/rocmlab-run-x1/kernel.json", "~/notes.txt and $TMPDIR/kernel.json"),
        (
            "see https://rocm.docs.amd.com/en/latest/ and /dev/kfd",
            "see https://rocm.docs.amd.com/en/latest/ and /dev/kfd",
        ),
        ("/tmp/rocmlab-01-demo-k2x9/data/x", "data/x"),
    ],
)
def test_portable_removes_machine_paths_and_keeps_urls(text, expected):
    assert results.portable(text, roots=("/home/ci/course",)) == expected


def test_write_record_makes_every_text_portable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = f"{tmp_path}/solutions/01-demo/lab.py"
    record = make_record(
        status="failed",
        reason=f"cell 3: FileNotFoundError: {bad}",
        failing_cell={"index": 3, "ename": "FileNotFoundError", "evalue": bad, "source": "open('x')"},
        repeats=[{"run": 1, "status": "failed", "reason": f"in {bad}"}],
        warnings=[{"category": "FutureWarning", "message": "m", "filename": "/usr/lib/python3/dist-packages/a/b.py"}],
    )
    path = tmp_path / "results" / "local" / "01-demo.json"
    write_record(record, path)
    text = path.read_text()
    assert str(tmp_path) not in text and "dist-packages" not in text
    saved = read_record(path)
    assert saved.failing_cell["evalue"] == "solutions/01-demo/lab.py"
    assert saved.warnings[0]["filename"] == "a/b.py"
    assert record.reason.endswith(bad)  # the caller's record is left as it was


def test_a_record_from_before_repeats_and_student_still_loads(tmp_path):
    """Records written before the optional fields existed hold the required ones only."""
    path = tmp_path / "old.json"
    path.write_text(json.dumps({**RECORD, "duration_s": 2.0, "reason": "", "failing_cell": None, "warnings": []}))
    record = read_record(path)
    assert record.repeats == [] and record.student is False and record.passed


HARNESS_CHECKS = """
from rocmlab.harness import check

LAUNCHES = 1
LAUNCH_LIMIT_S = 30

@check("t-1", points=2, en="a fresh kernel launches what the learner's doubles", zh="新内核的结果与学员的加倍一致")
def agrees(learner, variant, fresh):
    n = variant.random.randint(1, 9)
    doubled = learner.call("double", n)  # asked before the fresh kernel closes the learner's
    assert fresh.run("launch", n) == doubled == fresh.launch("launch", n)
"""


class FreshKernel:
    """A fresh kernel as ``run_harness`` takes one (``rocmlab.execution.worker.FreshKernels``): a real one."""

    started_s = 0.0

    def open(self, learner_manager):
        from jupyter_client.manager import start_new_kernel

        began = time.monotonic()
        self.km, self.kc = start_new_kernel()
        self.started_s = time.monotonic() - began
        return self.kc, self.km

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def test_what_the_harness_writes_is_what_the_schema_describes():
    """A real harness run (a learner's kernel and a fresh one) and a broken checks file: each key
    it writes is described, with the type the schema says; the check verdicts are CheckResult's."""
    from jupyter_client.manager import start_new_kernel

    from rocmlab.harness import CheckResult, run_harness

    harness = schema("record")["$defs"]["harness"]
    check_fields = {f.name for f in dataclasses.fields(CheckResult)} | {"passed"}
    assert set(schema("record")["$defs"]["check"]["properties"]) == check_fields
    km, kc = start_new_kernel()
    try:
        kc.execute_interactive("def double(x):\n    return 2 * x\n", timeout=60)
        config = {
            "source": HARNESS_CHECKS,
            "seed": 3,
            "probe_timeout_s": 30,
            "kernel": {"source": "def launch(n):\n    return 2 * n\n", "filename": "in_kernel.py"},
        }
        written = run_harness(kc, km, config, fresh=FreshKernel())
        broken = run_harness(kc, km, {**config, "source": "def ("})
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert [c["passed"] for c in written["checks"]] == [True] and written["requests"] == 3, written
    assert set(written) == set(harness["properties"]) - {"error"}
    assert broken["error"] and broken["checks"] == []
    for record in (written, broken):
        assert harness_errors(record) == [], record
    assert harness_errors({**written, "fresh_start": 1.0})  # a key it does not describe
