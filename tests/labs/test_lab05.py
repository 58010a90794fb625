"""Lab 05 (distributed training and fault tolerance): its solutions against their meaning.

Fast tests run the exercises that need no process group (bucketing with a fake all-reduce,
atomic checkpoints killed mid-write, resume, the QC batch builder) straight from the lab source,
and check that the student version of each raises NotImplementedError. The slow test executes
the whole notebook in the smoke profile (torchrun, elastic restart, DDP fine-tune).
"""

from __future__ import annotations

import ast
import math
import pickle
import re

import pytest
import torch
from labsource import LabSource, definitions, student

SOURCE = LabSource("05-distributed-training")
LAB = SOURCE.folder


@pytest.fixture(scope="module")
def notebook():
    return SOURCE.notebook


@pytest.fixture(scope="module")
def cells():
    return SOURCE.graded


def constant(node) -> bool:
    """A module-level `NAME = "text"` or `NAME = [function, ...]`, such as WORKER_HEADER or SHARED."""
    if not (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)):
        return False
    value = node.value
    return isinstance(value, ast.Constant) or (
        isinstance(value, ast.List) and all(isinstance(e, ast.Name) for e in value.elts)
    )


def lab_namespace(notebook, tmp_path, *solution_sources):
    """The lab's imports and helper functions, plus the given solution cells, in one namespace
    (run by the harness, so inspect.getsource works on them: write_worker reads functions back)."""
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    namespace = SOURCE.run(code_cells[0].source, namespace={"__name__": "lab05_test"})
    namespace.update(WORK=tmp_path, WORLD_SIZE=2, SEED=0, BACKEND="auto")
    helpers = [
        definitions(cell.source, constants=constant)
        for cell in code_cells[1:]
        if not {"parameters", "solution", "test"} & set(cell.metadata.get("tags", []))
    ]
    return SOURCE.run(*helpers, *solution_sources, namespace=namespace)


# ---------------------------------------------------------------- structure


def test_lab_toml_is_valid_and_every_profile_parameter_is_assigned():
    assigned = SOURCE.parameter_names
    assert {"PROFILE", "DEVICE", "SEED", "MODEL"} <= assigned
    for name, profile in SOURCE.lab.profiles.items():
        missing = set(profile.params) - assigned
        assert not missing, f"profile {name}: {missing} not assigned in the parameters cell"


def test_grade_ids_are_unique_paired_and_solutions_marked(notebook, cells):
    ids = [c.metadata["grade_id"] for c in notebook.cells if c.metadata.get("grade_id")]
    assert len(ids) == len(set(ids)) and all(g.startswith("05-") for g in ids)
    topics_with_solution = {g.split("-")[1] for g in ids if "-sol-" in g}
    topics_with_test = {g.split("-")[1] for g in ids if "-sol-" not in g}
    assert topics_with_solution == topics_with_test == {"scratch", "ddp", "stretch", "ckpt", "elastic", "finetune"}
    assert {g for g in ids if g.startswith("05-stretch-")} == {
        "05-stretch-bucket-sol-1",
        "05-stretch-bucket-1",
        "05-stretch-nosync-sol-1",
        "05-stretch-nosync-1",
    }
    for cell in notebook.cells:
        tags = cell.metadata.get("tags", [])
        if "solution" in tags:
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
        if "test" in tags:
            assert int(cell.metadata["points"]) > 0


def test_prose_comes_in_zh_en_pairs(notebook):
    tags = [tuple(c.metadata.get("tags", [])) for c in notebook.cells if c.cell_type == "markdown"]
    assert tags.count(("zh",)) == tags.count(("en",)) >= 10


def test_every_solution_cell_has_a_contract_in_both_languages_right_above(notebook):
    """The check of labs 01/02: a zh cell with 约定 and an en cell with "contract" right above each solution."""
    for i, cell in enumerate(notebook.cells):
        if "solution" not in cell.metadata.get("tags", []):
            continue
        zh, en = notebook.cells[i - 2], notebook.cells[i - 1]
        assert "zh" in zh.metadata.get("tags", []) and "约定" in zh.source, cell.metadata["grade_id"]
        assert "en" in en.metadata.get("tags", []) and "contract" in en.source, cell.metadata["grade_id"]


def test_stretch_comes_after_the_core_and_the_cleanup_cell_is_last(notebook):
    ids = [c.metadata["grade_id"] for c in notebook.cells if "grade_id" in c.metadata]
    stretch = [i for i, g in enumerate(ids) if g.startswith("05-stretch-")]
    assert stretch and stretch == list(range(len(ids) - len(stretch), len(ids))), ids
    first = next(i for i, c in enumerate(notebook.cells) if "05-stretch-" in c.metadata.get("grade_id", ""))
    headings = [c.source for c in notebook.cells[:first] if c.cell_type == "markdown"][-4:]
    assert any("## 选做 S1" in h for h in headings) and any("## Stretch S1" in h for h in headings)
    assert "shutil.rmtree(WORK" in notebook.cells[-1].source, "the scratch-folder cleanup must stay the last cell"
    assert SOURCE.lab.minutes <= 105


def test_zh_prose_is_consistent_and_wrapped(notebook):
    """One term for the checkpoint, 冒烟（smoke）配置, 实验 0x, and no paragraph left on one long line."""
    import unicodedata

    def width(text):
        return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)

    zh = "\n".join(c.source for c in notebook.cells if "zh" in c.metadata.get("tags", []))
    for wrong in ("撕不坏", "不会被写坏", "smoke 配置", "Lab 0"):
        assert wrong not in zh, wrong
    assert "崩溃时也不会写坏的检查点" in zh and "冒烟（smoke）配置" in zh
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            long = [line for line in cell.source.splitlines() if width(line) > 124 and not line.startswith("|")]
            assert not long, long[0][:60]


def test_every_worker_script_defines_every_name_it_uses(notebook, cells, tmp_path):
    """Each launch() ships SHARED + the functions it names to the ranks; a function left out (as
    end_of_turn once was) fails only inside torchrun, so check the scripts with ruff's F821."""
    import subprocess
    import sys

    solutions = [source for grade_id, source in cells.items() if "-sol-" in grade_id]
    ns = lab_namespace(notebook, tmp_path, *solutions)
    launches = []
    for cell in notebook.cells:
        if cell.cell_type != "code" or "launch(" not in cell.source:
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "launch" and len(node.args) >= 3:
                worker, functions = node.args[1].id, [element.id for element in node.args[2].elts]
                launches.append((worker, functions))
    assert {worker for worker, _ in launches} >= {"scratch_worker", "ddp_worker", "elastic_worker", "finetune_worker"}
    for worker, functions in launches:
        script = ns["write_worker"](f"check-{worker}", ns[worker], [ns[name] for name in functions])
        found = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--select", "F821", str(script)],
            capture_output=True,
            text=True,
        )
        assert found.returncode == 0, f"{worker} with {functions}:\n{found.stdout}"


# ---------------------------------------------------------------- bucketing


def test_bucketing_calls_ceil_total_over_cap_and_averages(notebook, cells, tmp_path):
    ns = lab_namespace(notebook, tmp_path, cells["05-stretch-bucket-sol-1"])
    ranks = [
        [torch.randn(s, dtype=torch.float64, generator=torch.Generator().manual_seed(r)) for s in [(9, 5), (7,), (1,)]]
        for r in range(3)
    ]
    total = sum(t.numel() * 8 for t in ranks[0])
    for cap in (8, 64, 136, total, 10 * total):
        grads = [t.clone() for t in ranks[0]]
        others = [sum(torch.cat([t.reshape(-1) for t in ranks[r]]) for r in (1, 2))]
        sizes, offset = [], [0]

        def fake_sum(t, sizes=sizes, others=others, offset=offset):  # adds ranks 1 and 2 at the same offset
            sizes.append(t.numel() * 8)
            t.add_(others[0][offset[0] : offset[0] + t.numel()])
            offset[0] += t.numel()

        calls = ns["bucketed_all_reduce_"](grads, cap, 3, fake_sum)
        assert calls == len(sizes) == math.ceil(total / cap)
        for g, *per_rank in zip(grads, *ranks):
            assert torch.allclose(g, sum(per_rank) / 3, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError):
        ns["bucketed_all_reduce_"]([torch.ones(3, dtype=torch.float64)], 12, 1, lambda t: None)
    empty = lab_namespace(notebook, tmp_path, student(cells["05-stretch-bucket-sol-1"]))
    with pytest.raises(NotImplementedError):
        empty["bucketed_all_reduce_"]([torch.ones(3)], 4, 1, lambda t: None)


# ---------------------------------------------------------------- checkpoints


def test_atomic_checkpoint_survives_a_writer_killed_mid_write(notebook, cells, tmp_path):
    ns = lab_namespace(notebook, tmp_path, cells["05-ckpt-sol-1"])
    for delay in (0.004, 0.017, 0.041):
        report = ns["kill_writer_mid_write"](ns["save_checkpoint_atomic"], tmp_path / "ckpt.pt", delay, numel=1_000_000)
        assert report["wrote_one"] and report["loaded"] and report["whole"], report
    assert not list(tmp_path.glob("ckpt.pt.tmp-*"))


def slow_in_place_save(state, path):
    """Writes in place like plain torch.save, slowly: the file is incomplete for all but an instant."""
    import io
    import time

    with open(path, "wb") as f:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        for start in range(0, len(data), 1 << 16):
            f.write(data[start : start + (1 << 16)])
            f.flush()
            time.sleep(0.002)


def test_the_kill_harness_catches_a_torn_in_place_write(notebook, cells, tmp_path):
    """The graded harness can tell: an in-place writer killed mid-write leaves a torn file."""
    ns = lab_namespace(notebook, tmp_path, cells["05-ckpt-sol-1"])
    for delay in (0.01, 0.05):
        report = ns["kill_writer_mid_write"](slow_in_place_save, tmp_path / "naive.pt", delay, numel=500_000)
        assert report["wrote_one"] and not (report["loaded"] and report["whole"]), report


def test_ckpt_graded_cell_passes_on_the_solution_and_fails_on_the_student_version(notebook, cells, tmp_path):
    ns = lab_namespace(notebook, tmp_path, cells["05-ckpt-sol-1"])
    ns["CKPT_DIR"] = tmp_path
    SOURCE.run(cells["05-ckpt-1"], namespace=ns)
    in_place = lab_namespace(notebook, tmp_path, cells["05-ckpt-sol-1"])
    in_place.update(CKPT_DIR=tmp_path, save_checkpoint_atomic=slow_in_place_save)
    with pytest.raises(AssertionError):
        SOURCE.run(cells["05-ckpt-1"], namespace=in_place)
    empty = lab_namespace(notebook, tmp_path, student(cells["05-ckpt-sol-1"]))
    empty["CKPT_DIR"] = tmp_path
    with pytest.raises(AssertionError):
        SOURCE.run(cells["05-ckpt-1"], namespace=empty)


def test_failed_atomic_save_keeps_the_old_file_and_leaves_no_temp(notebook, cells, tmp_path):
    ns = lab_namespace(notebook, tmp_path, cells["05-ckpt-sol-1"])
    target = tmp_path / "c.pt"
    ns["save_checkpoint_atomic"]({"step": 1}, target)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        ns["save_checkpoint_atomic"]({"step": 2, "bad": lambda: None}, target)
    assert torch.load(target, weights_only=True)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]  # no temporary file left
    empty = lab_namespace(notebook, tmp_path, student(cells["05-ckpt-sol-1"]))
    with pytest.raises(NotImplementedError):
        empty["save_checkpoint_atomic"]({"step": 3}, target)


def test_resume_restores_model_optimizer_and_step(notebook, cells, tmp_path):
    ns = lab_namespace(notebook, tmp_path, cells["05-ckpt-sol-1"], cells["05-elastic-sol-1"])
    src = ns["make_mlp"](1)
    opt = torch.optim.SGD(src.parameters(), lr=0.1, momentum=0.9)
    x, y = ns["make_data"](8, 0)
    torch.nn.functional.mse_loss(src(x), y).backward()
    opt.step()
    ns["save_checkpoint_atomic"](
        {"step": 4, "model": src.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "r.pt"
    )
    dst = ns["make_mlp"](2)
    dst_opt = torch.optim.SGD(dst.parameters(), lr=0.1, momentum=0.9)
    assert ns["resume_from_checkpoint"](tmp_path / "absent.pt", dst, dst_opt) == 0
    assert ns["resume_from_checkpoint"](tmp_path / "r.pt", dst, dst_opt) == 4
    for p, q in zip(dst.parameters(), src.parameters()):
        assert torch.equal(p, q)
        assert torch.equal(dst_opt.state[p]["momentum_buffer"], opt.state[q]["momentum_buffer"])
    empty = lab_namespace(notebook, tmp_path, student(cells["05-elastic-sol-1"]))
    with pytest.raises(NotImplementedError):
        empty["resume_from_checkpoint"](tmp_path / "r.pt", dst, dst_opt)


# ---------------------------------------------------------------- QC batches


class CharTokenizer:
    """A stand-in for the course tokenizer: one id per character, one per special token, the Qwen chat
    template. ``eos_token`` is that of an instruct checkpoint (end of turn) or, with ``base=True``, of a
    base checkpoint (end of document)."""

    SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    pad_token, pad_token_id = "<|endoftext|>", 0

    def __init__(self, *, base=False):
        self.eos_token = "<|endoftext|>" if base else "<|im_end|>"
        self.vocab = {token: i for i, token in enumerate(self.SPECIAL)}
        self.pieces = {i: token for token, i in self.vocab.items()}

    @property
    def eos_token_id(self):
        return self.vocab[self.eos_token]

    def convert_tokens_to_ids(self, token):
        return self.vocab[token]

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=True):
        pieces = [p for p in re.split(r"(<\|[a-z_]+\|>)", text) if p]
        ids = []
        for piece in pieces:
            for unit in [piece] if piece in self.SPECIAL else piece:
                ids.append(self.vocab.setdefault(unit, len(self.vocab)))
                self.pieces[ids[-1]] = unit
        return {"input_ids": ids}

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)


QC_ITEMS = [
    {
        "id": "t-1",
        "product_line": "注塑件",
        "description": "外壳边缘有 3 毫米划痕。",
        "report": {
            "defect_type": "划痕",
            "location": "边缘",
            "severity": "轻微",
            "disposition": "放行",
            "root_cause": "搬运",
            "action": "加保护膜",
        },
    },
    {
        "id": "t-2",
        "product_line": "PCB",
        "description": "焊点虚焊，通电后间歇断路，需要进一步检查与确认。",
        "report": {
            "defect_type": "虚焊",
            "location": "焊点",
            "severity": "严重",
            "disposition": "返工",
            "root_cause": "炉温",
            "action": "调整回流焊曲线",
        },
    },
    {
        "id": "t-3",
        "product_line": "铸件",
        "description": "气孔。",
        "report": {
            "defect_type": "气孔",
            "location": "表面",
            "severity": "一般",
            "disposition": "让步接收",
            "root_cause": "排气",
            "action": "改排气槽",
        },
    },
]


def test_qc_batch_solution_passes_its_graded_test_and_student_fails(notebook, cells, tmp_path):
    ns = lab_namespace(notebook, tmp_path, cells["05-finetune-sol-1"])
    ns.update(ft_tokenizer=CharTokenizer(), base_like=CharTokenizer(base=True), qc_items=QC_ITEMS)
    SOURCE.run(cells["05-finetune-1"], namespace=ns)
    batch = ns["build_qc_batch"](QC_ITEMS, ns["ft_tokenizer"], 8)
    assert tuple(batch["labels"].shape) == (3, 8) and bool((batch["labels"] == -100).all())  # prompt only
    empty = lab_namespace(notebook, tmp_path, student(cells["05-finetune-sol-1"]))
    empty.update(ft_tokenizer=CharTokenizer(), base_like=CharTokenizer(base=True), qc_items=QC_ITEMS)
    with pytest.raises(NotImplementedError):
        SOURCE.run(cells["05-finetune-1"], namespace=empty)


@pytest.mark.parametrize("base", [False, True], ids=["instruct-like", "base-like"])
def test_answers_end_with_the_templates_end_of_turn_token_whatever_eos_is(notebook, cells, tmp_path, base):
    ns = lab_namespace(notebook, tmp_path, cells["05-finetune-sol-1"])
    tokenizer = CharTokenizer(base=base)
    assert ns["end_of_turn"](tokenizer) == "<|im_end|>"
    assert ns["qc_answer"](QC_ITEMS[0], tokenizer).endswith("<|im_end|>")
    labels = ns["build_qc_batch"](QC_ITEMS, tokenizer, 256)["labels"]
    for row in labels:
        answer = row[row != -100].tolist()
        assert answer[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert ("<|endoftext|>" if base else "<|im_end|>") == tokenizer.eos_token


def test_the_graded_test_rejects_an_answer_ending_with_eos(notebook, cells, tmp_path):
    """An answer built with tokenizer.eos_token passes on an instruct tokenizer and must fail on a base one."""
    ns = lab_namespace(notebook, tmp_path, cells["05-finetune-sol-1"])
    ns.update(ft_tokenizer=CharTokenizer(), base_like=CharTokenizer(base=True), qc_items=QC_ITEMS)

    def eos_answer(item, tokenizer):
        return ns["json"].dumps(item["report"], ensure_ascii=False) + tokenizer.eos_token

    ns["qc_answer"] = eos_answer
    with pytest.raises(AssertionError, match="rule 1"):
        run_graded_cell(cells["05-finetune-1"], ns)


def test_end_of_turn_names_the_template_when_it_has_no_end_token(notebook, tmp_path):
    ns = lab_namespace(notebook, tmp_path)

    class Plain(CharTokenizer):
        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
            return "".join(m["content"] for m in messages)

    with pytest.raises(ValueError, match="chat template"):
        ns["end_of_turn"](Plain())


def run_graded_cell(source, namespace):
    SOURCE.run(source, namespace=namespace)


# ---------------------------------------------------------------- the whole notebook (slow)


@pytest.mark.slow
def test_the_lab_workers_leave_cleanly_launch_after_launch(notebook, cells, tmp_path):
    """Issue 16: lab 05's ranks aborted at exit in about 1 launch of 3, when a group pinned past
    destroy met interpreter finalization. finish_rank now fails every launch of such a group (it
    lists the gloo threads left), so three launches of the same worker code suffice: every rank
    exits 0, no abort. The notebook's own runs (verify, the zh run) launch its workers more."""
    ns = lab_namespace(notebook, tmp_path, cells["05-scratch-sol-1"])
    ns["TIMEOUT_S"] = 120
    cfg = {"n": 64, "seed": 0, "global_batch": 16, "hidden": 16, "lr": 0.1, "steps": 3, "freeze_first_bias": False}
    functions = [ns["broadcast_parameters"], ns["average_gradients"]]
    for attempt in range(3):
        result, ranks = ns["launch"](f"clean-{attempt}", ns["scratch_worker"], functions, cfg, show=False)
        outputs = "\n".join(r.output for r in result.ranks)
        assert result.ok and all(r is not None for r in ranks), f"launch {attempt}: {result.summary()}\n{outputs}"
        assert "terminate called" not in outputs


# ---------------------------------------------------------------- the hidden QC checks' evidence (slow)

# A learner whose later cell rebinds the lab's given pieces so that an empty prompt and answer are
# all there is (no items, no chat prompt, no answer), with a build_qc_batch that pads those: while
# the checks tokenized the pieces with the kernel's qc_* helpers, its rows were the expected ones.
EMPTY_PIECES = """
qc_items = [{"description": "", "report": {}}] * 4
def qc_messages(item):
    return []
def qc_answer(item, tokenizer):
    return ""
def build_qc_batch(items, tokenizer, max_len):
    rows = torch.full((len(items), max_len), tokenizer.pad_token_id, dtype=torch.long)
    return {"input_ids": rows, "attention_mask": torch.zeros_like(rows), "labels": torch.full_like(rows, -100)}
"""


@pytest.mark.slow
def test_the_qc_checks_tokenize_the_course_items_on_the_harness_side(notebook, cells, tmp_path):
    """Cost: transformers' tokenizer of the course model, loaded twice; no model, no launch. The
    solution's build_qc_batch passes every rule of 05-finetune-1 with the notebook's tokenizers;
    a learner who rebinds the given qc_items / qc_messages / qc_answer to nothing and pads every
    row takes none of them: the items and their tokens are the course's, made by the checks."""
    import copy

    from transformers import AutoTokenizer

    from rocmlab.assets.tiny_model import model_dir
    from rocmlab.harness import Learner, hidden_files, lab_parameters, load_checks, run_checks
    from rocmlab.lab.answers import evaluate

    class InProcess:
        def __init__(self, names):
            self.names = names

        def ask(self, request):
            return evaluate(request, self.names)

    def tokenizers():  # as the notebook makes them (lab.load_model's, and a base-like copy)
        course = AutoTokenizer.from_pretrained(model_dir())
        course.pad_token = course.pad_token or course.eos_token
        base = copy.deepcopy(course)
        base.eos_token = "<|endoftext|>"
        return {"ft_tokenizer": course, "base_like": base}

    path = LAB / "checks.py"
    checks = [
        c
        for c in load_checks(path.read_text(encoding="utf-8"), str(path), hidden_files(path), lab_parameters(path))
        if c.grade_id == "05-finetune-1"
    ]
    honest = lab_namespace(notebook, tmp_path, cells["05-finetune-sol-1"])
    honest.update(tokenizers())
    results = run_checks(checks, Learner(InProcess(honest)), seed=47)
    assert [(r.name, r.detail, r.error) for r in results if not r.passed] == []

    forger = lab_namespace(notebook, tmp_path)
    forger.update(tokenizers())
    SOURCE.run(EMPTY_PIECES, namespace=forger)
    results = run_checks(checks, Learner(InProcess(forger)), seed=47)
    assert [r.name for r in results if r.passed] == [] and not [r.error for r in results if r.error]


# ---------------------------------------------------------------- the fine-tune's records (issue 47)


def _finetune_checks():
    from rocmlab.harness import lab_parameters, load_checks

    path = LAB / "checks.py"
    parameters = lab_parameters(path, SOURCE.lab.profile("smoke").parameters)
    checks = load_checks(path.read_text(encoding="utf-8"), str(path), {}, parameters)
    return [c for c in checks if c.grade_id == "05-finetune-2"], parameters


def _runs_as_the_notebook_records(ns, parameters):
    """``ft_runs`` as the notebook's finetune_worker records them, step 0 run for real: each rank's
    first loss is the course model's (lab.load_model, float32) on its shard of the solution's
    build_qc_batch; its tokens are the attention masks of steps 1 on; later losses and times are
    a run's that this test does not repeat."""
    from rocmlab import lab

    p = parameters
    model, tokenizer = lab.load_model(p["MODEL"], device="cpu", dtype=torch.float32)
    items = lab.load_qc_reports("train")
    runs = {}
    for world in p["SCALING_RANKS"]:
        ranks = []
        for rank in range(world):
            losses, tokens = [], 0
            for step in range(p["FT_STEPS"]):
                order = torch.randperm(len(items), generator=torch.Generator().manual_seed(p["SEED"] * 7919 + step))
                mine = ns["my_shard"](order[: p["FT_BATCH"] * world], rank, world)
                batch = ns["build_qc_batch"]([items[i] for i in mine.tolist()], tokenizer, p["FT_MAX_LEN"])
                if step == 0:
                    with torch.no_grad():
                        losses.append(float(model(**batch).loss))
                else:
                    losses.append(losses[0] * 0.9**step)
                    tokens += int(batch["attention_mask"].sum())
            ranks.append({"losses": losses, "tokens": tokens, "elapsed": 2.0 + rank})
        runs[world] = (None, ranks)
    throughput = {
        n: sum(r["tokens"] for r in ranks) / max(r["elapsed"] for r in ranks) for n, (_, ranks) in runs.items()
    }
    return runs, throughput


@pytest.mark.slow
def test_the_finetune_records_are_judged_by_their_first_losses(notebook, cells, tmp_path):
    """Cost: the tiny course model loaded twice and one forward pass per rank (about 5 s). A run's
    records with the course model's first losses score full marks; the same records with losses
    made up (tokens, times and throughput left exact) score nothing: the grader recomputes each
    rank's first loss, and the throughput counts only with the losses."""
    from in_process import InProcess

    from rocmlab.harness import Learner, run_checks

    checks, parameters = _finetune_checks()
    ns = lab_namespace(notebook, tmp_path, cells["05-finetune-sol-1"])
    runs, throughput = _runs_as_the_notebook_records(ns, parameters)
    results = run_checks(checks, Learner(InProcess({"ft_runs": runs, "throughput": throughput})), seed=47)
    assert [(r.name, r.detail, r.error) for r in results if not r.passed] == []

    for _, ranks in runs.values():
        for got in ranks:
            got["losses"] = [3.0 - 0.25 * step for step in range(len(got["losses"]))]
    results = run_checks(checks, Learner(InProcess({"ft_runs": runs, "throughput": throughput})), seed=47)
    assert not any(r.points for r in results), [(r.name, r.detail) for r in results if r.points]
