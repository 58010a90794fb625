"""Lab 03 (Chinese-domain LoRA fine-tuning): source shape and the solution functions.

Fast tests read solutions/03-lora-finetune-zh/lab.py and run its solution cells against tiny
random Qwen2 models and a byte-level tokenizer built here; the slow test executes the whole
notebook in the smoke profile with papermill.
"""

import hashlib
import json
import math
import unicodedata
from types import SimpleNamespace

import pytest
from forged_tokenizer import TwoTokens, two_token_sample
from labsource import LabSource, definitions, student
from lazy_imports import skip_unless_installed

torch = pytest.importorskip("torch")
skip_unless_installed("peft", "transformers")

SOURCE = LabSource("03-lora-finetune-zh")
LAB = SOURCE.folder
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def ns():
    """Every solution cell run in one namespace (they need no model)."""
    import torch.nn.functional as F
    from peft import PeftModel

    namespace = {
        "torch": torch,
        "F": F,
        "json": json,
        "math": math,
        "hashlib": hashlib,
        "unicodedata": unicodedata,
        "PeftModel": PeftModel,
    }
    return SOURCE.run_solutions(namespace=namespace)


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level tokenizer with the Qwen specials, eos/pad and chat template of the contract."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core)
    tok.add_special_tokens({"additional_special_tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]})
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    tok.chat_template = CHAT_TEMPLATE
    return tok


def tiny_config(**overrides):
    import transformers

    shape = dict(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=72,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return transformers.Qwen2Config(**{**shape, **overrides})


def tiny_model(seed=0, **overrides):
    torch.manual_seed(seed)
    from transformers import Qwen2ForCausalLM

    return Qwen2ForCausalLM(tiny_config(**overrides)).eval()


MESSAGES = [
    {"role": "system", "content": "整理成 JSON。"},
    {"role": "user", "content": "焊点虚焊"},
    {"role": "assistant", "content": '{"defect_type": "虚焊"}'},
]


# -- source shape --------------------------------------------------------------------------


def test_smoke_uses_the_offline_model_and_gpu_a_real_qwen():
    # that profile parameters exist in the parameters cell is checked for every lab by rocmlab.course.source
    profiles = SOURCE.lab.profiles
    assert profiles["smoke"].params["MODEL"] == "tiny-qwen-zh"
    assert profiles["gpu"].params["MODEL"] == "Qwen/Qwen2.5-0.5B-Instruct"


def test_graded_cells_are_well_formed():
    tests, solutions = SOURCE.tagged("test"), SOURCE.tagged("solution")
    assert len(SOURCE.graded) == len(tests) + len(solutions), "duplicate grade_id"
    assert all(grade_id.startswith("03-") for grade_id in SOURCE.graded)
    assert len(tests) >= 7
    for cell in tests:
        assert int(cell.metadata["points"]) > 0, cell.metadata
        assert "HIDDEN TESTS" not in cell.source, cell.metadata  # graded by checks.py since 1.3.0
    for cell in solutions:
        assert cell.source.count("### BEGIN SOLUTION") == cell.source.count("### END SOLUTION") >= 1, cell.metadata


def test_every_test_cell_is_graded_by_checks_whose_points_add_up():
    from rocmlab.harness import hidden_files, load_checks, problems

    checks_file = LAB / "checks.py"
    checks = load_checks(checks_file.read_text(encoding="utf-8"), str(checks_file), hidden_files(checks_file))
    cells = {cell.metadata["grade_id"]: float(cell.metadata["points"]) for cell in SOURCE.tagged("test")}
    assert problems(checks, cells) == []
    assert len({c.name for c in checks}) == len(checks)


def test_prose_comes_in_language_pairs():
    prose = [cell for cell in SOURCE.cells if cell.cell_type == "markdown"]
    assert len(SOURCE.tagged("zh")) == len(SOURCE.tagged("en")) == len(prose) // 2


def test_every_solution_cell_has_a_contract_in_both_languages_right_above():
    """As in labs 01/02/04/05: a zh cell with 约定 and an en cell with "contract" right above each solution."""
    for i, cell in enumerate(SOURCE.cells):
        if "solution" not in cell.metadata.get("tags", []):
            continue
        zh, en = SOURCE.cells[i - 2], SOURCE.cells[i - 1]
        assert "zh" in zh.metadata.get("tags", []) and "约定" in zh.source, cell.metadata["grade_id"]
        assert "en" in en.metadata.get("tags", []) and "contract" in en.source, cell.metadata["grade_id"]


def test_stretch_comes_after_the_core_and_nothing_later_needs_it():
    ids = [cell.metadata["grade_id"] for cell in SOURCE.cells if "grade_id" in cell.metadata]
    stretch = [i for i, g in enumerate(ids) if g.startswith("03-stretch-")]
    assert stretch and stretch == list(range(len(ids) - len(stretch), len(ids))), ids
    first = next(i for i, c in enumerate(SOURCE.cells) if "03-stretch-" in c.metadata.get("grade_id", ""))
    headings = [c.source for c in SOURCE.cells[:first] if c.cell_type == "markdown"][-6:]
    assert any("## 选做 S1" in h for h in headings) and any("## Optional stretch S1" in h for h in headings)
    later = [
        c for c in SOURCE.code_cells[SOURCE.code_cells.index(SOURCE.cells[first]) :] if "grade_id" not in c.metadata
    ]
    for cell in later:
        assert "choose_attention(" not in cell.source or "except NotImplementedError" in cell.source, cell.source
    assert SOURCE.lab.minutes <= 105


def test_zh_prose_uses_the_course_terms():
    zh = "\n".join(c.source for c in SOURCE.cells if "zh" in c.metadata.get("tags", []))
    for wrong in ("smoke 配置", "Lab 0", "诚实的基准测试", "丢掉几天", "实践者报告"):
        assert wrong not in zh, wrong
    assert "冒烟（smoke）配置" in zh and "# 实验 03" in zh


def test_bf16_is_decided_from_the_arch_not_from_the_probe():
    (setup,) = [c.source for c in SOURCE.code_cells if "def has_bf16_matrix_cores" in c.source]
    assert "is_bf16_supported()" not in setup.split("def has_bf16_matrix_cores")[1]
    keep = definitions(setup, constants=lambda node: node.targets[0].id == "BF16_MATRIX_ARCHS")
    fast = SOURCE.run(keep)["has_bf16_matrix_cores"]
    for arch in ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1200", "gfx1201", "sm_80", "sm_90"):
        assert fast(arch), arch
    for arch in (None, "gfx900", "gfx906", "gfx1010", "gfx1030", "gfx1036", "sm_75"):
        assert not fast(arch), arch


# -- exercise 1: SFT sample -------------------------------------------------------------------


def test_sft_sample_matches_the_chat_template_and_ends_with_im_end(ns, tokenizer):
    sample = ns["build_sft_sample"](tokenizer, MESSAGES)
    full = tokenizer.apply_chat_template(MESSAGES, tokenize=False)
    assert sample["input_ids"] == tokenizer(full.rstrip("\n"), add_special_tokens=False)["input_ids"]
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert sample["labels"][-1] == end_id != tokenizer.pad_token_id
    prompt = tokenizer.apply_chat_template(MESSAGES[:-1], tokenize=False, add_generation_prompt=True)
    n_prompt = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert sample["labels"][:n_prompt] == [-100] * n_prompt
    assert sample["labels"][n_prompt:] == sample["input_ids"][n_prompt:]


def test_sft_sample_padding_is_masked_and_overflow_raises(ns, tokenizer):
    n = len(ns["build_sft_sample"](tokenizer, MESSAGES)["input_ids"])
    padded = ns["build_sft_sample"](tokenizer, MESSAGES, pad_to=n + 3)
    assert padded["input_ids"][-3:] == [tokenizer.pad_token_id] * 3
    assert padded["labels"][-3:] == [-100] * 3 and padded["attention_mask"][-4:] == [1, 0, 0, 0]
    with pytest.raises(ValueError):
        ns["build_sft_sample"](tokenizer, MESSAGES, pad_to=n - 1)


# -- exercise 2: LoRA count and B = 0 -------------------------------------------------------


@pytest.mark.parametrize("r,targets", [(8, PROJECTIONS), (3, ("q_proj", "v_proj")), (5, ("down_proj",))])
def test_lora_count_matches_peft(ns, r, targets):
    import peft

    model = tiny_model(head_dim=12)
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=r, target_modules=list(targets), task_type="CAUSAL_LM"))
    assert ns["lora_param_count"](model.config, r, targets) == wrapped.get_nb_trainable_parameters()[0]


def test_lora_at_init_leaves_logits_bit_identical():
    import peft

    model = tiny_model()
    ids = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(input_ids=ids).logits
        wrapped = peft.get_peft_model(
            model, peft.LoraConfig(r=4, target_modules=list(PROJECTIONS), task_type="CAUSAL_LM")
        )
        assert torch.equal(before, wrapped(input_ids=ids).logits)


# -- exercise 3: data pipeline --------------------------------------------------------------


def test_dedupe_normalises_width_and_spaces(ns):
    records = [
        {"id": "1", "description": "Ａ 面划痕"},
        {"id": "2", "description": "A面划痕"},
        {"id": "3", "description": "气泡"},
    ]
    assert [r["id"] for r in ns["dedupe_records"](records)] == ["1", "3"]


def test_split_is_deterministic_order_free_and_stable_when_data_grows(ns):
    records = [{"id": f"q{i}", "description": ""} for i in range(300)]
    train, dev = ns["split_by_hash"](records, 0.2, seed=1)
    assert 30 < len(dev) < 90 and len(train) + len(dev) == 300
    assert ns["split_by_hash"](records[::-1], 0.2, seed=1)[1] == dev[::-1]
    grown = ns["split_by_hash"](records + [{"id": f"n{i}", "description": ""} for i in range(100)], 0.2, seed=1)[1]
    assert [r for r in grown if r["id"].startswith("q")] == dev


def test_collate_masks_come_from_lengths_even_when_pad_is_a_real_token(ns):
    batch = ns["collate"]([{"input_ids": [7, 7], "labels": [-100, 7]}, {"input_ids": [7], "labels": [7]}], pad_id=7)
    assert batch["attention_mask"].tolist() == [[1, 1], [1, 0]]
    assert batch["labels"].tolist() == [[-100, 7], [7, -100]]


# -- exercise 4: loss ----------------------------------------------------------------------


def test_causal_lm_loss_equals_the_model_loss(ns):
    model = tiny_model()
    ids = torch.randint(0, 300, (3, 11), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[:, :4] = -100
    labels[1, 8:] = -100
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    assert torch.allclose(ns["causal_lm_loss"](out.logits, labels), out.loss, atol=1e-6)


# -- exercise 5: metrics -------------------------------------------------------------------


@pytest.mark.parametrize(
    "a,b,expected",
    [("", "", 0), ("质检", "", 0), ("划痕返工", "划痕报废返工", 4), ("ABCBDAB", "BDCABA", 4), ("abc", "cba", 1)],
)
def test_lcs_golden(ns, a, b, expected):
    assert ns["lcs_length"](a, b) == expected == ns["lcs_length"](b, a)


def test_rouge_and_scores_golden(ns):
    assert ns["rouge_l_f1"]("质检报告", "质量检测报告") == pytest.approx(0.8)
    ref = {
        "defect_type": "划痕",
        "location": "边缘",
        "severity": "轻微",
        "disposition": "放行",
        "root_cause": "磨损",
        "action": "更换",
    }
    preds = [
        json.dumps(ref, ensure_ascii=False),
        '["not", "an", "object"]',
        '{"defect_type": "划痕", "location": "边"}',
    ]
    scores = ns["score_predictions"](preds, [ref] * 3)
    assert scores["valid_json"] == pytest.approx(2 / 3)
    assert scores["exact_match"] == pytest.approx({"defect_type": 2 / 3, "severity": 1 / 3, "disposition": 1 / 3})
    assert scores["rouge_l"] == pytest.approx((3 + 2 / 3) / 9)


# -- exercise 6: save, reload, merge -------------------------------------------------------


def test_reload_and_merge_reproduces_the_adapter_model(ns, tmp_path):
    import peft

    wrapped = peft.get_peft_model(
        tiny_model(), peft.LoraConfig(r=4, target_modules=list(PROJECTIONS), task_type="CAUSAL_LM")
    )
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    wrapped.save_pretrained(tmp_path)
    ids = torch.randint(0, 300, (1, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = wrapped(input_ids=ids).logits
        merged = ns["reload_and_merge"](tiny_model(), tmp_path)
        got = merged(input_ids=ids).logits
    assert not torch.allclose(expected, tiny_model()(input_ids=ids).logits, atol=1e-3)
    assert torch.allclose(got, expected, atol=1e-5)
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    size = (tmp_path / "adapter_model.safetensors").stat().st_size
    n_lora = ns["lora_param_count"](tiny_config(), 4)
    header = int.from_bytes((tmp_path / "adapter_model.safetensors").read_bytes()[:8], "little")
    assert size == 8 + header + 4 * n_lora


# -- exercise 7: memory --------------------------------------------------------------------


def test_memory_budget_formula(ns):
    assert ns["training_memory_gib"](2**30) == 16
    assert ns["training_memory_gib"](2**30, 2**26) == 2 + 1
    assert ns["training_memory_gib"](7_615_616_512) == pytest.approx(113.48, abs=0.01)


# -- the whole notebook --------------------------------------------------------------------


# -- stretch S1: the attention choice --------------------------------------------------------

FAST = {"sdpa": [2.0, 2.1], "flash_attention_2": [1.0, 1.2]}


@pytest.mark.parametrize(
    "arch,version,timings,expected",
    [
        (None, "2.8.4", FAST, "sdpa"),
        ("gfx942", None, FAST, "sdpa"),
        ("gfx942", "2.8.3", FAST, "flash_attention_2"),
        ("gfx90a", "2.8.3.post1", FAST, "flash_attention_2"),
        ("gfx908", "2.10.0", FAST, "sdpa"),
        ("gfx1030", "2.10.0", FAST, "sdpa"),
        ("sm_90", "2.10.0", FAST, "sdpa"),
        ("gfx1100", "2.8.3.post1", FAST, "sdpa"),
        ("gfx1201", "2.8.4", FAST, "flash_attention_2"),
        ("gfx1201", "2.8.4", {"sdpa": [1.0, 1.3], "flash_attention_2": [1.2, 1.4]}, "sdpa"),
        ("gfx950", "2.8.4", {"sdpa": [1.0], "flash_attention_2": [1.0]}, "sdpa"),
        ("gfx950", "2.8.4", {"sdpa": [1.0], "flash_attention_2": []}, "sdpa"),
        ("gfx950", "2.8.4", {}, "sdpa"),
    ],
)
def test_choose_attention_rules(ns, arch, version, timings, expected):
    assert ns["choose_attention"](arch, version, timings) == expected


def test_the_stretch_display_cell_runs_without_the_stretch():
    sol = SOURCE.graded["03-stretch-attention-sol-1"]
    (display,) = [c.source for c in SOURCE.code_cells if "except NotImplementedError" in c.source]
    out = SOURCE.run(student(sol), namespace={"ARCH": None, "FLASH_VERSION": None, "attention_timings": {}})
    with pytest.raises(NotImplementedError):
        out["choose_attention"](None, None, {})
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        SOURCE.run(display, namespace=out)
    assert "stretch S1 not done" in printed.getvalue()


# -- the classic mistakes checks.py lists (@mistake), proven in process ----------------------
# `rocmlab build --verify` runs each in a whole notebook; here, as CI can afford: the listed check fails
# and the visible test cell of the same exercise raises (lab 03's whole run with a mistaken loss or mask would
# train all 320 steps on the CPU, its losses no longer matching the course's cached build).


class LocalChannel:
    """The harness's requests answered by rocmlab.lab.answers in this process, over a namespace (no kernel)."""

    def __init__(self, names):
        self.names = names

    def ask(self, request):
        from rocmlab.lab.answers import evaluate

        return evaluate(json.loads(json.dumps(request)), self.names)


def listed_mistakes():
    from rocmlab.harness import load_checks, mistakes_of

    path = LAB / "checks.py"
    checks = load_checks(path.read_text(encoding="utf-8"), str(path))
    return [(c, m) for c in checks for m in mistakes_of([c])]


MISTAKES = listed_mistakes()


def test_the_two_classic_mistakes_are_listed():
    assert sorted(c.name for c, _ in MISTAKES) == ["collate_mask", "loss_random_batch"]


@pytest.mark.parametrize("listed,item", MISTAKES, ids=[c.name for c, _ in MISTAKES])
def test_a_listed_mistake_fails_its_check_and_the_visible_test(ns, listed, item):
    from rocmlab.harness import Learner, run_checks

    namespace = dict(ns)
    exec(compile(item.code, f"<mistake on {listed.name}>", "exec"), namespace)  # noqa: S102 (the course's own code)
    (result,) = run_checks([listed], Learner(LocalChannel(namespace)), seed=3)
    assert not result.passed, f"{item.rule['en']}: passes {listed.name}"
    right = run_checks([listed], Learner(LocalChannel(dict(ns))), seed=3)[0]
    assert right.passed, f"{listed.name} fails on the solution: {right.detail}"
    with pytest.raises(AssertionError):
        SOURCE.run(SOURCE.graded[listed.grade_id], namespace=dict(namespace), name=listed.grade_id)
    SOURCE.run(SOURCE.graded[listed.grade_id], namespace=dict(ns), name=listed.grade_id)  # the right one passes


# -- the reference kernel (issue 47) -------------------------------------------------------
def lab_checks_named(*names):
    from rocmlab.course.catalog import SMOKE
    from rocmlab.harness import hidden_files, lab_parameters, load_checks

    path = LAB / "checks.py"
    parameters = lab_parameters(path, SOURCE.lab.profile(SMOKE).parameters)
    checks = load_checks(path.read_text(encoding="utf-8"), str(path), hidden_files(path), parameters)
    return [c for c in checks if c.name in names]


def graded(checks, learner, reference):
    from rocmlab.harness import Learner, Reference, run_checks

    results = run_checks(checks, Learner(LocalChannel(learner)), seed=47, reference=Reference(LocalChannel(reference)))
    return {r.name: r for r in results}


def test_the_real_batch_loss_is_scored_on_the_logits_of_the_reference_kernels_model(ns):
    """A learner whose kernel's model gives uniform logits, and whose loss is the constant that
    uniform logits give, agreed with itself; the reference kernel's model gives other logits."""
    gen = torch.Generator().manual_seed(3)
    samples = [{"input_ids": torch.randint(0, 300, (30,), generator=gen).tolist()} for _ in range(5)]
    samples = [{**s, "labels": [-100] * 10 + s["input_ids"][10:]} for s in samples]
    reference = {"peft_model": tiny_model(), "fit_samples": samples, "PAD_ID": 0, "DTYPE": torch.float32}
    reference["device"] = torch.device("cpu")
    checks = lab_checks_named("loss_real_batch")
    assert checks[0].wants_reference
    honest = {"causal_lm_loss": ns["causal_lm_loss"], "device": torch.device("cpu")}
    assert graded(checks, honest, reference)["loss_real_batch"].passed

    class Uniform(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return type("Out", (), {"logits": torch.zeros(*input_ids.shape, 300)})()

    constant = {**honest, "causal_lm_loss": lambda logits, labels: torch.tensor(math.log(300))}
    its_own = {**reference, **constant, "peft_model": Uniform()}
    assert graded(checks, its_own, its_own)["loss_real_batch"].passed  # a reference taken in its kernel
    forged = graded(checks, constant, reference)["loss_real_batch"]
    assert not forged.passed and forged.detail.startswith("wrong") and not forged.error


KEYS = ("defect_type", "location", "severity", "disposition", "root_cause", "action")
KINDS = ["划痕", "气泡", "裂纹", "虚焊", "崩边", "变形"]
TRUTH = [{k: f"{KINDS[i % 6]}{k[:2]}{i}" if k != "defect_type" else KINDS[i % 6] for k in KEYS} for i in range(12)]
SCORED = ("tuned_valid_json", "tuned_exact_match", "tuned_rouge")


def _generating(names, generated, lab_model):
    """A kernel with the lab's LoRA model whose course ``generate_reports`` answers ``generated``
    for the eval subset, beside ``names``."""
    return {
        "peft_model": lab_model,
        "EVAL_SUBSET": list(range(len(generated))),
        "generate_reports": lambda model, records: list(generated),
        **names,
    }


def test_the_scores_are_recomputed_against_the_reference_kernels_eval_references():
    """A learner who rebinds EVAL_REFERENCES to what its model says scores itself perfect; the
    scores are recomputed against the lab's references, which come from the reference kernel."""
    checks = lab_checks_named(*SCORED)
    assert all(c.wants_reference for c in checks)
    lab_model, base = _peft_world(), ["不是 JSON"] * 12
    tuned = [json.dumps(r, ensure_ascii=False) for r in TRUTH]
    reference = _generating({"EVAL_REFERENCES": TRUTH, "base_predictions": base}, tuned, lab_model)
    honest = _generating({"base_predictions": base, "tuned_predictions": tuned}, tuned, lab_model)
    assert all(r.passed for r in graded(checks, honest, reference).values())
    guess = dict.fromkeys(KEYS, "划痕")
    guessed = [json.dumps(guess, ensure_ascii=False)] * 12
    forger = _generating(
        {"base_predictions": base, "tuned_predictions": guessed, "EVAL_REFERENCES": [guess] * 12}, guessed, lab_model
    )
    assert all(r.passed for r in graded(checks, forger, forger).values())  # its own references
    lab_generates = _generating({"EVAL_REFERENCES": TRUTH, "base_predictions": base}, guessed, lab_model)
    against_the_lab = graded(checks, forger, lab_generates)
    assert not against_the_lab["tuned_exact_match"].passed and not against_the_lab["tuned_exact_match"].error


def test_the_predictions_are_what_the_learners_adapter_generates():
    """Predictions typed in from the eval set's own answers score perfectly against the lab's
    references; the reference kernel's model, carrying the learner's adapter, generates others."""
    checks = lab_checks_named(*SCORED)
    lab_model, base = _peft_world(), ["不是 JSON"] * 12
    typed_in = [json.dumps(r, ensure_ascii=False) for r in TRUTH]
    generated = ['{"defect_type": "划痕"}'] * 12  # what the adapter really answers
    learner = _generating({"base_predictions": base, "tuned_predictions": typed_in}, generated, lab_model)
    generates_it = _generating({"EVAL_REFERENCES": TRUTH, "base_predictions": base}, typed_in, lab_model)
    assert all(r.passed for r in graded(checks, learner, generates_it).values())
    generates_others = _generating({"EVAL_REFERENCES": TRUTH, "base_predictions": base}, generated, lab_model)
    results = graded(checks, learner, generates_others)
    assert sum(r.points for r in results.values()) == 0 and not any(r.error for r in results.values())
    assert "not what the model generates" in results["tuned_valid_json"].detail


# -- evidence the learner's kernel cannot forge (issue 47) ---------------------------------


SFT_RULES = ("sft_input_ids", "sft_labels", "sft_padding", "sft_too_long")


def test_sft_samples_are_scored_on_the_reference_kernels_tokenizer(ns, tokenizer):
    """The template's tokens come from the reference kernel: a learner whose later cell rebinds
    ``tokenizer`` agreed with its own sample, and the records are the course's, not ``eval_records``."""
    checks = lab_checks_named(*SFT_RULES)
    assert len(checks) == 4 and all(c.wants_reference for c in checks)
    reference = {"tokenizer": tokenizer}
    honest = {"tokenizer": tokenizer, "build_sft_sample": ns["build_sft_sample"], "eval_records": 1.5}
    assert all(r.passed for r in graded(checks, honest, reference).values())
    forger = {"tokenizer": TwoTokens(), "build_sft_sample": two_token_sample}
    assert sum(r.points for r in graded(checks, forger, forger).values()) == 2  # what its own tokens gave it
    against_the_lab = graded(checks, forger, reference).values()
    assert sum(r.points for r in against_the_lab) == 0 and not any(r.error for r in against_the_lab)


def _peft_world(seed=0):
    """A LoRA-wrapped tiny model whose B matrices are trained away from zero, and its adapter saved."""
    import peft

    wrapped = peft.get_peft_model(
        tiny_model(seed), peft.LoraConfig(r=16, target_modules=list(PROJECTIONS), task_type="CAUSAL_LM")
    )
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05, generator=gen)
    return wrapped.eval()


def test_lora_count_is_checked_on_the_reference_kernels_peft_model(ns):
    """A later cell rebinds ``peft_model`` to a one-layer model, on which a lora_param_count that
    returns one constant agrees with peft; the lab's model does not."""
    checks = lab_checks_named("lora_matches_peft")
    reference = {"peft_model": _peft_world()}
    assert graded(checks, {"lora_param_count": ns["lora_param_count"]}, reference)["lora_matches_peft"].passed
    one_layer = tiny_config(num_hidden_layers=1)
    constant = ns["lora_param_count"](one_layer, 16)
    rebound = SimpleNamespace(
        base_model=SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(to_dict=one_layer.to_dict))),
        get_nb_trainable_parameters=lambda: (constant, 0),
    )
    forger = {"lora_param_count": lambda config, r, targets=None: constant, "peft_model": rebound}
    assert graded(checks, forger, forger)["lora_matches_peft"].passed
    result = graded(checks, forger, reference)["lora_matches_peft"]
    assert not result.passed and not result.error


MERGE_RULES = ("merged_logits_match", "merged_is_plain", "merged_eval_mode")


def test_the_merged_model_is_compared_with_the_learners_adapter_in_the_reference_kernels_model(ns, tmp_path):
    """The adapter model's logits come from the reference kernel, carrying the learner's adapter
    weights: a merged_model that is the fresh base, never merged, is plain and in eval mode, and
    matched the adapter model's logits when the learner's kernel computed both."""
    trained = _peft_world()
    trained.save_pretrained(tmp_path)
    reference = {"peft_model": _peft_world(), "fresh_base": tiny_model(), "DTYPE": torch.float32}
    reference["device"] = torch.device("cpu")
    checks = lab_checks_named(*MERGE_RULES)
    merged = ns["reload_and_merge"](tiny_model(), tmp_path)
    honest = {"peft_model": trained, "merged_model": merged, "device": torch.device("cpu")}
    assert all(r.passed for r in graded(checks, honest, reference).values())
    forger = {**honest, "merged_model": tiny_model()}
    results = graded(checks, forger, reference)
    assert not results["merged_logits_match"].passed and not results["merged_logits_match"].error
    assert sum(r.points for r in results.values()) == 0, {n: r.detail for n, r in results.items()}
    import peft

    untrained = peft.get_peft_model(
        tiny_model(), peft.LoraConfig(r=16, target_modules=list(PROJECTIONS), task_type="CAUSAL_LM")
    )  # B = 0: its adapter model is the base, which the unmerged base matches
    result = graded(checks, {**forger, "peft_model": untrained}, reference)["merged_logits_match"]
    assert not result.passed and "untrained" in result.detail


def _forwarding_to(peft_model):
    """A plain model of the lab's class, in eval mode, never merged, whose forward is the adapter
    model's: its logits, class, parameter names and modes are all what main's checks read."""
    plain = tiny_model()
    plain.forward = lambda input_ids=None, **kwargs: peft_model(input_ids=input_ids, **kwargs)
    return plain


def test_a_merged_model_that_forwards_to_the_adapter_model_is_not_plain_merged_weights(ns, tmp_path):
    """The plain-model and eval-mode rules: its parameters, asked by name, must be the base's plus
    the learner's adapter's delta as the reference kernel's model merges it. A model that forwards
    to the adapter model without merging had every value main's checks read from its kernel (class,
    names, modes) right; it keeps only the logits rule, whose logits are the adapter model's."""
    trained = _peft_world()
    trained.save_pretrained(tmp_path)
    reference = {"peft_model": _peft_world(), "fresh_base": tiny_model(), "DTYPE": torch.float32}
    reference["device"] = torch.device("cpu")
    checks = lab_checks_named(*MERGE_RULES)
    honest = {"peft_model": trained, "merged_model": ns["reload_and_merge"](tiny_model(), tmp_path)}
    honest["device"] = torch.device("cpu")
    assert all(r.passed for r in graded(checks, honest, reference).values())
    results = graded(checks, {**honest, "merged_model": _forwarding_to(trained)}, reference)
    assert {n for n, r in results.items() if r.passed} == {"merged_logits_match"}, {
        n: r.detail for n, r in results.items()
    }
    assert "base + the adapter's delta" in results["merged_is_plain"].detail
    assert results["merged_eval_mode"].detail.startswith("counts together with merged_is_plain")


def _lora_left_behind(path):
    """The adapter in ``path`` merged into the LoRA layers (``merge_adapter``) but never unloaded:
    the lab's class with a LoRA layer in every projection, whose ``named_parameters`` answers the
    plain model's names. Main's plain-model rule read its class, those names and its merged weights
    (``get_parameter`` reaches a LoRA layer's base weight), all right."""
    from peft import PeftModel

    reloaded = PeftModel.from_pretrained(tiny_model(), path)
    reloaded.merge_adapter()
    model = reloaded.get_base_model().eval()
    plain = [name for name, _ in tiny_model().named_parameters()]
    model.named_parameters = lambda *args, **kwargs: ((name, model.get_parameter(name)) for name in plain)
    return model


def _merge_world(tmp_path):
    trained = _peft_world()
    trained.save_pretrained(tmp_path)
    reference = {"peft_model": _peft_world(), "fresh_base": tiny_model(), "DTYPE": torch.float32}
    reference["device"] = torch.device("cpu")
    return trained, reference


def test_the_plain_model_is_what_torch_finds_in_it_not_what_its_instance_says(ns, tmp_path):
    """A merged model that kept its LoRA layers had main's plain-model rule: its class is the lab's,
    its weights hold the merge, and its own ``named_parameters`` answered the plain names. The names
    are read with ``torch.nn.Module``'s methods now, over the whole model and under projections the
    check draws: the LoRA layers show, and the rule scores 0."""
    trained, reference = _merge_world(tmp_path)
    checks = lab_checks_named(*MERGE_RULES)
    honest = {"peft_model": trained, "merged_model": ns["reload_and_merge"](tiny_model(), tmp_path)}
    honest["device"] = torch.device("cpu")
    assert all(r.passed for r in graded(checks, honest, reference).values())
    left = _lora_left_behind(tmp_path)
    mro = [c.__module__ + "." + c.__qualname__ for c in type(left).__mro__]
    assert any(n.endswith("modeling_utils.PreTrainedModel") for n in mro) and not any(
        n.startswith("peft.") for n in mro
    )
    assert not any("lora_" in name for name, _ in left.named_parameters())  # what the instance says
    results = graded(checks, {**honest, "merged_model": left}, reference)
    assert results["merged_logits_match"].passed  # its logits are the adapter model's
    assert results["merged_is_plain"].points == 0 and not results["merged_is_plain"].error
    assert "not the plain model's parameters" in results["merged_is_plain"].detail
    assert results["merged_eval_mode"].points == 0


def test_eval_mode_is_what_the_model_does_with_dropout_turned_up_not_what_it_reports(ns, tmp_path):
    """A merged model left in training mode, whose ``modules()`` answers one module in eval mode, had
    main's eval-mode rule (it read ``m.training`` of ``merged_model.modules()``; the lab's model has a
    dropout rate of 0, so its logits and weights held the merge rules). The rule now turns every dropout
    rate up (found with ``torch.nn.Module``'s own ``modules``) and runs the model twice: in training mode
    the logits are not the adapter model's, and the rule scores 0. Left in training mode without a
    lie, it fails alike."""
    from rocmlab.harness import Learner

    trained, reference = _merge_world(tmp_path)
    checks = lab_checks_named(*MERGE_RULES)
    honest = {"peft_model": trained, "merged_model": ns["reload_and_merge"](tiny_model(), tmp_path)}
    honest["device"] = torch.device("cpu")
    assert all(r.passed for r in graded(checks, honest, reference).values())
    training = ns["reload_and_merge"](tiny_model(), tmp_path).train()
    training.modules = lambda: iter([SimpleNamespace(training=False)])
    forger = {**honest, "merged_model": training}
    assert Learner(LocalChannel(forger)).eval("[m.training for m in merged_model.modules()]") == [False]
    results = graded(checks, forger, reference)
    assert results["merged_logits_match"].passed and results["merged_is_plain"].passed  # rate 0: the merge holds
    assert results["merged_eval_mode"].points == 0 and not results["merged_eval_mode"].error
    assert "with dropout" in results["merged_eval_mode"].detail
    forgot = {**honest, "merged_model": ns["reload_and_merge"](tiny_model(), tmp_path).train()}
    assert graded(checks, forgot, reference)["merged_eval_mode"].points == 0


def _header_only(peft_model, path):
    """A safetensors header naming ``peft_model``'s adapter tensors (float32), with no data after it."""
    from peft import get_peft_model_state_dict

    header, offset = {}, 0
    for name, value in get_peft_model_state_dict(peft_model).items():
        header[name] = {
            "dtype": "F32",
            "shape": list(value.shape),
            "data_offsets": [offset, offset + 4 * value.numel()],
        }
        offset += 4 * value.numel()
    text = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(len(text).to_bytes(8, "little") + text)
    return 8 + len(text) + offset  # the size the header claims


def _saving_world(ns):
    trained = _peft_world()
    reference = {"peft_model": _peft_world(), "fresh_base": tiny_model()}
    honest = {"peft_model": trained, "lora_param_count": ns["lora_param_count"]}
    return trained, reference, honest


def adapter_dir():
    from rocmlab.harness import lab_constants

    return lab_constants(LAB / "checks.py")["ADAPTER_DIR"]


def test_the_saved_adapter_is_read_where_the_lab_saves_it_and_is_the_notebooks(ns, tmp_path, monkeypatch):
    """Main read the adapter file at the path the kernel's ``adapter_file`` named: a notebook that
    saved nothing and named another adapter (the course's build in the cache, a classmate's) had the
    rule. The path is the lab's (``ADAPTER_DIR`` of lab.py, in the work folder), and the file's tensors
    must be the notebook's adapter: that attack scores 0, as does another adapter saved in its place."""
    monkeypatch.chdir(tmp_path)
    trained, reference, honest = _saving_world(ns)
    checks = lab_checks_named("saved_adapter")
    elsewhere = tmp_path / "the-course-build"
    trained.save_pretrained(elsewhere)
    named = graded(checks, {**honest, "adapter_file": elsewhere / "adapter_model.safetensors"}, reference)
    assert named["saved_adapter"].points == 0 and not named["saved_adapter"].error, named["saved_adapter"].detail
    assert "FileNotFoundError" in named["saved_adapter"].detail
    _peft_world(seed=1).save_pretrained(tmp_path / adapter_dir())  # the lab's LoRA, other weights
    other = graded(checks, honest, reference)["saved_adapter"]
    assert other.points == 0 and not other.error and "not the one the notebook evaluated" in other.detail
    trained.save_pretrained(tmp_path / adapter_dir())
    assert graded(checks, honest, reference)["saved_adapter"].passed


def test_a_saved_adapter_is_read_whole_and_parsed_here(ns, tmp_path, monkeypatch):
    """The saved-adapter rule parses the whole file in the harness: a header of the right tensors
    with no data, in a kernel whose ``os.path.getsize`` claims the size the header promises, passed
    an older check (header and size, two values of the kernel) and fails now."""
    import os

    monkeypatch.chdir(tmp_path)
    trained, reference, honest = _saving_world(ns)
    checks = lab_checks_named("saved_adapter")
    forged = tmp_path / adapter_dir() / "adapter_model.safetensors"
    claimed, real_size = _header_only(trained, forged), os.path.getsize
    monkeypatch.setattr(os.path, "getsize", lambda p: claimed if str(p) == str(forged) else real_size(p))
    result = graded(checks, honest, reference)["saved_adapter"]
    assert not result.passed and not result.error, result.detail
    assert "not a safetensors file" in result.detail


def test_reported_losses_count_once_they_are_the_recipes(tmp_path, monkeypatch):
    """Falling losses the kernel reports, one per step of a STEPS_HERE of its own, count only with
    the rule that they are the recipe's (every MAX_STEPS run here when there is no course build)."""
    from rocmlab.harness import lab_parameters

    monkeypatch.chdir(tmp_path)
    steps = lab_parameters(LAB / "checks.py", SOURCE.lab.profile("smoke").parameters)["MAX_STEPS"]
    checks = lab_checks_named("trained_loss_falls", "trained_is_the_recipe")
    reference = {"COURSE_BUILD": None, "STEPS_HERE": steps}

    def learner(n):
        losses = [3.0 - 2.0 * i / n for i in range(n)]
        (tmp_path / "metrics.json").write_text(json.dumps({"losses": losses, "steps": n}), encoding="utf-8")
        scores = {"base_scores": {}, "tuned_scores": {}, "base_dev_loss": 2.0, "tuned_dev_loss": 1.0}
        return {"losses": losses, "STEPS_HERE": n, **scores}

    assert all(r.passed for r in graded(checks, learner(steps), reference).values())
    assert not graded(checks, learner(6), reference)["trained_loss_falls"].passed  # STEPS_HERE is the solution's
    # with a course build, whose losses are flat: the learner's 30 falling ones are not the recipe's
    build = tmp_path / "build"
    build.mkdir()
    (build / "rocmlab-adapter.json").write_text(json.dumps({"steps": steps, "losses": [1.0] * steps}), encoding="utf-8")
    forged = graded(checks, learner(30), {"COURSE_BUILD": str(build), "STEPS_HERE": 30})
    assert not forged["trained_is_the_recipe"].passed
    assert "counts together with" in forged["trained_loss_falls"].detail and forged["trained_loss_falls"].points == 0


@pytest.mark.parametrize(
    "rules,stub",
    [
        (("collate_padding", "collate_dtype"), {"collate": lambda samples, pad_id: {
            k: torch.zeros(len(samples), max(len(s["input_ids"]) for s in samples), dtype=torch.long)
            for k in ("input_ids", "labels", "attention_mask")
        }}),
        (("attention_rule1", "attention_rule2", "attention_rule4"), {"choose_attention": lambda *args: "sdpa"}),
    ],
    ids=["collate-zeros", "always-sdpa"],
)  # fmt: skip
def test_a_rule_a_stub_keeps_counts_only_with_the_rule_it_qualifies(rules, stub):
    """A long tensor of the right shape, or "sdpa" whatever is asked, keeps the dtype rule and the
    rules for when not to choose flash: they count only with the rule they qualify (``counts_with``)."""
    results = graded(lab_checks_named(*rules), stub, {})
    assert sum(r.points for r in results.values()) == 0, {n: r.detail for n, r in results.items()}


def test_a_kernel_answering_floats_to_everything_fails_with_assertions_not_warnings(tokenizer, recwarn):
    """A forged kernel answers 2.5 to every request (``len(eval_records)`` included, as main's
    checks once asked): each rule fails on an answer it can read, with no warning from the checks."""
    from rocmlab.harness import Learner, Reference, run_checks

    class Floats:
        def ask(self, request):
            from rocmlab.lab.answers import evaluate

            return evaluate({"expr": "2.5", "setup": "", "values": {}}, {})

    checks = lab_checks_named(*SFT_RULES, "lora_all_projections", "memory_full", "memory_float")
    results = run_checks(checks, Learner(Floats()), seed=5, reference=Reference(LocalChannel({"tokenizer": tokenizer})))
    assert all(r.points == 0 and not r.error for r in results), [(r.name, r.detail, r.error) for r in results]
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)], [str(w.message) for w in recwarn]
