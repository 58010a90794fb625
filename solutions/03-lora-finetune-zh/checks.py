"""Lab 03's hidden checks, run by the trusted harness (rocmlab.harness) after the notebook.

The learner's functions are called on inputs drawn from the learner's seed; references are
computed here. Nothing is trained here: the checks after training read the notebook's state
(losses, predictions, scores, the adapter, the merged model) and check it against recomputations.
What needs the lab's tokenizer or model (the chat template's tokens, the model's config, the
adapter model's logits and losses, ``DTYPE``, ``STEPS_HERE``) is asked of the trusted reference
kernel, which ran the lab's solution; the course's records are read here. The learner's kernel
answers only for the learner's functions and the notebook's results: any later cell of theirs may
rebind ``tokenizer``, ``peft_model`` or ``eval_records``.
"""

import hashlib
import json
import math
import unicodedata

import numpy as np
import safetensors.torch
import torch
import torch.nn.functional as F

from rocmlab.assets.loaders import load_qc_reports
from rocmlab.check_compare import assert_close, label, learner_says
from rocmlab.harness import check, mistake

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
EXACT = ("defect_type", "severity", "disposition")
TEXT = ("location", "root_cause", "action")
KEYS = ("defect_type", "location", "severity", "disposition", "root_cause", "action")
HAN = "划痕气泡裂纹崩边色差毛刺变形污渍缺料焊点虚焊漏装错装尺寸超差"


# ---------------------------------------------------------------- 03-sft-1: build_sft_sample


def random_messages(rng):
    """Chat messages from a random eval record (the course's, read here: not the kernel's
    ``eval_records``), with a system prompt of the check's own."""
    record = rng.choice(load_qc_reports("eval"))
    keys = list(KEYS)
    rng.shuffle(keys)
    answer = {k: record["report"][k] for k in keys[: rng.randint(3, 6)]}
    system = "你是质检助手。" + "".join(rng.choice(HAN) for _ in range(rng.randint(0, 12)))
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"产品线：{record['product_line']}\n缺陷描述：{record['description']}"},
        {"role": "assistant", "content": json.dumps(answer, ensure_ascii=False)},
    ]


def sft_case(learner, reference, rng, pad=0):
    messages = random_messages(rng)
    ref = reference.run("template_tokens", messages)  # the lab's tokenizer
    if pad:
        got = learner.eval("build_sft_sample(tokenizer, m, pad_to=p)", m=messages, p=len(ref["full"]) + pad)
    else:
        got = learner.eval("build_sft_sample(tokenizer, m)", m=messages)
    assert type(got) is dict and {"input_ids", "labels", "attention_mask"} <= set(got), f"returned {got!r:.80}"
    for key in ("input_ids", "labels", "attention_mask"):
        assert type(got[key]) is list and all(type(x) is int for x in got[key]), f"{key} must be a list of ints"
    return got, ref


@check(
    "03-sft-1",
    points=1,
    en="build_sft_sample: input_ids are the template's tokens without the trailing newline, ending with one <|im_end|>",
    zh="build_sft_sample：input_ids 等于聊天模板去掉末尾换行后的 token，以一个 <|im_end|> 结尾",
)
def sft_input_ids(learner, variant, reference):
    for _ in range(2):
        got, ref = sft_case(learner, reference, variant.random)
        assert got["input_ids"] == ref["full"], "input_ids differ from the template's tokens"
        assert got["input_ids"][-1] == ref["end"] and got["input_ids"][-2] != ref["end"], "must end with one <|im_end|>"


@check(
    "03-sft-1",
    points=1,
    en="build_sft_sample: labels are -100 on the prompt and the token ids on the answer and its <|im_end|>",
    zh="build_sft_sample：提示部分的标签为 -100，回答及其 <|im_end|> 的标签等于 token id",
)
def sft_labels(learner, variant, reference):
    for _ in range(2):
        got, ref = sft_case(learner, reference, variant.random)
        n_prompt, ids, labels = ref["prompt"], got["input_ids"], got["labels"]
        assert len(labels) == len(ids) == len(got["attention_mask"]), "lengths differ"
        assert labels[:n_prompt] == [-100] * n_prompt, "prompt labels must be -100"
        assert labels[n_prompt:] == ids[n_prompt:], "answer labels must equal input_ids"
        assert sum(x != -100 for x in labels) == ref["answer"] + 1, "answer tokens + 1 labelled"
        assert got["attention_mask"] == [1] * len(ids), "mask 1 on real tokens"


@check(
    "03-sft-1",
    points=0.5,
    en="build_sft_sample with pad_to: right-padded with pad_token_id, label -100, mask 0",
    zh="build_sft_sample 给了 pad_to 时：右侧用 pad_token_id 填充，标签 -100，mask 0",
)
def sft_padding(learner, variant, reference):
    rng = variant.random
    pad = rng.randint(1, 12)
    got, ref = sft_case(learner, reference, rng, pad=pad)
    n = len(ref["full"])
    assert got["input_ids"] == ref["full"] + [ref["pad"]] * pad, "input_ids padding"
    assert got["labels"][n:] == [-100] * pad and got["labels"][n - 1] == ref["end"], "label padding"
    assert got["attention_mask"] == [1] * n + [0] * pad, "attention_mask padding"
    exact = learner.eval("build_sft_sample(tokenizer, m, pad_to=p)", m=random_messages(rng), p=10_000)
    assert len(exact["input_ids"]) == 10_000, "pad_to sets the length"


@check(
    "03-sft-1",
    points=0.5,
    en="build_sft_sample raises ValueError when the sample is longer than pad_to",
    zh="样本比 pad_to 长时 build_sft_sample 抛出 ValueError",
)
def sft_too_long(learner, variant, reference):
    rng = variant.random
    messages = random_messages(rng)
    n = len(reference.run("template_tokens", messages)["full"])
    short = n - rng.randint(1, min(20, n - 1))
    raised = learner.raised("build_sft_sample(tokenizer, m, pad_to=p)", m=messages, p=short)
    assert raised is not None and raised.is_a("ValueError"), f"pad_to={short} for {n} tokens: {raised}"


# ---------------------------------------------------------------- 03-lora-1: lora_param_count


def lora_reference(cfg, r, targets=PROJECTIONS):
    hidden = cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or hidden // cfg["num_attention_heads"]
    q_out, kv_out = cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim
    inter = cfg["intermediate_size"]
    shapes = {
        "q_proj": (hidden, q_out),
        "k_proj": (hidden, kv_out),
        "v_proj": (hidden, kv_out),
        "o_proj": (q_out, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }
    return cfg["num_hidden_layers"] * sum(r * sum(shapes[name]) for name in targets)


def random_config(rng, head_dim=False):
    kv = rng.choice([1, 2, 4])
    heads = kv * rng.choice([1, 2, 3, 4])
    dim = rng.choice([8, 16, 32])
    cfg = {
        "vocab_size": 64,
        "hidden_size": heads * dim * (1 if not head_dim else rng.choice([1, 2])),
        "intermediate_size": rng.randint(2, 12) * 16,
        "num_hidden_layers": rng.randint(1, 6),
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
    }
    if head_dim:
        cfg["head_dim"] = rng.choice([d for d in (8, 16, 24, 40) if d != cfg["hidden_size"] // heads])
    return cfg


def learner_count(learner, cfg, r, targets=None):
    got = learner.run("lora_count", cfg, r, None if targets is None else tuple(targets))
    assert type(got) is int, f"returned {type(got).__name__}"
    return got


@check(
    "03-lora-1",
    points=1,
    en="lora_param_count: r x (in + out) per projection and layer, with GQA shapes, for all seven projections",
    zh="lora_param_count：每层每个投影 r × (in + out)，按 GQA 的形状，七个投影",
)
def lora_all_projections(learner, variant):
    rng = variant.random
    for _ in range(3):
        cfg, r = random_config(rng), rng.choice([1, 2, 4, 8, 16, 64])
        assert learner_count(learner, cfg, r) == lora_reference(cfg, r), f"{cfg}, r={r}"
    qwen05 = {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
    }
    assert learner_count(learner, qwen05, 8) == 4_399_104, "Qwen2.5-0.5B, r=8"


@check(
    "03-lora-1",
    points=0.5,
    en="lora_param_count: head_dim is config.head_dim when it is set, else hidden_size // num_attention_heads",
    zh="lora_param_count：设置了 config.head_dim 时用它，否则用 hidden_size // num_attention_heads",
)
def lora_head_dim(learner, variant):
    rng = variant.random
    for _ in range(2):
        cfg, r = random_config(rng, head_dim=True), rng.choice([2, 4, 16])
        assert learner_count(learner, cfg, r) == lora_reference(cfg, r), f"{cfg}, r={r}"


@check(
    "03-lora-1",
    points=0.5,
    en="lora_param_count counts only the projections named in target_modules",
    zh="lora_param_count 只数 target_modules 里的投影",
)
def lora_targets(learner, variant):
    rng = variant.random
    for _ in range(3):
        cfg, r = random_config(rng, head_dim=rng.random() < 0.5), rng.choice([2, 4, 16])
        targets = rng.sample(PROJECTIONS, rng.randint(1, 6))
        assert learner_count(learner, cfg, r, targets) == lora_reference(cfg, r, targets), f"{cfg}, r={r}, {targets}"


@check(
    "03-lora-1",
    points=1,
    en="lora_param_count for the lab's model and LORA_R equals peft's trainable count",
    zh="lora_param_count 对本实验的模型和 LORA_R 的结果等于 peft 的可训练参数个数",
)
def lora_matches_peft(learner, variant, reference):
    # the lab's model and peft's count as the solution built them: the learner's peft_model may be rebound
    cfg, trainable = reference.eval(
        "(peft_model.base_model.model.config.to_dict(), peft_model.get_nb_trainable_parameters()[0])"
    )
    got = learner_count(learner, cfg, PARAMETERS["LORA_R"])  # noqa: F821 (the run's, from the harness)
    assert got == trainable, f"[[learner: the lab's model]] {got} vs peft {trainable}"


# ---------------------------------------------------------------- 03-data-1: dedupe and split


def dedupe_key(text):
    return "".join(unicodedata.normalize("NFKC", text).split())


def to_fullwidth(text):
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def duplicated_records(rng):
    """Records whose descriptions repeat with spaces, tabs, full-width letters and digits."""
    bases = [
        rng.choice(["AB面", "B2区", "PCB板", "M3螺孔", "左上角", "外壳"]) + "".join(rng.choice(HAN) for _ in range(3))
        for _ in range(rng.randint(3, 6))
    ]
    records = []
    for i in range(rng.randint(8, 16)):
        text = rng.choice(bases)
        variant = rng.choice(["same", "space", "full", "tab", "trail"])
        if variant == "space":
            cut = rng.randint(1, len(text) - 1)
            text = text[:cut] + " " + text[cut:]
        elif variant == "full":
            text = to_fullwidth(text)
        elif variant == "tab":
            text = "\t" + text + "\u3000"
        elif variant == "trail":
            text = text + " \n"
        records.append({"id": f"q{i}", "description": text})
    return records


def dedupe_reference(records):
    seen, kept = set(), []
    for record in records:
        if dedupe_key(record["description"]) not in seen:
            seen.add(dedupe_key(record["description"]))
            kept.append(record)
    return kept


@check(
    "03-data-1",
    points=0.5,
    en="dedupe_records keeps the first record of each description, in input order ([] for [])",
    zh="dedupe_records 每组描述保留输入顺序中的第一条，保持输入顺序（空列表返回空列表）",
)
def dedupe_first_in_order(learner, variant):
    rng = variant.random
    assert learner.call("dedupe_records", []) == [], "an empty list"
    records = [{"id": f"d{i}", "description": rng.choice(["裂纹", "气泡", "划痕", "毛刺"])} for i in range(12)]
    for order in (records, list(reversed(records))):
        got = learner.call("dedupe_records", order)
        assert [r["id"] for r in got] == [r["id"] for r in dedupe_reference(order)], "kept records"


@check(
    "03-data-1",
    points=0.5,
    en="dedupe_records compares descriptions after NFKC with all whitespace removed",
    zh="dedupe_records 比较的是 NFKC 规范化并去掉所有空白之后的描述",
)
def dedupe_normalised(learner, variant):
    rng = variant.random
    for _ in range(2):
        records = duplicated_records(rng)
        got = learner.call("dedupe_records", records)
        assert [r["id"] for r in got] == [r["id"] for r in dedupe_reference(records)], "kept records"


def in_dev(record_id, fraction, seed):
    return int(hashlib.sha256(f"{seed}:{record_id}".encode()).hexdigest()[:8], 16) / 16**8 < fraction


@check(
    "03-data-1",
    points=0.75,
    en="split_by_hash puts a record in dev exactly when the sha256 formula of seed:id is below eval_fraction",
    zh="split_by_hash 当且仅当 seed:id 的 sha256 公式小于 eval_fraction 时把记录放进 dev",
)
def split_formula(learner, variant):
    rng = variant.random
    records = [{"id": f"{rng.choice('abcxyz')}{rng.randint(0, 10**6)}", "description": "x"} for _ in range(120)]
    for fraction, seed in [(round(rng.uniform(0.05, 0.6), 3), rng.randint(0, 999)), (0.0, rng.randint(0, 9)), (1.0, 3)]:
        train, dev = learner.call("split_by_hash", records, fraction, seed)
        want = [r["id"] for r in records if in_dev(r["id"], fraction, seed)]
        assert [r["id"] for r in dev] == want, f"dev for fraction {fraction}, seed {seed}"
        assert [r["id"] for r in train] == [r["id"] for r in records if r["id"] not in set(want)], "train"


@check(
    "03-data-1",
    points=0.25,
    en="split_by_hash returns (train, dev), both in input order, whatever the order of the records",
    zh="split_by_hash 返回 (train, dev)，两者都保持输入顺序，与记录的顺序无关",
)
def split_order(learner, variant):
    rng = variant.random
    records = [{"id": f"r{rng.randint(0, 10**6)}", "description": str(i)} for i in range(80)]
    shuffled = records[:]
    rng.shuffle(shuffled)
    fraction, seed = round(rng.uniform(0.1, 0.5), 2), rng.randint(0, 99)
    got = learner.call("split_by_hash", shuffled, fraction, seed)
    assert type(got) in (tuple, list) and len(got) == 2, f"returned {type(got).__name__}"
    want_dev = [r["id"] for r in shuffled if in_dev(r["id"], fraction, seed)]
    assert [r["id"] for r in got[1]] == want_dev and len(got[0]) + len(got[1]) == len(shuffled), "order"


# ---------------------------------------------------------------- 03-collate-1: collate


def random_samples(rng, pad_id):
    samples = []
    for _ in range(rng.randint(2, 5)):
        n = rng.randint(1, 12)
        ids = [rng.choice([pad_id, rng.randint(0, 50)]) for _ in range(n)]
        cut = rng.randint(0, n - 1)
        samples.append({"input_ids": ids, "labels": [-100] * cut + ids[cut:]})
    return samples


def collate_reference(samples, pad_id):
    longest = max(len(s["input_ids"]) for s in samples)
    pad = [longest - len(s["input_ids"]) for s in samples]
    return {
        "input_ids": [list(s["input_ids"]) + [pad_id] * p for s, p in zip(samples, pad)],
        "labels": [list(s["labels"]) + [-100] * p for s, p in zip(samples, pad)],
        "attention_mask": [[1] * len(s["input_ids"]) + [0] * p for s, p in zip(samples, pad)],
    }


def collated(learner, samples, pad_id):
    got = learner.call("collate", samples, pad_id)
    assert type(got) is dict and {"input_ids", "labels", "attention_mask"} <= set(got), "the three keys"
    for key in ("input_ids", "labels", "attention_mask"):
        assert isinstance(got[key], torch.Tensor), f"{key} is not a tensor"
    return got


@check(
    "03-collate-1",
    points=0.75,
    en="collate right-pads input_ids with pad_id and labels with -100 to the longest sample",
    zh="collate 把 input_ids 用 pad_id、labels 用 -100 在右侧填充到本批最长",
)
def collate_padding(learner, variant):
    rng = variant.random
    for _ in range(3):
        pad_id = rng.randint(0, 50)
        samples = random_samples(rng, pad_id)
        got, want = collated(learner, samples, pad_id), collate_reference(samples, pad_id)
        assert got["input_ids"].tolist() == want["input_ids"], "input_ids"
        assert got["labels"].tolist() == want["labels"], "labels"


@mistake(
    en="attention_mask taken as input_ids != pad_id: where the pad id is also a real token's id, real tokens are masked",
    zh="把 attention_mask 取为 input_ids != pad_id：填充 id 同时也是真实 token 的 id 时，真实 token 被遮住",
    code="""
def collate(samples, pad_id):
    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.tensor([list(s["input_ids"]) + [pad_id] * (longest - len(s["input_ids"])) for s in samples])
    labels = torch.tensor([list(s["labels"]) + [-100] * (longest - len(s["labels"])) for s in samples])
    return {"input_ids": ids, "labels": labels, "attention_mask": (ids != pad_id).long()}
""",
)
@check(
    "03-collate-1",
    points=0.75,
    en="collate builds attention_mask from the lengths, even when pad_id equals real tokens",
    zh="collate 按长度构造 attention_mask，即使 pad_id 与真实 token 相同",
)
def collate_mask(learner, variant):
    rng = variant.random
    for _ in range(3):
        pad_id = rng.randint(0, 50)
        samples = random_samples(rng, pad_id)
        samples[0]["input_ids"][-1] = pad_id  # a real token equal to pad_id
        got = collated(learner, samples, pad_id)
        assert got["attention_mask"].tolist() == collate_reference(samples, pad_id)["attention_mask"], "mask"


@check(
    "03-collate-1",
    points=0.5,
    en="collate returns torch.long tensors of shape [batch, longest]",
    zh="collate 返回 torch.long 张量，形状为 [batch, 本批最长]",
    counts_with="collate_padding",  # zeros of the right shape have it too
)
def collate_dtype(learner, variant):
    rng = variant.random
    pad_id = rng.randint(0, 50)
    samples = random_samples(rng, pad_id)
    got = collated(learner, samples, pad_id)
    shape = (len(samples), max(len(s["input_ids"]) for s in samples))
    for key in ("input_ids", "labels", "attention_mask"):
        assert got[key].dtype == torch.long and tuple(got[key].shape) == shape, f"{key}: {got[key].dtype}"


# ---------------------------------------------------------------- 03-loss-1: causal_lm_loss


def loss_reference(logits, labels):
    vocab = logits.shape[-1]
    return F.cross_entropy(
        logits[:, :-1].float().reshape(-1, vocab), labels[:, 1:].reshape(-1), ignore_index=-100
    ).item()


def random_batch(variant):
    rng, gen = variant.random, variant.torch()
    b, t, v = rng.randint(2, 5), rng.randint(3, 9), rng.randint(4, 40)
    logits = torch.randn(b, t, v, generator=gen) * rng.uniform(0.5, 4.0)
    labels = torch.randint(0, v, (b, t), generator=gen)
    labels[torch.rand(b, t, generator=gen) < 0.3] = -100
    labels[rng.randrange(b)] = -100  # a whole row ignored
    labels[rng.randrange(b), -1] = rng.randrange(v)  # and some row counted at its end
    return logits, labels


def scalar(got):
    assert isinstance(got, torch.Tensor) and got.dim() == 0, f"not a scalar tensor: {got!r:.60}"
    return float(got)


@mistake(
    en="logits and labels compared at the same position, without the shift: the model is scored on copying its input",
    zh="logits 与标签在同一位置比较、没有移位：模型被按“照抄输入”计分",
    code="""
def causal_lm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1), ignore_index=-100)
""",
)
@check(
    "03-loss-1",
    points=1,
    en="causal_lm_loss: logits at t scored against labels at t+1, mean over all counted positions of the batch",
    zh="causal_lm_loss：位置 t 的 logits 对 t+1 的标签计分，在整个批次所有被计入的位置上取平均",
)
def loss_random_batch(learner, variant):
    for _ in range(2):
        logits, labels = random_batch(variant)
        got = scalar(learner.call("causal_lm_loss", logits, labels))
        assert_close(got, loss_reference(logits, labels), rtol=1e-5, atol=1e-6, what="causal_lm_loss")


@check(
    "03-loss-1",
    points=0.5,
    en="causal_lm_loss computes in float32: bf16 logits are cast first, the loss is float32",
    zh="causal_lm_loss 用 float32 计算：bf16 的 logits 先转 float32，损失为 float32",
)
def loss_bf16(learner, variant):
    logits, labels = random_batch(variant)
    logits = logits.to(torch.bfloat16)
    got = learner.call("causal_lm_loss", logits, labels)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32, f"dtype {getattr(got, 'dtype', None)}"
    want = loss_reference(logits.float(), labels)
    assert_close(scalar(got), want, rtol=1e-5, atol=1e-6, what="causal_lm_loss of bf16 logits")


@check(
    "03-loss-1",
    points=0.5,
    en="causal_lm_loss on a real batch of the lab's model equals the cross-entropy of its logits",
    zh="causal_lm_loss 在本实验模型的真实批次上等于其 logits 的交叉熵",
)
def loss_real_batch(learner, variant, reference):
    rng = variant.random
    n = reference.eval("len(fit_samples)")
    # windows from the ends of two real samples (the answer part), the second one shorter and padded: the
    # logits of a large vocabulary stay small enough to send back
    samples = []
    for length in (rng.randint(16, 24), rng.randint(6, 15)):
        sample = reference.eval("fit_samples[i]", i=rng.randrange(n))
        samples.append({"input_ids": sample["input_ids"][-length:], "labels": sample["labels"][-length:]})
    batch = collate_reference(samples, reference.get("PAD_ID"))
    ids, mask = torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"])
    labels = torch.tensor(batch["labels"])
    logits = reference.run("batch_logits", ids, mask)
    got = learner.run("loss_of", logits, labels)
    tol = 1e-5 if reference.eval("str(DTYPE)") == "torch.float32" else 1e-3
    want = loss_reference(logits.float(), labels)
    assert_close(scalar(got), want, rtol=tol, atol=tol, what="causal_lm_loss of the lab's model's logits")


# ---------------------------------------------------------------- 03-metrics-1: the metrics


def lcs_reference(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def rouge_reference(p, r):
    lcs = lcs_reference(p, r)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(p), lcs / len(r)
    return 2 * precision * recall / (precision + recall)


def parse_reference(text):
    try:
        value = json.loads(text.strip())
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def score_reference(predictions, references):
    parsed = [parse_reference(p) for p in predictions]

    def field(report, name):
        value = (report or {}).get(name, "")
        return value if isinstance(value, str) else ""

    n = len(predictions)
    exact = {k: sum(p is not None and field(p, k) == ref[k] for p, ref in zip(parsed, references)) / n for k in EXACT}
    rouge = [rouge_reference(field(p, k), ref[k]) for p, ref in zip(parsed, references) for k in TEXT]
    return {
        "valid_json": sum(p is not None for p in parsed) / n,
        "exact_match": exact,
        "rouge_l": sum(rouge) / len(rouge),
    }


def han(rng, low, high, alphabet=HAN):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))


@check(
    "03-metrics-1",
    points=0.75,
    en="lcs_length is the length of the longest common subsequence of two strings (characters)",
    zh="lcs_length 是两个字符串按字符的最长公共子序列长度",
)
def metrics_lcs(learner, variant):
    rng = variant.random
    pairs = [(han(rng, 0, 10, "划痕气泡裂纹"), han(rng, 0, 10, "划痕气泡裂纹")) for _ in range(20)]
    pairs += [("ABCBDAB", "BDCABA"), ("", "划痕"), (han(rng, 1, 5), "")]
    got = learner.eval("[lcs_length(a, b) for a, b in p]", p=pairs)
    assert got == [lcs_reference(a, b) for a, b in pairs], "lcs lengths"
    assert all(type(x) is int for x in got), "ints"


@check(
    "03-metrics-1",
    points=0.5,
    en="rouge_l_f1 is 2PR / (P + R) of the character LCS, 0.0 for an empty string or nothing shared",
    zh="rouge_l_f1 为字符 LCS 的 2PR / (P + R)，任一字符串为空或没有公共字符时为 0.0",
)
def metrics_rouge(learner, variant):
    rng = variant.random
    pairs = [(han(rng, 1, 8), han(rng, 1, 8)) for _ in range(12)] + [("", han(rng, 1, 4)), ("气泡", "划痕")]
    got = learner.eval("[rouge_l_f1(a, b) for a, b in p]", p=pairs)
    assert isinstance(got, list) and len(got) == len(pairs), "one value per pair"
    for (a, b), value in zip(pairs, got):
        assert type(value) is float, label(f"rouge_l_f1 returned {type(value).__name__}", a=a, b=b)
        assert_close(value, rouge_reference(a, b), rtol=0, atol=1e-12, what=label("rouge_l_f1", a=a, b=b))


@check(
    "03-metrics-1",
    points=0.75,
    en="parse_report returns the dict for exactly one JSON object (whitespace stripped), None for anything else",
    zh="parse_report 只在整体是一个 JSON 对象（去掉首尾空白）时返回 dict，其他情况返回 None",
)
def metrics_parse(learner, variant):
    rng = variant.random
    report = {k: han(rng, 1, 4) for k in rng.sample(KEYS, 3)}
    text = json.dumps(report, ensure_ascii=False)
    cases = [
        (rng.choice([" ", "\n", "\t "]) + text + rng.choice(["", " \n", "\n\n"]), report),
        ("[1, 2]", None),
        ("null", None),
        (str(rng.randint(0, 99)), None),
        (text + " " + han(rng, 1, 3), None),
        (text[: rng.randint(1, len(text) - 1)], None),
        (han(rng, 1, 6), None),
        ('"' + han(rng, 1, 4) + '"', None),
    ]
    got = learner.eval("[parse_report(t) for t in c]", c=[t for t, _ in cases])
    assert isinstance(got, list) and len(got) == len(cases), "one value per text"
    for (text_in, want), value in zip(cases, got):
        assert value == want and (want is None) == (value is None), f"{text_in!r}: {value!r}"


@check(
    "03-metrics-1",
    points=1,
    en="score_predictions: rates over all predictions, invalid ones score 0, a missing or non-string field counts as ''",
    zh="score_predictions：比例除以预测条数，无效预测记 0，缺失或不是字符串的字段当作 ''",
)
def metrics_scores(learner, variant):
    rng = variant.random
    references = [{k: han(rng, 1, 5, "划痕气泡裂纹崩边") for k in KEYS} for _ in range(rng.randint(4, 8))]
    predictions = []
    for ref in references:
        kind = rng.choice(["same", "edited", "number", "missing", "invalid", "list"])
        report = dict(ref)
        if kind == "edited":
            report[rng.choice(KEYS)] = han(rng, 0, 5, "划痕气泡裂纹崩边")
        elif kind == "number":
            report[rng.choice(EXACT + TEXT)] = rng.randint(0, 9)
        elif kind == "missing":
            del report[rng.choice(KEYS)]
        text = json.dumps(report, ensure_ascii=False)
        predictions.append({"invalid": text[:-1], "list": json.dumps([report], ensure_ascii=False)}.get(kind, text))
    got = learner.call("score_predictions", predictions, references)
    want = score_reference(predictions, references)
    assert type(got) is dict and set(got) >= {"valid_json", "exact_match", "rouge_l"}, "keys"
    assert_close({k: got[k] for k in want}, want, rtol=1e-9, atol=1e-12, what="score_predictions")


# ---------------------------------------------------------------- 03-beats-base-1: after training


def trained_state(learner, reference):
    """The notebook's results (the learner's kernel) beside the run's parameters (the harness's) and
    ``STEPS_HERE`` as the solution found it: with the course's build, its loop runs only the first steps."""
    state = {
        name: learner.get(name) for name in ("losses", "base_scores", "tuned_scores", "base_dev_loss", "tuned_dev_loss")
    }
    state.update({name: PARAMETERS[name] for name in ("MAX_STEPS", "N_EVAL")})  # noqa: F821 (the run's)
    state["STEPS_HERE"] = reference.get("STEPS_HERE")
    losses = state["losses"]
    assert type(losses) is list and losses and all(type(x) is float for x in losses), "losses"
    return state


def mean_exact(scores):
    return sum(scores["exact_match"][k] for k in EXACT) / len(EXACT)


GENERATED = {}  # (a reference kernel, an adapter's digest) -> the reports that kernel's model generates with it
AGREEMENT = 0.9  # of the notebook's predictions must be the generated ones (greedy decoding may flip on a GPU)


def generated_reports(learner, reference):
    """The reports the learner's adapter generates, greedy, in the reference kernel's model: once
    per reference and adapter (four checks score them)."""
    weights = learner_adapter(learner, reference)
    digest = hashlib.sha256()
    for key in sorted(weights):
        digest.update(key.encode() + weights[key].contiguous().flatten().view(torch.uint8).numpy().tobytes())
    key = (reference, digest.hexdigest())  # the object itself: no other reference can take its id
    if key not in GENERATED:
        GENERATED[key] = reference.run("reports_with", weights)
    return GENERATED[key]


def recomputed_scores(learner, reference):
    """base and tuned scores recomputed here from the notebook's predictions and the lab's
    references (the reference kernel's: any later cell of the learner's may rebind theirs). The
    predictions must be what the models generate: the base model's as the reference kernel has
    them, the tuned ones as the learner's adapter generates them in the reference's model."""
    references = reference.get("EVAL_REFERENCES")
    n = PARAMETERS["N_EVAL"]  # noqa: F821 (the run's, from the harness)
    assert type(references) is list and 0 < len(references) <= n, "EVAL_REFERENCES"
    assert all(type(r) is dict and set(KEYS) <= set(r) for r in references), "EVAL_REFERENCES"
    out = {}
    for name in ("base", "tuned"):
        predictions = learner.get(f"{name}_predictions")
        assert type(predictions) is list and len(predictions) == len(references), f"{name}_predictions"
        assert all(type(p) is str for p in predictions), f"{name}_predictions"
        generated = reference.get("base_predictions") if name == "base" else generated_reports(learner, reference)
        same = sum(p == g for p, g in zip(predictions, generated))
        assert same >= AGREEMENT * len(generated), (
            f"[[learner: {name}_predictions are not what the model generates]] {same} of {len(generated)} the same"
        )
        out[name] = score_reference(predictions, references)
    return out


def consistent(claimed, recomputed, what):
    """The scores the notebook reports are the ones recomputed here (other keys of theirs aside)."""
    assert type(claimed) is dict and set(recomputed) <= set(claimed), what
    assert_close({k: claimed[k] for k in recomputed}, recomputed, rtol=0, atol=1e-9, what=what)


@check(
    "03-beats-base-1",
    points=0.25,
    en="training: the losses are finite, one per step, and the last five average below the first",
    zh="训练：损失都是有限值、每步一个，最后五步的平均低于第一步",
    counts_with="trained_is_the_recipe",  # losses the kernel reports count once they are the recipe's
)
def trained_loss_falls(learner, variant, reference):
    state = trained_state(learner, reference)
    losses = state["losses"]
    assert all(math.isfinite(x) for x in losses), "a loss is not finite"
    if PARAMETERS["TRAINER"] == "loop":  # noqa: F821 (the run's, from the harness)
        assert len(losses) == state["STEPS_HERE"], f"{len(losses)} losses for {state['STEPS_HERE']} steps"
    assert np.mean(losses[-5:]) < losses[0], f"{losses[0]} -> {np.mean(losses[-5:])}"
    metrics = json.loads(learner.file("metrics.json"))
    assert metrics["losses"] == losses and metrics["steps"] == len(losses), "metrics.json disagrees"


def learner_adapter(learner, reference):
    """The learner's adapter weights, each a tensor of the lab's LoRA (names and shapes as the
    reference's), with some ``lora_B`` trained away from its zero start."""
    weights = learner.run("adapter_weights")
    assert isinstance(weights, dict) and all(isinstance(v, torch.Tensor) for v in weights.values()), "adapter weights"
    shapes = reference.run("adapter_shapes")
    assert {k: list(v.shape) for k, v in weights.items()} == shapes, "the adapter's tensors are not the lab's LoRA"
    assert any("lora_B" in k and bool(v.float().abs().sum() > 0) for k, v in weights.items()), "an untrained adapter"
    return weights


@check(
    "03-beats-base-1",
    points=0.25,
    en="the tuned adapter is the recipe's: your loop's losses within a relative 1e-3 of the course's build, "
    "whose weights are loaded, or all MAX_STEPS run here",
    zh="微调后的适配器来自这个配方：你的循环的损失与课程构建相对差不超过 1e-3 且加载了构建的权重，或者在这里跑完全部 MAX_STEPS 步",
)
def trained_is_the_recipe(learner, variant, reference):
    state = trained_state(learner, reference)
    # the course's build as the solution finds it: a learner's COURSE_BUILD may name a folder of its own
    losses, build = state["losses"], reference.eval("str(COURSE_BUILD) if COURSE_BUILD else None")
    if build is None:  # the solution's STEPS_HERE is MAX_STEPS then: every step runs here
        assert PARAMETERS["TRAINER"] != "loop" or len(losses) == state["MAX_STEPS"], "one loss per step"  # noqa: F821
        return
    manifest = json.loads(reference.eval("open(p, encoding='utf-8').read()", p=build + "/rocmlab-adapter.json"))
    theirs = manifest["losses"]
    assert manifest["steps"] == state["MAX_STEPS"] == len(theirs) and len(losses) <= len(theirs), "the build's steps"
    for step, (mine, ref) in enumerate(zip(losses, theirs), 1):
        assert abs(mine - ref) <= 1e-3 * ref, f"step {step}: {mine} vs the build's {ref}"
    # the build's weights read by the reference kernel, compared here: the learner's kernel may rebind the loader
    theirs = reference.run("saved_weights", build + "/adapter_model.safetensors")
    mine = learner_adapter(learner, reference)
    assert set(mine) == set(theirs) and all(torch.equal(v, theirs[k]) for k, v in mine.items()), (
        "the adapter evaluated is not the build's"
    )


@check(
    "03-beats-base-1",
    points=0.25,
    en="training: the dev loss after tuning is below the base model's",
    zh="训练：微调后的 dev 损失低于基座模型",
)
def trained_dev_loss(learner, variant, reference):
    state = trained_state(learner, reference)
    base, tuned = state["base_dev_loss"], state["tuned_dev_loss"]
    assert type(base) is float and type(tuned) is float and math.isfinite(tuned), "dev losses"
    # both measured by the reference kernel on the lab's dev set: the base model, and the
    # learner's own adapter weights loaded into the reference's model for that one measure
    want_base = reference.get("base_dev_loss")
    want_tuned = reference.run("dev_loss_with", learner_adapter(learner, reference))
    assert_close(base, want_base, rtol=1e-3, atol=0, what="base_dev_loss against the lab's model's")
    assert_close(tuned, want_tuned, rtol=1e-3, atol=0, what="tuned_dev_loss against your adapter's in the lab's model")
    assert want_tuned < want_base, f"dev loss {want_base} -> {want_tuned}"
    metrics = json.loads(learner.file("metrics.json"))
    assert metrics["dev_loss"] == {"base": base, "tuned": tuned}, "metrics.json disagrees"


@check(
    "03-beats-base-1",
    points=0.25,
    en="tuned valid-JSON rate >= max(0.75, base + 0.5)",
    zh="微调后的 JSON 有效率 >= max(0.75, 基座 + 0.5)",
)
def tuned_valid_json(learner, variant, reference):
    scores = recomputed_scores(learner, reference)
    assert scores["tuned"]["valid_json"] >= max(0.75, scores["base"]["valid_json"] + 0.5), scores


@check(
    "03-beats-base-1",
    points=0.5,
    en="tuned defect_type exact match >= 0.5 and mean exact match >= base + 0.2",
    zh="微调后 defect_type 精确匹配 >= 0.5，且平均精确匹配 >= 基座 + 0.2",
)
def tuned_exact_match(learner, variant, reference):
    scores = recomputed_scores(learner, reference)
    assert scores["tuned"]["exact_match"]["defect_type"] >= 0.5, scores["tuned"]
    assert mean_exact(scores["tuned"]) >= mean_exact(scores["base"]) + 0.2, scores


@check(
    "03-beats-base-1",
    points=0.25,
    en="tuned ROUGE-L >= base + 0.05",
    zh="微调后的 ROUGE-L >= 基座 + 0.05",
)
def tuned_rouge(learner, variant, reference):
    scores = recomputed_scores(learner, reference)
    assert scores["tuned"]["rouge_l"] >= scores["base"]["rouge_l"] + 0.05, scores


@check(
    "03-beats-base-1",
    points=0.25,
    en="the reported scores are the metrics of the predictions, and score_predictions called again gives the same",
    zh="报告的分数就是这些预测的指标，再调用一次 score_predictions 结果相同",
)
def scores_are_pure(learner, variant, reference):
    state, scores = trained_state(learner, reference), recomputed_scores(learner, reference)
    consistent(state["base_scores"], scores["base"], "base_scores")
    consistent(state["tuned_scores"], scores["tuned"], "tuned_scores")
    again = learner.eval("score_predictions(tuned_predictions, r)", r=reference.get("EVAL_REFERENCES"))
    assert again == state["tuned_scores"], "a second call differs"
    metrics = json.loads(learner.file("metrics.json"))
    assert metrics["tuned"] == state["tuned_scores"] and metrics["base"] == state["base_scores"], "metrics.json"


# ---------------------------------------------------------------- 03-merge-1: reload_and_merge


def probe_ids(reference, variant):
    vocab = reference.eval("fresh_base.config.vocab_size")
    gen = variant.torch()
    return torch.randint(0, vocab, (2, variant.random.randint(6, 24)), generator=gen)


@check(
    "03-merge-1",
    points=0.75,
    en="the merged model's logits match the adapter model's (1e-4 in fp32, 0.25 in bf16)",
    zh="合并后模型的 logits 与带适配器的模型一致（fp32 误差 1e-4，bf16 误差 0.25）",
)
def merged_logits_match(learner, variant, reference):
    ids = probe_ids(reference, variant)
    # the adapter model's logits: the learner's adapter weights in the reference kernel's model
    adapter = reference.run("logits_with", learner_adapter(learner, reference), ids)
    merged = learner.run("logits_of_merged", ids)
    tol = 1e-4 if reference.eval("str(DTYPE)") == "torch.float32" else 0.25
    assert_close(merged, adapter, rtol=tol, atol=tol, what="merged_model's logits against the adapter model's")


@check(
    "03-merge-1",
    points=0.5,
    en="reload_and_merge returns the plain model, not a PeftModel: the base model's parameters, with the adapter "
    "merged into their weights and no LoRA layer left",
    zh="reload_and_merge 返回普通模型，不是 PeftModel：参数与底座模型相同，适配器已合并进权重，不再有 LoRA 层",
    counts_with="merged_logits_match",  # the fresh base, never merged, is plain too
)
def merged_is_plain(learner, variant, reference):
    # the class as what it holds, asked with torch's own methods: every parameter name of the model
    # (""), and under projections drawn here, the plain layer's (a LoRA layer holds base_layer, lora_A, lora_B)
    plain = reference.run("plain_names_under", [""])[""]
    lora = [n for n in plain if n.endswith("_proj.weight")]
    asked = variant.random.sample(lora, min(3, len(lora))) + variant.random.sample(plain, 1)
    modules = ["", *sorted({name.rpartition(".")[0] for name in asked[:3]})]
    got, want = learner.run("merged_names_under", modules), reference.run("plain_names_under", modules)
    assert isinstance(got, dict), "parameter names"
    for module in modules:
        assert got.get(module) == want[module], (
            learner_says("not the plain model's parameters", "参数与普通模型的不同")
            + f" {module or 'the model'}: {str(got.get(module))[:120]}"
        )
    # they hold the merge: the learner's adapter merged in the reference kernel's model
    got = learner.run("parameters_of_merged", asked)
    want = reference.run("merged_parameters", learner_adapter(learner, reference), asked)
    fp32 = reference.eval("str(DTYPE)") == "torch.float32"
    rtol, atol = (1e-5, 1e-6) if fp32 else (2**-7, 1e-6)  # bf16: one rounding of the sum apart
    assert_close(got, want, rtol=rtol, atol=atol, what="merged_model's parameters against base + the adapter's delta")


@check(
    "03-merge-1",
    points=0.25,
    en="the merged model is in eval mode: with every dropout rate of its layers turned up, its logits stay the "
    "adapter model's",
    zh="合并后的模型处于 eval 模式：把各层的 dropout 调高后，它的 logits 仍与带适配器的模型一致",
    # a model that forwards to the adapter model shows eval-mode logits without being the merge
    counts_with=("merged_logits_match", "merged_is_plain"),
)
def merged_eval_mode(learner, variant, reference):
    # the mode as what it does: in training mode dropout applies, and each forward pass drops its own part
    ids, p = probe_ids(reference, variant), round(variant.random.uniform(0.5, 0.9), 2)
    adapter = reference.run("logits_with", learner_adapter(learner, reference), ids)
    sites, passes = learner.run("logits_of_merged_under_dropout", ids, p)
    assert sites == reference.run("dropout_sites"), f"{sites} dropout rates found, the lab's model has others"
    tol = 1e-4 if reference.eval("str(DTYPE)") == "torch.float32" else 0.25
    assert isinstance(passes, list) and len(passes) == 2, "two forward passes"
    for k, logits in enumerate(passes, 1):
        assert_close(logits, adapter, rtol=tol, atol=tol, what=f"pass {k} with dropout {p}: logits")


SAFETENSORS_HEADER_MAX = 2**24  # bytes of the JSON header a saved adapter may have
# where the notebook saves the adapter, in the work folder (lab.py's text): never a path the kernel names
ADAPTER_FILE = LAB_CONSTANTS["ADAPTER_DIR"] + "/adapter_model.safetensors"  # noqa: F821 (given by the harness)


@check(
    "03-merge-1",
    points=0.5,
    en="the saved adapter holds your adapter's tensors, as many parameters as peft trains and lora_param_count gives",
    zh="保存的适配器就是你的适配器张量，参数个数等于 peft 的可训练参数个数和 lora_param_count 的结果",
)
def saved_adapter(learner, variant, reference):
    cfg, trainable = reference.eval("(fresh_base.config.to_dict(), peft_model.get_nb_trainable_parameters()[0])")
    want = lora_reference(cfg, PARAMETERS["LORA_R"])  # noqa: F821 (the run's, from the harness)
    # the whole file, parsed here: its header, tensors and size must agree (safetensors checks it)
    data = learner.file(ADAPTER_FILE, limit=8 + SAFETENSORS_HEADER_MAX + 4 * want + 1)
    assert isinstance(data, bytes) and len(data) <= 8 + SAFETENSORS_HEADER_MAX + 4 * want, "adapter file size"
    try:
        tensors = safetensors.torch.load(data)
    except Exception as exc:  # noqa: BLE001 (safetensors' own error types vary by version)
        raise AssertionError(
            learner_says("the saved adapter is not a safetensors file", "保存的适配器不是 safetensors 文件") + str(exc)
        ) from None
    shapes = reference.run("adapter_shapes")
    assert {k: list(v.shape) for k, v in tensors.items()} == shapes, "the saved tensors are not the lab's LoRA"
    saved = sum(v.numel() for v in tensors.values())
    assert saved == want == trainable, f"{saved} saved, peft trains {trainable}"
    mine = learner_adapter(learner, reference)
    assert all(torch.equal(v.float(), mine[k].float()) for k, v in tensors.items()), learner_says(
        "the saved adapter is not the one the notebook evaluated", "保存的适配器不是 notebook 评测的那个"
    )
    assert learner_count(learner, cfg, PARAMETERS["LORA_R"]) == want, "lora_param_count"  # noqa: F821


# ---------------------------------------------------------------- 03-memory-1: training_memory_gib


@check(
    "03-memory-1",
    points=0.75,
    en="training_memory_gib full fine-tuning: 16 bytes per parameter, in GiB (2^30 bytes)",
    zh="training_memory_gib 全量微调：每参数 16 字节，单位 GiB（2^30 字节）",
)
def memory_full(learner, variant):
    rng = variant.random
    for n in [rng.randint(10**6, 10**11) for _ in range(4)] + [7_615_616_512]:
        got = learner.call("training_memory_gib", n)
        assert_close(got, 16 * n / 2**30, rtol=1e-12, atol=0, what=label("training_memory_gib", n_params=n))


@check(
    "03-memory-1",
    points=0.75,
    en="training_memory_gib LoRA: 2 bytes per base parameter plus 16 per adapter parameter, in GiB",
    zh="training_memory_gib LoRA：底座每参数 2 字节，加适配器每参数 16 字节，单位 GiB",
)
def memory_lora(learner, variant):
    rng = variant.random
    for _ in range(4):
        n = rng.randint(10**6, 10**11)
        lora = rng.randint(1, n // 50)
        got = learner.call("training_memory_gib", n, lora)
        want = (2 * n + 16 * lora) / 2**30
        assert_close(got, want, rtol=1e-12, atol=0, what=label("training_memory_gib", n_params=n, lora_params=lora))


@check(
    "03-memory-1",
    points=0.5,
    en="training_memory_gib returns a float (0.0 for no parameters)",
    zh="training_memory_gib 返回 float（没有参数时为 0.0）",
    counts_with="memory_full",
)
def memory_float(learner, variant):
    rng = variant.random
    cases = [(0,), (rng.randint(1, 10**9),), (rng.randint(10**6, 10**9), rng.randint(1, 10**5))]
    for args in cases:
        got = learner.call("training_memory_gib", *args)
        assert type(got) is float, f"{args}: {type(got).__name__}"
    assert learner.call("training_memory_gib", 0) == 0.0


# ---------------------------------------------------------------- 03-stretch-attention-1: choose_attention

CK_TARGETS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1102", "gfx1151", "gfx1200", "gfx1201")
OTHER_ARCHS = ("gfx906", "gfx908", "gfx1030", "gfx1010", "sm_80", "sm_90")


def timings(rng, faster):
    """Non-overlapping samples: flash faster (all below sdpa) or slower."""
    low = [round(rng.uniform(0.5, 1.0), 4) for _ in range(rng.randint(1, 5))]
    high = [round(rng.uniform(1.01, 2.0), 4) for _ in range(rng.randint(1, 5))]
    return {"flash_attention_2": low, "sdpa": high} if faster else {"flash_attention_2": high, "sdpa": low}


def choose(learner, arch, version, timing):
    got = learner.call("choose_attention", arch, version, timing)
    assert got in ("sdpa", "flash_attention_2") and type(got) is str, f"returned {got!r}"
    return got


@check(
    "03-stretch-attention-1",
    points=0.5,
    en='choose_attention: "sdpa" when arch or flash_version is None',
    zh='choose_attention：arch 或 flash_version 为 None 时返回 "sdpa"',
    counts_with="attention_rule2",  # a rule for when not to choose flash: a constant "sdpa" keeps it
)
def attention_rule1(learner, variant):
    rng = variant.random
    fast = timings(rng, True)
    assert choose(learner, None, rng.choice(["2.8.4", "2.10.0"]), fast) == "sdpa"
    assert choose(learner, rng.choice(CK_TARGETS), None, fast) == "sdpa"


@check(
    "03-stretch-attention-1",
    points=0.5,
    en="choose_attention: only flash-attn's CK targets (gfx90a, gfx942, gfx950, gfx11*, gfx12*) are candidates",
    zh="choose_attention：只有 flash-attn 的 CK 目标（gfx90a、gfx942、gfx950、gfx11*、gfx12*）才考虑 flash-attn",
)
def attention_rule2(learner, variant):
    rng = variant.random
    for arch in rng.sample(CK_TARGETS, 3):
        assert choose(learner, arch, "2.10.0", timings(rng, True)) == "flash_attention_2", arch
    for arch in rng.sample(OTHER_ARCHS, 3):
        assert choose(learner, arch, "2.10.0", timings(rng, True)) == "sdpa", arch


@check(
    "03-stretch-attention-1",
    points=0.5,
    en='choose_attention: "sdpa" on RDNA (gfx11*, gfx12*) with flash_version below 2.8.4 (PEP 440)',
    zh='choose_attention：RDNA（gfx11*、gfx12*）上 flash_version 低于 2.8.4（PEP 440）时返回 "sdpa"',
)
def attention_rule3(learner, variant):
    rng = variant.random
    rdna = [a for a in CK_TARGETS if a.startswith(("gfx11", "gfx12"))]
    for version in ("2.8.3", "2.8.3.post1", "2.7.4", "2.8.0"):
        assert choose(learner, rng.choice(rdna), version, timings(rng, True)) == "sdpa", version
    for version in ("2.8.4", "2.10.0", "2.9.1"):
        assert choose(learner, rng.choice(rdna), version, timings(rng, True)) == "flash_attention_2", version
    assert choose(learner, rng.choice(["gfx90a", "gfx942"]), "2.8.3.post1", timings(rng, True)) == "flash_attention_2"


@check(
    "03-stretch-attention-1",
    points=0.5,
    en="choose_attention: flash_attention_2 only when both lists are non-empty and max(flash) < min(sdpa)",
    zh="choose_attention：只有两个列表都非空且 max(flash) < min(sdpa) 时才返回 flash_attention_2",
    counts_with="attention_rule2",
)
def attention_rule4(learner, variant):
    rng = variant.random
    arch = rng.choice(["gfx942", "gfx90a", "gfx1201"])
    assert choose(learner, arch, "2.8.4", timings(rng, False)) == "sdpa", "slower"
    value = round(rng.uniform(0.5, 2.0), 3)
    cases = [
        {"sdpa": [value, value + 0.5], "flash_attention_2": [value - 0.1, value + 0.1]},  # overlap
        {"sdpa": [value], "flash_attention_2": [value]},  # equal
        {"sdpa": [value], "flash_attention_2": []},
        {"sdpa": [], "flash_attention_2": [value / 2]},
        {"flash_attention_2": [value / 2]},
        {},
    ]
    for timing in cases:
        assert choose(learner, arch, "2.8.4", timing) == "sdpa", timing
