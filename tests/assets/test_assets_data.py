"""The shipped QC data sets: schema, taxonomy, splits, reproducibility, error messages."""

import json
from pathlib import Path

import numpy as np
import pytest

from rocmlab.assets import DATA_DIR, generate_data
from rocmlab.assets import loaders as data


def test_reports_parse_and_fields_are_in_taxonomy():
    taxonomy = data.qc_taxonomy()
    assert len(taxonomy["defect_types"]) >= 12
    assert taxonomy["severities"] == ["轻微", "一般", "严重", "致命"]
    assert taxonomy["dispositions"] == ["放行", "返工", "让步接收", "报废"]
    assert len(taxonomy["product_lines"]) >= 6
    train, evals = data.load_qc_reports("train"), data.load_qc_reports("eval")
    assert len(train) >= 600 and len(evals) >= 150
    for row in train + evals:
        assert set(row) == {"id", "product_line", "description", "report"}
        assert set(row["report"]) == set(data.REPORT_FIELDS)
        assert all(isinstance(v, str) and v for v in row["report"].values())
        assert row["report"]["defect_type"] in taxonomy["defect_types"]
        assert row["report"]["severity"] in taxonomy["severities"]
        assert row["report"]["disposition"] in taxonomy["dispositions"]
        assert row["product_line"] in taxonomy["product_lines"]
    used = {row["report"]["defect_type"] for row in train}
    assert used == set(taxonomy["defect_types"])
    assert {row["product_line"] for row in train} == set(taxonomy["product_lines"])


def test_no_leakage_between_splits_and_split_follows_hash():
    train, evals = data.load_qc_reports("train"), data.load_qc_reports("eval")
    train_text = {row["description"] for row in train}
    eval_text = {row["description"] for row in evals}
    assert len(train_text) == len(train) and len(eval_text) == len(evals)
    assert not train_text & eval_text
    assert not {r["id"] for r in train} & {r["id"] for r in evals}
    assert all(generate_data.split_of(text) == "train" for text in train_text)
    assert all(generate_data.split_of(text) == "eval" for text in eval_text)


def test_phrasing_is_varied():
    train = data.load_qc_reports("train")
    openings = {row["description"][:4] for row in train}
    assert len(openings) > 100
    lengths = sorted(len(row["description"]) for row in train)
    assert lengths[len(lengths) // 10] < lengths[9 * len(lengths) // 10] - 20


def test_generator_reproduces_the_shipped_files(tmp_path):
    assert generate_data.main(["--out", str(tmp_path)]) == 0
    for name in ("qc_reports_train.jsonl", "qc_reports_eval.jsonl", "qc_kb.jsonl", "qc_taxonomy.json"):
        assert (tmp_path / name).read_bytes() == (DATA_DIR / name).read_bytes(), name


def test_kb_documents():
    docs = data.load_qc_kb()
    assert len(docs) >= 40
    assert len({d["id"] for d in docs}) == len(docs)
    assert {d["kind"] for d in docs} == {"defect_catalog", "sop", "disposition_rule"}
    for defect in data.qc_taxonomy()["defect_types"]:
        assert any(defect in d["title"] for d in docs), defect


def _write(tmp_path: Path, rows) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8"
    )
    return path


def test_bad_report_file_names_file_line_and_field(tmp_path):
    good = data.load_qc_reports("eval")[0]
    bad = json.loads(json.dumps(good))
    bad["report"]["severity"] = "很严重"
    path = _write(tmp_path, [good, bad])
    with pytest.raises(data.DataFileError) as info:
        data.load_qc_reports(path=path)
    message = str(info.value)
    assert "bad.jsonl:2" in message and "severity" in message and "很严重" in message

    missing = json.loads(json.dumps(good))
    del missing["report"]["action"]
    with pytest.raises(data.DataFileError, match=r"bad.jsonl:1: field 'action'"):
        data.load_qc_reports(path=_write(tmp_path, [missing]))
    with pytest.raises(data.DataFileError, match=r"bad.jsonl:2: field '<json>'"):
        data.load_qc_reports(path=_write(tmp_path, [good, "{not json"]))


def test_bad_kb_file_and_split(tmp_path):
    with pytest.raises(data.DataFileError, match=r"bad.jsonl:1: field 'title'"):
        data.load_qc_kb(path=_write(tmp_path, [{"id": "x", "kind": "sop", "text": "t"}]))
    with pytest.raises(ValueError, match="split"):
        data.load_qc_reports("test")


@pytest.mark.parametrize("kind", ["trace", "image"])
def test_signals_are_seeded_and_labelled(kind):
    first = data.qc_signals(40, seed=3, kind=kind, anomaly_rate=0.6)
    second = data.qc_signals(40, seed=3, kind=kind, anomaly_rate=0.6)
    other = data.qc_signals(40, seed=4, kind=kind, anomaly_rate=0.6)
    assert all(
        np.array_equal(a["data"], b["data"]) and a["label"] == b["label"] and a["region"] == b["region"]
        for a, b in zip(first, second)
    )
    assert not all(np.array_equal(a["data"], b["data"]) for a, b in zip(first, other))
    types = data.TRACE_ANOMALIES if kind == "trace" else data.IMAGE_ANOMALIES
    ndim = 1 if kind == "trace" else 2
    labels = set()
    for item in first:
        assert item["kind"] == kind and item["data"].dtype == np.float32 and item["data"].ndim == ndim
        labels.add(item["label"])
        if item["label"] == "normal":
            assert item["region"] is None
            continue
        assert item["label"] in types
        region = item["region"]
        assert len(region) == 2 * ndim
        shape = item["data"].shape
        for axis in range(ndim):
            assert 0 <= region[axis] < region[axis + ndim] <= shape[axis]
    assert "normal" in labels and len(labels) >= 3


def test_signal_anomaly_is_inside_its_region():
    for item in data.qc_signals(30, seed=7, kind="trace", anomaly_rate=1.0):
        start, end = item["region"]
        if item["label"] in ("spike", "step", "dropout"):
            inside = np.abs(item["data"][start:end] - np.median(item["data"])).max()
            assert inside > 0.25, item["label"]


def test_signal_arguments_are_checked():
    assert data.qc_signals(0) == []
    assert all(s["label"] == "normal" for s in data.qc_signals(10, anomaly_rate=0.0))
    with pytest.raises(ValueError, match="kind"):
        data.qc_signals(2, kind="audio")
    with pytest.raises(ValueError, match="anomaly_rate"):
        data.qc_signals(2, anomaly_rate=1.5)
