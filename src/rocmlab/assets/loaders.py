"""The course's Chinese QC data sets: loaders with schema checks, and a signal generator.

Files ship in ``rocmlab/assets/data`` (see docs/DATA-CARD.md). A malformed file raises
``DataFileError`` naming the file, the line and the field. Labs reach these through
``rocmlab.lab`` (``lab.load_qc_reports``...), which re-exports them.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from ..errors import InputError
from . import DATA_DIR

REPORT_FIELDS = ("defect_type", "location", "severity", "disposition", "root_cause", "action")
KB_FIELDS = ("id", "title", "kind", "text")
SPLITS = ("train", "eval")
TRACE_ANOMALIES = ("spike", "step", "drift", "dropout", "oscillation")
IMAGE_ANOMALIES = ("scratch", "spot", "crack", "missing")


class DataFileError(InputError, ValueError):
    """A data file does not match its schema."""

    def __init__(self, path, line, field, problem):
        self.path, self.line, self.field = Path(path), line, field
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: field {field!r}: {problem}")


def _read_jsonl(path: Path):
    if not path.is_file():
        raise DataFileError(
            path, 0, "<file>", "file not found; reinstall rocmlab or run `python -m rocmlab.assets.generate_data`"
        )
    rows = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFileError(path, number, "<json>", f"not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DataFileError(path, number, "<json>", "expected a JSON object")
            rows.append((number, row))
    return rows


def _require_str(path, number, row, field, allowed=None):
    value = row.get(field)
    if not isinstance(value, str) or not value.strip():
        raise DataFileError(path, number, field, f"expected a non-empty string, got {value!r}")
    if allowed is not None and value not in allowed:
        raise DataFileError(path, number, field, f"{value!r} is not one of {list(allowed)}")
    return value


@cache
def _taxonomy(data_dir: Path) -> dict:
    path = data_dir / "qc_taxonomy.json"
    try:
        taxonomy = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(path, 0, "<file>", "file not found") from None
    except json.JSONDecodeError as exc:
        raise DataFileError(path, exc.lineno, "<json>", f"not valid JSON ({exc.msg})") from None
    for key in ("defect_types", "severities", "dispositions", "product_lines"):
        values = taxonomy.get(key)
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            raise DataFileError(path, 0, key, "expected a non-empty list of strings")
    return taxonomy


def qc_taxonomy() -> dict:
    """The label sets: ``defect_types``, ``severities``, ``dispositions``, ``product_lines``."""
    return {key: list(values) for key, values in _taxonomy(DATA_DIR).items()}


def validate_report_row(path, number, row, taxonomy) -> dict:
    """Check one qc_reports row against the schema and taxonomy; return it as a plain dict."""
    _require_str(path, number, row, "id")
    _require_str(path, number, row, "product_line", taxonomy["product_lines"])
    _require_str(path, number, row, "description")
    report = row.get("report")
    if not isinstance(report, dict):
        raise DataFileError(path, number, "report", f"expected an object, got {report!r}")
    allowed = {
        "defect_type": taxonomy["defect_types"],
        "severity": taxonomy["severities"],
        "disposition": taxonomy["dispositions"],
    }
    for field in REPORT_FIELDS:
        _require_str(path, number, report, field, allowed.get(field))
    extra = set(report) - set(REPORT_FIELDS)
    if extra:
        raise DataFileError(path, number, "report", f"unexpected fields {sorted(extra)}")
    return {
        "id": row["id"],
        "product_line": row["product_line"],
        "description": row["description"],
        "report": {field: report[field] for field in REPORT_FIELDS},
    }


def load_qc_reports(split: str = "train", *, path=None) -> list[dict]:
    """The qc_reports split (``train`` or ``eval``): description -> structured QC report.

    ``path`` reads another JSONL file in the same schema (e.g. a learner's own data).
    """
    if path is None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        path = DATA_DIR / f"qc_reports_{split}.jsonl"
    path = Path(path)
    taxonomy = _taxonomy(DATA_DIR)
    rows, seen = [], set()
    for number, row in _read_jsonl(path):
        item = validate_report_row(path, number, row, taxonomy)
        if item["id"] in seen:
            raise DataFileError(path, number, "id", f"duplicate id {item['id']!r}")
        seen.add(item["id"])
        rows.append(item)
    return rows


def load_qc_kb(*, path=None) -> list[dict]:
    """The QC knowledge base: defect catalogue, inspection SOPs and disposition rules."""
    path = Path(path) if path is not None else DATA_DIR / "qc_kb.jsonl"
    docs, seen = [], set()
    for number, row in _read_jsonl(path):
        for field in KB_FIELDS:
            _require_str(path, number, row, field)
        if row["id"] in seen:
            raise DataFileError(path, number, "id", f"duplicate id {row['id']!r}")
        seen.add(row["id"])
        docs.append({field: row[field] for field in KB_FIELDS})
    return docs


# ---------------------------------------------------------------- synthetic signals


def qc_signals(
    n: int, *, seed: int = 0, kind: str = "trace", anomaly_rate: float = 0.5, length: int = 256, size: int = 32
) -> list[dict]:
    """``n`` synthetic inspection signals with labelled anomalies; the same seed gives the same data.

    ``kind="trace"``: 1-D float32 sensor traces of ``length`` samples; anomalies
    spike | step | drift | dropout | oscillation, region ``(start, end)``.
    ``kind="image"``: ``size`` x ``size`` float32 grey images; anomalies
    scratch | spot | crack | missing, region ``(row0, col0, row1, col1)``. Ends are exclusive.
    """
    import numpy as np

    if kind not in ("trace", "image"):
        raise ValueError(f"kind must be 'trace' or 'image', got {kind!r}")
    if not 0.0 <= anomaly_rate <= 1.0:
        raise ValueError(f"anomaly_rate must be in [0, 1], got {anomaly_rate!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    rng = np.random.default_rng(seed)
    make = _make_trace if kind == "trace" else _make_image
    dim = length if kind == "trace" else size
    items = []
    for i in range(n):
        anomalous = rng.random() < anomaly_rate
        data, label, region = make(rng, dim, anomalous)
        items.append(
            {
                "id": f"{kind}-{seed}-{i:05d}",
                "kind": kind,
                "data": data.astype(np.float32),
                "label": label,
                "region": region,
            }
        )
    return items


def _make_trace(rng, length, anomalous):
    import numpy as np

    t = np.arange(length)
    period = rng.uniform(30, 80)
    base = 1.0 + 0.3 * np.sin(2 * np.pi * t / period + rng.uniform(0, 2 * np.pi))
    data = base + rng.normal(0, 0.03, length)
    if not anomalous:
        return data, "normal", None
    label = TRACE_ANOMALIES[rng.integers(len(TRACE_ANOMALIES))]
    width = {
        "spike": int(rng.integers(2, 5)),
        "step": int(rng.integers(length // 6, length // 3)),
        "drift": int(rng.integers(length // 5, length // 3)),
        "dropout": int(rng.integers(8, 24)),
        "oscillation": int(rng.integers(16, 40)),
    }[label]
    start = int(rng.integers(8, length - width - 8))
    end = start + width
    sign = rng.choice([-1.0, 1.0])
    if label == "spike":
        data[start:end] += sign * rng.uniform(0.8, 1.5)
    elif label == "step":
        data[start:end] += sign * rng.uniform(0.3, 0.6)
    elif label == "drift":
        data[start:end] += sign * np.linspace(0, rng.uniform(0.4, 0.8), width)
    elif label == "dropout":
        data[start:end] = rng.normal(0, 0.01, width)
    else:
        data[start:end] += 0.35 * np.sin(np.arange(width) * rng.uniform(1.2, 2.5))
    return data, label, (start, end)


def _make_image(rng, size, anomalous):
    import numpy as np

    rows, cols = np.mgrid[0:size, 0:size]
    angle = rng.uniform(0, np.pi)
    texture = 0.05 * np.sin((rows * np.cos(angle) + cols * np.sin(angle)) * rng.uniform(0.5, 1.2))
    data = 0.5 + texture + rng.normal(0, 0.02, (size, size))
    if not anomalous:
        return data, "normal", None
    label = IMAGE_ANOMALIES[rng.integers(len(IMAGE_ANOMALIES))]
    if label == "scratch":
        r = int(rng.integers(2, size - 2))
        c0 = int(rng.integers(0, size // 2))
        c1 = int(rng.integers(c0 + size // 4, size + 1))
        data[r, c0:c1] += 0.4
        region = (r, c0, r + 1, c1)
    elif label == "spot":
        radius = int(rng.integers(2, 5))
        cr, cc = (int(v) for v in rng.integers(radius, size - radius, 2))
        mask = (rows - cr) ** 2 + (cols - cc) ** 2 <= radius**2
        data[mask] -= 0.35
        region = (cr - radius, cc - radius, cr + radius + 1, cc + radius + 1)
    elif label == "crack":
        r = int(rng.integers(4, size - 4))
        c = int(rng.integers(0, size // 3))
        points = []
        for _ in range(int(rng.integers(size // 3, size // 2))):
            if c >= size:
                break
            points.append((r, c))
            r = int(np.clip(r + rng.integers(-1, 2), 0, size - 1))
            c += 1
        rs, cs = zip(*points)
        data[list(rs), list(cs)] -= 0.4
        region = (min(rs), min(cs), max(rs) + 1, max(cs) + 1)
    else:
        h, w = (int(v) for v in rng.integers(4, 9, 2))
        r0, c0 = int(rng.integers(0, size - h)), int(rng.integers(0, size - w))
        data[r0 : r0 + h, c0 : c0 + w] = 0.05 + rng.normal(0, 0.01, (h, w))
        region = (r0, c0, r0 + h, c0 + w)
    return data, label, region
