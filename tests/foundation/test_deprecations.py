"""Deprecation capture on recorded stderr from torch 2.13 and transformers 4.57 / 5.24."""

import json
from pathlib import Path

import pytest

from rocmlab.deprecations import find_deprecations, removal
from rocmlab.execution.results import Record, write_record

RECORDED = Path(__file__).parents[1] / "fixtures" / "deprecations"


def notices(name):
    return find_deprecations((RECORDED / name).read_text(encoding="utf-8"), cell_index=4)


def test_torch_user_warnings_count_when_they_announce_a_deprecation():
    found = notices("torch-2.13.0.txt")
    assert [w["category"] for w in found] == [
        "UserWarning",  # TypedStorage is deprecated
        "FutureWarning",
        "FutureWarning",
        "UserWarning",  # torch.meshgrid: in an upcoming release ... (a C++ TORCH_WARN)
        "FutureWarning",
        "DeprecationWarning",
        "FutureWarning",
    ]
    assert found[0]["message"].startswith("TypedStorage is deprecated. It will be removed in the future")
    assert {w["package"] for w in found[1:]} == {"torch"}
    assert all(w["cell"] == 4 and w["source"] == "warnings" for w in found)
    assert not any("s = torch.FloatStorage" in w["message"] for w in found)  # the echoed source line


def test_transformers_4_logger_lines_are_bare_messages():
    found = notices("transformers-4.57.6.txt")
    by_message = {w["message"].split(" ")[0]: w for w in found}
    assert [w["source"] for w in found] == ["warnings", "logger", "logger", "logger", "logger", "logger"]
    assert found[0]["category"] == "FutureWarning"
    assert (found[0]["package"], found[0]["removal"]) == ("transformers", "5")  # "removed in v5 of Transformers"
    assert by_message["`BeamSearchScorer`"]["removal"] == "4.62.0"
    assert by_message["Passing"]["removal"] == "4.58.0" and by_message["Passing"]["package"] == "transformers"
    assert by_message["`torch_dtype`"]["removal"] is None


def test_transformers_5_logger_lines_carry_the_logger_name_and_progress_bars_are_ignored():
    found = notices("transformers-5.24.0.txt")
    assert len(found) == 4 and {w["category"] for w in found} == {"log"}
    assert {w["package"] for w in found} == {"transformers"}
    assert found[0]["message"] == "`torch_dtype` is deprecated! Use `dtype` instead!"
    assert found[-1]["removal"] == "5.13"


@pytest.mark.parametrize(
    "message, expected",
    [
        ("`x` is deprecated and will be removed in v6. Use `y` instead.", ("6", None)),
        ("will be removed in Transformers v6. To keep it, call pyctcdecode directly", ("6", "transformers")),
        ("Passing `k` in `text_kwargs` is deprecated and will be removed in v5.29.0.", ("5.29.0", None)),
        ("`a` is deprecated and removed starting from version 5.40.0 for `f`.", ("5.40.0", None)),
        ("`a` is deprecated and will be removed in version 4.50.1 of Transformers", ("4.50.1", "transformers")),
        ("this is removed in transformers v5.0", ("5.0", "transformers")),
        ("deprecated and will be removed in a future version, use `decode` instead.", None),
        ("TypedStorage is deprecated. It will be removed in the future", None),
    ],
)
def test_removal_versions_from_real_message_shapes(message, expected):
    found = removal(message)
    assert (None if found is None else (found["version"], found["package"])) == expected


def test_only_stderr_log_lines_count_and_unrelated_user_warnings_are_ignored():
    text = "the old plan is deprecated, so we measure again\n"
    assert find_deprecations(text, 1, stream="stdout") == []
    assert len(find_deprecations(text, 1, stream="stderr")) == 1
    user = "/x/lab.py:3: UserWarning: the GPU is busy\n  warn('the GPU is busy')\n"
    assert find_deprecations(user, 1) == []


def test_records_keep_no_path_of_the_machine(tmp_path):
    found = []
    for name in ("torch-2.13.0.txt", "transformers-4.57.6.txt", "transformers-5.24.0.txt"):
        found += notices(name)
    record = Record("01-demo", "1.0.0", "smoke", "local", "passed", "2026-12-01T00:00:00+00:00", warnings=found)
    path = tmp_path / "local" / "01-demo.json"
    write_record(record, path)
    text = path.read_text(encoding="utf-8")
    for machine_path in ("/work/", "/root/", "/tmp/", "/__w/", "site-packages"):
        assert machine_path not in text, machine_path
    saved = {w["message"][:20]: w for w in json.loads(text)["warnings"]}
    assert saved["torch.meshgrid: in a"]["filename"] == "torch/functional.py"
    assert (
        "(Triggered internally at aten/src/ATen/native/TensorShape.cpp:4215.)"
        in saved["torch.meshgrid: in a"]["message"]
    )
