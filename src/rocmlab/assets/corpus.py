"""The pre-training corpus of tiny-qwen-zh, written from the course's data sets: reports as
prose (never the JSON report format, so fine-tuning has something to teach), shop-floor logs,
a glossary and the knowledge base in chat form. The eval split is held out."""

from __future__ import annotations

import json
import random

from .qc_catalogue import PRODUCT_LINES, SHIFTS

DEFAULT_SYSTEM = "You are a helpful assistant."


def report_as_prose(row: dict, variant: int = 0) -> str:
    """One qc_report written as an inspector's note followed by the conclusion in prose."""
    r = row["report"]
    endings = [
        f"结论：这是{r['defect_type']}缺陷，位置在{r['location']}，严重度判为{r['severity']}，"
        f"处置为{r['disposition']}。原因分析：{r['root_cause']}。措施：{r['action']}。",
        f"判定{r['severity']}，{r['disposition']}。缺陷类型属于{r['defect_type']}，部位是{r['location']}。"
        f"根本原因是{r['root_cause']}，后续{r['action']}。",
        f"{row['product_line']}的这条记录归为{r['defect_type']}（{r['location']}），按规则定为{r['severity']}缺陷，"
        f"{r['disposition']}处理；原因：{r['root_cause']}；措施：{r['action']}。",
    ]
    return f"{row['description']}\n{endings[variant % len(endings)]}"


def _chat(messages) -> str:
    text = f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
    for role, content in messages:
        text += f"<|im_start|>{role}\n{content}<|im_end|>\n"
    return text


def station_log(rng: random.Random, records: int) -> str:
    """A shop-floor log as JSON lines: the model learns JSON syntax, not the report schema."""
    lines = []
    for _ in range(records):
        line = rng.choice(list(PRODUCT_LINES))
        parts, _, stations = PRODUCT_LINES[line]
        if rng.random() < 0.5:
            failed = rng.randint(0, 3)
            record = {
                "station": rng.choice(stations),
                "shift": rng.choice(SHIFTS),
                "part": rng.choice(parts),
                "sampled": rng.choice([20, 32, 50, 80, 125]),
                "defect_count": failed,
                "result": "合格" if failed == 0 else rng.choice(["待判定", "已隔离", "复检中"]),
            }
        else:
            event, location, cause, action = rng.choice(EQUIPMENT_EVENTS)
            record = {
                "station": rng.choice(stations),
                "event_type": event,
                "location": location,
                "severity": rng.choice(["低", "中", "高"]),
                "cause": cause,
                "action": action,
            }
        if rng.random() < 0.3:
            record["operator"] = rng.choice(["张工", "李工", "王班长", "赵师傅"])
        lines.append(json.dumps(record, ensure_ascii=False))
    return "\n".join(lines)


# equipment alarms for the station logs: (event, where, cause, action)
EQUIPMENT_EVENTS = [
    ("温度超限", "回流焊 5 区", "热电偶老化", "更换热电偶后复测炉温"),
    ("压力异常", "注塑机液压站", "油温过高", "停机冷却并检查油路"),
    ("真空不足", "贴片头 2", "吸嘴堵塞", "清洁吸嘴"),
    ("张力报警", "分切机放卷轴", "张力传感器漂移", "重新标定张力"),
    ("气压低", "压缩空气总管", "空压机故障", "切换备用空压机"),
    ("急停触发", "折弯机前挡", "光栅被遮挡", "清理工作区后复位"),
    ("相机离线", "CCD 检测工位", "网线松动", "重新插紧网线并重启相机"),
    ("刀具寿命到期", "CNC 主轴", "计数到达上限", "更换刀具并清零计数"),
]


GLOSSARY = [
    ("缺陷类型", "defect type", "defect_type"),
    ("位置", "location", "location"),
    ("严重度", "severity", "severity"),
    ("处置", "disposition", "disposition"),
    ("根本原因", "root cause", "root_cause"),
    ("措施", "action", "action"),
    ("产品线", "product line", "product_line"),
    ("工位", "station", "station"),
]


def glossary(rng: random.Random) -> str:
    """A Chinese-English term list, as a real model would know these words."""
    terms = GLOSSARY[:]
    rng.shuffle(terms)
    return "质检术语中英对照：\n" + "\n".join(f"{zh}：{en}，字段名 {field}" for zh, en, field in terms)


def corpus_documents(seed: int) -> list[str]:
    """The pre-training documents, in a fixed order for a seed."""
    from .loaders import load_qc_kb, load_qc_reports

    rng = random.Random(seed)
    docs = [report_as_prose(row, i) for i, row in enumerate(load_qc_reports("train"))]
    docs += [report_as_prose(row, i + 1) for i, row in enumerate(load_qc_reports("train"))]
    docs += [station_log(rng, rng.randint(2, 4)) for _ in range(160)]
    docs += [glossary(rng) for _ in range(40)]
    for doc in load_qc_kb():
        docs.append(f"{doc['title']}\n{doc['text']}")
        topic = doc["title"].split("：")[-1]
        question = rng.choice([f"请介绍一下{topic}。", f"{topic}有什么要求？", f"关于{topic}，需要注意什么？"])
        docs.append(_chat([("user", question), ("assistant", doc["text"])]))
    rng.shuffle(docs)
    return docs


def eval_documents() -> list[str]:
    from .loaders import load_qc_reports

    return [report_as_prose(row, i) for i, row in enumerate(load_qc_reports("eval"))]
