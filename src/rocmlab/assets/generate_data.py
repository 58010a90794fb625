"""Generate the course's Chinese QC data sets (run once; the JSONL it writes is what ships).

    python -m rocmlab.assets.generate_data [--out DIR] [--seed 2026]

Writes qc_taxonomy.json, qc_reports_train.jsonl, qc_reports_eval.jsonl and qc_kb.jsonl.
Everything here was written for this project. A report's severity and disposition follow
from the description by fixed rules (measurement thresholds, location, reworkability), so
a model can learn them; the root cause is hinted in most descriptions but not all.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

from .qc_catalogue import DEFECTS, DISPOSITIONS, PRODUCT_LINES, SEVERITIES, SHIFTS
from .qc_kb import kb_documents

SEED = 2026
EVAL_PERCENT = 20
N_CANDIDATES = 1150

# ---------------------------------------------------------------- phrasing
REMARKS = [
    "已隔离待判定。",
    "已拍照留存。",
    "请工艺确认。",
    "已通知班长。",
    "同批次待全检。",
    "已挂红牌。",
    "",
    "",
    "",
    "",
]
HINT_LEADS = ["现场了解到", "据操作工反馈，", "初步排查：", "疑似原因：", "补充：", "另外", "查看记录发现"]


def _context(rng, line):
    _, _, stations = PRODUCT_LINES[line]
    parts = []
    if rng.random() < 0.6:
        parts.append(rng.choice(SHIFTS))
    parts.append(rng.choice(stations))
    if rng.random() < 0.4:
        parts.append(f"批次 {rng.choice('ABCDHK')}{rng.randint(2301, 2412)}-{rng.randint(1, 30):02d}")
    return rng.choice([" ", "，", "/"]).join(parts)


def _hint(rng, hints):
    lead = rng.choice(HINT_LEADS)
    return f"{lead}{rng.choice(hints)}。"


def _sentence(rng, pattern, ctx, part, loc, syn, meas, hint, remark):
    sample = rng.choice([20, 32, 50, 80, 125])
    bad = rng.randint(1, 4)
    patterns = [
        lambda: f"{ctx}：{part}{loc}发现{syn}，{meas}。{hint}{remark}",
        lambda: f"{part}的{loc}有{syn}，{meas}。{ctx}发现。{hint}{remark}",
        lambda: f"[{ctx}] {part} {loc} {syn} {meas} {hint}",
        lambda: f"{ctx}抽检 {sample} 件{part}，其中 {bad} 件{loc}出现{syn}，{meas}。{hint}{remark}",
        lambda: f"{syn}：{part}，位置在{loc}，{meas}。{hint}{remark}",
        lambda: f"巡检时看到{part}{loc}{syn}，{meas}，{hint}{remark}",
        lambda: f"{loc}位置{syn}（{part}），{meas}。{ctx}。{hint}",
        lambda: f"客户退回{part}，反馈{loc}{syn}，复测{meas}。{hint}{remark}",
        lambda: f"{ctx}，{part}外观检查不合格：{loc}{syn}，{meas}。{hint}",
        lambda: f"{part}{loc}疑似{syn}，放大后确认，{meas}。{hint}{remark}{ctx}记录。",
        lambda: f"问题描述：{loc}出现{syn}；零件：{part}；测量：{meas}；工位：{ctx}。{hint}",
        lambda: f"{ctx}，首件就发现{part}{loc}{syn}，{meas}，{hint}{remark}",
    ]
    return patterns[pattern % len(patterns)]()


def _disposition(defect, line, level):
    if level == 0:
        return "放行"
    if level == 3:
        return "报废"
    rework = DEFECTS[defect]["overrides"].get(line, DEFECTS[defect]["rework"])
    if level == 1:
        return "返工" if rework[0] else "让步接收"
    return "返工" if rework[1] else "报废"


def _action(defect, disposition, cause_action):
    first = {
        "放行": "记录后放行，下批次关注",
        "让步接收": "提交让步接收申请，经 MRB 评审批准后标识使用",
        "报废": "隔离报废并追溯同批次产品",
        "返工": DEFECTS[defect]["rework_step"],
    }[disposition]
    return f"{first}；{cause_action}"


def make_report(rng):
    defect = rng.choice(list(DEFECTS))
    spec = DEFECTS[defect]
    line = rng.choice(spec["lines"])
    parts, locations, _ = PRODUCT_LINES[line]
    part, loc = rng.choice(parts), rng.choice(locations)
    meas, level = spec["measure"](rng, line, loc)
    cause, hints, cause_action = rng.choice(spec["causes"])
    hint = _hint(rng, hints) if rng.random() < 0.8 else ""
    description = _sentence(
        rng,
        rng.randrange(100),
        _context(rng, line),
        part,
        loc,
        rng.choice(spec["synonyms"]),
        meas,
        hint,
        rng.choice(REMARKS),
    )
    description = " ".join(description.split()).replace(" 。", "。").strip()
    if description.endswith("，"):
        description = description[:-1] + "。"
    disposition = _disposition(defect, line, level)
    report = {
        "defect_type": defect,
        "location": loc,
        "severity": SEVERITIES[level],
        "disposition": disposition,
        "root_cause": cause,
        "action": _action(defect, disposition, cause_action),
    }
    return {"product_line": line, "description": description, "report": report}


def split_of(description: str) -> str:
    digest = hashlib.sha256(description.encode("utf-8")).digest()
    return "eval" if int.from_bytes(digest[:4], "big") % 100 < EVAL_PERCENT else "train"


def make_reports(seed=SEED, n=N_CANDIDATES):
    rng = random.Random(seed)
    seen, rows = set(), []
    while len(rows) < n:
        row = make_report(rng)
        if row["description"] in seen:
            continue
        seen.add(row["description"])
        digest = hashlib.sha256(row["description"].encode("utf-8")).hexdigest()
        rows.append({"id": f"qcr-{digest[:10]}", **row})
    return rows


def taxonomy():
    return {
        "defect_types": list(DEFECTS),
        "severities": SEVERITIES,
        "dispositions": DISPOSITIONS,
        "product_lines": list(PRODUCT_LINES),
    }


def write_jsonl(path: Path, rows) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = make_reports(args.seed)
    train = [r for r in rows if split_of(r["description"]) == "train"]
    evals = [r for r in rows if split_of(r["description"]) == "eval"]
    write_jsonl(args.out / "qc_reports_train.jsonl", train)
    write_jsonl(args.out / "qc_reports_eval.jsonl", evals)
    write_jsonl(args.out / "qc_kb.jsonl", kb_documents())
    (args.out / "qc_taxonomy.json").write_text(
        json.dumps(taxonomy(), ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
    print(f"wrote {len(train)} train, {len(evals)} eval reports, {len(kb_documents())} KB docs to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
