"""Lab 10 (FSDP2 and distributed checkpoints): its solutions against their meaning.

Fast tests run the exercises that need no process group (the memory bill, prefetch lists, the
rank loss, the traffic formula, DCP save / resume / export in one process) straight from the lab
source, check that the student version of each raises NotImplementedError, and check the
teardown helper the rank scripts rely on. The slow test launches the lab's own rank script
(shard, train, DCP save) ten times and requires a clean exit every time.
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from labsource import LabSource, student
from labsource import definitions as cell_definitions

from rocmlab.harness import Learner, kernel_module, lab_checks, run_checks
from rocmlab.lab.answers import evaluate

SOURCE = LabSource("10-fsdp2")
LAB = SOURCE.folder
CONSTANTS = {
    "REPORT_KEYS",
    "SYSTEM_PROMPT",
    "RANK_CODE",
    "RANK_HEADER",
    "STRATEGIES",
    "EXACT_FIELDS",
    "SCHEDULES",
    "TRAIN_CFG",
    "MI300X_BYTES",
}
SOLUTION_IDS = ["memory", "shard", "prefetch", "loss", "comm", "dcp", "export"]


@pytest.fixture(scope="module")
def notebook():
    return SOURCE.notebook


@pytest.fixture(scope="module")
def cells():
    return SOURCE.graded


def topic(grade_id: str) -> str:
    """The exercise a grade_id names: 10-memory-1 and 10-stretch-comm-1 give memory and comm."""
    return grade_id.removeprefix("10-").removeprefix("stretch-").split("-")[0]


def definitions(source: str) -> str:
    """Imports, function and class definitions, and the module constants of a cell; no launches."""
    return cell_definitions(source, constants=lambda node: all(t.id in CONSTANTS for t in node.targets))


def run_cell(source: str, name: str, namespace: dict) -> None:
    """Run a cell so that inspect.getsource works on its functions (the lab writes rank scripts from them)."""
    SOURCE.run(source, namespace=namespace, name=f"lab10 {name}")


def lab_namespace(notebook, work: Path, *, student_ids=()):
    """The lab's imports, parameters, helpers and solutions (student versions for `student_ids`)."""
    namespace = {"__name__": "lab10_test"}
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    for cell in code_cells:
        tags = set(cell.metadata.get("tags", []))
        if "parameters" in tags:
            run_cell(cell.source, "parameters", namespace)
            namespace.update(WORK=work, device=torch.device("cpu"))
        elif "test" in tags:
            continue
        else:
            source = cell.source
            grade_id = cell.metadata.get("grade_id", "")
            if "solution" in tags and topic(grade_id) in student_ids:
                source = student(source)
            run_cell(definitions(source), grade_id or "cell", namespace)
    return namespace


@pytest.fixture
def ns(notebook, tmp_path):
    return lab_namespace(notebook, tmp_path)


@pytest.fixture
def empty(notebook, tmp_path):
    return lab_namespace(notebook, tmp_path, student_ids=SOLUTION_IDS)


# ---------------------------------------------------------------- structure


def test_lab_toml_is_valid_and_every_profile_parameter_is_assigned():
    assigned = SOURCE.parameter_names
    assert {"PROFILE", "DEVICE", "SEED", "MODEL"} <= assigned
    for name, profile in SOURCE.lab.profiles.items():
        missing = set(profile.params) - assigned
        assert not missing, f"profile {name}: {missing} not assigned in the parameters cell"


def test_grade_ids_are_unique_paired_and_solutions_marked(notebook):
    ids = [c.metadata["grade_id"] for c in notebook.cells if c.metadata.get("grade_id")]
    assert len(ids) == len(set(ids)) and all(g.startswith("10-") for g in ids)
    with_solution = {topic(g) for g in ids if "-sol-" in g}
    tested = {topic(g) for g in ids if "-sol-" not in g}
    assert with_solution == set(SOLUTION_IDS)
    assert tested == with_solution | {"equiv", "finetune"}
    for cell in notebook.cells:
        tags = cell.metadata.get("tags", [])
        if "solution" in tags:
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
        if "test" in tags:
            assert int(cell.metadata["points"]) > 0 and "HIDDEN TESTS" not in cell.source
    cells = _test_points(notebook)
    assert len(lab_checks(SOURCE.folder / "checks.py", cells)) >= 2 * len(cells)  # points add up per cell


def test_prose_comes_in_zh_en_pairs(notebook):
    tags = [tuple(c.metadata.get("tags", [])) for c in notebook.cells if c.cell_type == "markdown"]
    assert tags.count(("zh",)) == tags.count(("en",)) >= 15


def test_every_rank_script_imports_torch_distributed_nn_before_init(ns):
    assert "import torch.distributed.nn" in ns["RANK_HEADER"]
    script = ns["write_rank_script"]("probe", ns["finetune_work"], [ns["shard_model"]]).read_text()
    assert script.index("import torch.distributed.nn") < script.index("init_process_group(")
    assert "lab.end_process_group()" in script


# ---------------------------------------------------------------- exercise 1: the memory bill

BYTES = {"ddp": (2, 2, 12, 1, 1, 1), "zero1": (2, 2, 12, 1, 1, 0), "zero2": (2, 2, 12, 1, 0, 0)}
BYTES |= {"zero3": (2, 2, 12, 0, 0, 0), "fsdp2": (4, 4, 8, 0, 0, 0)}


def per_parameter(strategy, n):
    p, g, o, rp, rg, ro = BYTES[strategy]
    return [Fraction(b, 1 if replicated else n) for b, replicated in ((p, rp), (g, rg), (o, ro))]


@pytest.mark.parametrize("strategy", sorted(BYTES))
@pytest.mark.parametrize("n", [1, 2, 8, 24])
def test_state_bytes_follow_the_table(ns, strategy, n):
    psi = 7_615_616_512
    got = ns["state_bytes_per_rank"](psi, n, strategy)
    want = [b * psi for b in per_parameter(strategy, n)]
    for key, value in zip(("params", "grads", "optimizer"), want):
        assert math.isclose(got[key], float(value), rel_tol=1e-12)
    assert math.isclose(got["total"], float(sum(want)), rel_tol=1e-12)


def test_fsdp2_with_mixed_precision_costs_what_zero3_costs_in_total(ns):
    fsdp, zero3 = (ns["state_bytes_per_rank"](10**9, 8, s) for s in ("fsdp2", "zero3"))
    assert math.isclose(fsdp["total"], zero3["total"]) and fsdp["params"] == 2 * zero3["params"]


def test_largest_model_on_eight_mi300x(ns):
    memory = 192 * 2**30
    for strategy in BYTES:
        got = ns["largest_model"](memory, 8, strategy)
        assert got == math.floor(Fraction(memory) / sum(per_parameter(strategy, 8))), strategy
    assert ns["largest_model"](memory, 8, "ddp") == 12_884_901_888


@pytest.mark.parametrize("bad", [(10, 2, "zero4"), (10, 0, "ddp"), (-1, 2, "ddp")])
def test_bad_memory_inputs_raise(ns, empty, bad):
    with pytest.raises(ValueError):
        ns["state_bytes_per_rank"](*bad)
    with pytest.raises(NotImplementedError):
        empty["state_bytes_per_rank"](10, 2, "ddp")


# ---------------------------------------------------------------- exercise 3: prefetch lists


def test_prefetch_lists(ns, empty):
    layers = [ns["RecordingLayer"](i) for i in range(5)]
    ns["set_prefetch"](layers, 2)
    assert [layer.forward for layer in layers] == [[1, 2], [2, 3], [3, 4], [4], []]
    assert [layer.backward for layer in layers] == [[], [0], [1, 0], [2, 1], [3, 2]]
    ns["set_prefetch"](layers, 0)
    assert all(layer.forward == [] and layer.backward == [] for layer in layers)
    with pytest.raises(NotImplementedError):
        empty["set_prefetch"](layers, 1)


# ---------------------------------------------------------------- exercise 4: the rank loss


@pytest.mark.parametrize("world", [1, 2, 4])
def test_rank_loss_gradients_average_to_the_single_process_gradient(ns, world):
    logits, labels = ns["synthetic_batch"](8, 10, 7, world)
    got = ns["sharded_gradient"](ns["rank_loss"], logits, labels, world)
    assert torch.allclose(got, ns["reference_gradient"](logits, labels), rtol=1e-6, atol=1e-9)


def test_the_mean_of_per_rank_means_is_caught(ns, empty):
    """The graded check can tell: averaging per-rank means differs when token counts differ."""
    logits, labels = ns["synthetic_batch"](8, 12, 11, 0)
    wrong = ns["sharded_gradient"](ns["per_rank_mean_loss"], logits, labels, 2)
    assert not torch.allclose(wrong, ns["reference_gradient"](logits, labels), rtol=1e-6, atol=1e-9)
    with pytest.raises(NotImplementedError):
        empty["rank_loss"](logits, labels, 10, 2)


# ---------------------------------------------------------------- exercise 5: traffic


def test_traffic_formula_and_the_measurement_agree_on_a_recorded_schedule(ns, empty):
    # The default schedule of a root and two layers on 2 ranks, as the dispatch mode records it (fp32).
    root, layer = 100, 40
    events = [("all_gather", 4 * root), ("all_gather", 4 * layer), ("forward", 0), ("all_gather", 4 * layer)]
    events += [("forward", 1), ("all_gather", 4 * layer), ("all_gather", 4 * layer)]
    events += [("reduce_scatter", 4 * layer), ("reduce_scatter", 4 * layer), ("reduce_scatter", 4 * root)]
    measured = ns["measured_bytes_sent"]({"events": events}, 2)
    predicted = ns["comm_bytes_per_step"]([root, layer, layer], 2)
    for key, value in measured.items():
        assert math.isclose(predicted[key], value), key
    assert predicted["ddp_all_reduce"] == 2 * 0.5 * 180 * 4
    assert ns["comm_bytes_per_step"]([root, layer, layer], 1)["fsdp_total"] == 0
    no_reshard = ns["comm_bytes_per_step"]([root, layer], 4, param_bytes=2, reshard_after_forward=False)
    assert no_reshard["all_gather_backward"] == 0 and no_reshard["all_gather_forward"] == 0.75 * 140 * 2
    with pytest.raises(NotImplementedError):
        empty["comm_bytes_per_step"]([1], 2)


def test_schedule_counters(ns):
    events = [("all_gather", 1), ("all_gather", 1), ("all_gather", 1), ("forward", 0), ("all_gather", 1)]
    events += [("forward", 1), ("forward", 2), ("all_gather", 1), ("all_gather", 1), ("reduce_scatter", 1)]
    assert ns["forward_gathers_before_layers"](events) == [3, 4, 4]
    assert ns["backward_gathers_before_reduce_scatters"](events) == [2]


# ---------------------------------------------------------------- exercises 6 and 7: DCP in one process


def small_model_and_optimizer(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 2))
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


def one_step(model, optimizer):
    model(torch.randn(3, 5)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_checkpoints_resume_the_newest_complete_one(ns, empty, tmp_path):
    src, opt = small_model_and_optimizer(0)
    root = tmp_path / "ckpt"
    for step in (2, 10):
        one_step(src, opt)
        assert ns["save_checkpoint"](src, opt, step, root) == root / f"step-{step:06d}"
    assert (root / "step-000010" / ".metadata").is_file()
    (root / "step-000011").mkdir()  # a save killed before its .metadata
    (root / "step-000011" / "__0_0.distcp").write_bytes(b"torn")
    dst, dst_opt = small_model_and_optimizer(1)
    assert ns["load_latest_checkpoint"](dst, dst_opt, tmp_path / "absent") == 0 and not dst_opt.state
    assert ns["load_latest_checkpoint"](dst, dst_opt, root) == 10
    for p, q in zip(dst.parameters(), src.parameters()):
        assert torch.equal(p, q)
        assert torch.equal(dst_opt.state[p]["exp_avg_sq"], opt.state[q]["exp_avg_sq"])
    with pytest.raises(NotImplementedError):
        empty["save_checkpoint"](src, opt, 1, root)
    with pytest.raises(NotImplementedError):
        empty["load_latest_checkpoint"](dst, dst_opt, root)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_export_writes_a_model_transformers_loads(ns, empty, tmp_path, quick_tiny_model):
    from transformers import AutoModelForCausalLM

    from rocmlab import lab

    trained, tokenizer = lab.load_model("tiny-qwen-zh", device="cpu", dtype=torch.float32)
    with torch.no_grad():
        for p in trained.parameters():
            p.mul_(1.5)
    import torch.distributed.checkpoint as dcp

    dcp.save({"model": trained.state_dict(), "optim": {"step": torch.tensor(3.0)}}, checkpoint_id=str(tmp_path / "c"))
    base, _ = lab.load_model("tiny-qwen-zh", device="cpu", dtype=torch.float32)
    out = ns["export_full_model"](tmp_path / "c", base, tokenizer, tmp_path / "export")
    assert out == tmp_path / "export" and (out / "model.safetensors").is_file()
    back = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).state_dict()
    assert all(torch.equal(back[k], v) for k, v in trained.state_dict().items())
    with pytest.raises(NotImplementedError):
        empty["export_full_model"](tmp_path / "c", base, tokenizer, tmp_path / "again")


# ---------------------------------------------------------------- the teardown helper

TEARDOWN_PROBE = textwrap.dedent(
    """
    import sys, tempfile
    import torch, torch.distributed as dist, torch.distributed.nn
    from torch.distributed.fsdp import fully_shard
    from rocmlab.lab.teardown import backend_threads, end_process_group

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.FileStore(tempfile.mktemp(), 1))

    def work():
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters())
        model(torch.randn(2, 8)).sum().backward()
        optimizer.step()

    work()
    before = backend_threads()
    if sys.argv[1] == "plain":
        dist.destroy_process_group()
        import gc
        gc.collect()
        after = backend_threads()
    else:
        after = end_process_group()
    print(repr((before, after)))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads are listed from /proc")
def test_end_process_group_frees_the_group_fsdp_keeps_alive(tmp_path):
    """After FSDP2, a plain destroy_process_group leaves gloo's threads running; the helper does not."""
    script = tmp_path / "probe.py"
    script.write_text(TEARDOWN_PROBE)
    seen = {}
    for mode in ("plain", "helper"):
        run = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        seen[mode] = ast.literal_eval(run.stdout.strip().splitlines()[-1])
    assert "pt_gloo_runloop" in seen["plain"][0] and "pt_gloo_runloop" in seen["plain"][1], seen
    assert "pt_gloo_runloop" in seen["helper"][0] and seen["helper"][1] == [], seen


def test_end_process_group_without_a_group_only_reports():
    from rocmlab import lab

    assert lab.end_process_group() == lab.backend_threads() == []


# ---------------------------------------------------------------- the rank script, launched (slow)


def clean_exit_work(cfg, rank, world, device, mesh):
    """Shard, two training steps, a DCP save: what every launch of the lab does, in small.
    Runs in the rank script, where the lab's rank code defines the names used here."""
    model, tokenizer = load_for_training(cfg, device)  # noqa: F821
    shard_model(model, mesh)  # noqa: F821
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    items = lab.load_qc_reports("train")  # noqa: F821
    losses = []
    for step in range(cfg["steps"]):
        rows = global_batch(step, items, tokenizer, cfg)  # noqa: F821
        losses.append(train_step(model, optimizer, rows, tokenizer.pad_token_id, rank, world, device))  # noqa: F821
    save_checkpoint(model, optimizer, cfg["steps"], cfg["ckpt"])  # noqa: F821
    return {"losses": losses}


@pytest.mark.slow
def test_the_rank_script_exits_cleanly_every_time(ns, tmp_path):
    """Three launches of the lab's rank code: exit 0 on both ranks, no gloo thread after destroy, no
    abort. A group left alive fails the thread check on every launch, not by chance (lab 05's
    issue 16), so more launches of the same code add little; the lab's own runs launch it again."""
    from rocmlab import lab

    cfg = dict(ns["TRAIN_CFG"], steps=2, global_batch=4)
    functions = [ns[name] for name in ("shard_model", "rank_loss", "train_step", "save_checkpoint")]
    for attempt in range(3):
        run_cfg = dict(cfg, ckpt=str(tmp_path / f"ckpt{attempt}"))
        result, ranks = ns["launch"](f"clean{attempt}", clean_exit_work, functions, run_cfg)
        outputs = "\n".join(r.output for r in result.ranks) + result.output
        assert result.ok and [r.returncode for r in result.ranks] == [0, 0], outputs[-3000:]
        assert "terminate called" not in outputs and "Aborted" not in outputs, outputs[-3000:]
        assert [r["gloo_threads_after_destroy"] for r in ranks] == [[], []], ranks
        assert ranks[0]["losses"] == ranks[1]["losses"] and len(ranks[0]["losses"]) == 2
    assert not lab.leftover_processes()


# ---------------------------------------------------------------- the hidden checks


PURE_CHECKS = {  # the checks that need no launch: they call the exercise functions only
    "memory_table", "memory_total", "memory_largest", "memory_raises", "prefetch_forward", "prefetch_backward",
    "loss_value", "loss_gradient", "loss_dtype", "loss_empty_rank", "comm_forward", "comm_backward",
    "comm_reduce_scatter", "comm_ddp",
}  # fmt: skip


class _InProcess:
    """A harness channel that answers in this process's namespace (the kernel's side, run here)."""

    def __init__(self, namespace):
        self.namespace = namespace

    def ask(self, request):
        return evaluate(request, self.namespace)

    def launch(self, request, limit_s):  # ``fresh.launch``: in process, no request is cut
        return self.ask(request)


def _test_points(notebook):
    """``{grade_id: points}`` of the notebook's test cells."""
    return {
        c.metadata["grade_id"]: float(c.metadata["points"])
        for c in notebook.cells
        if "test" in c.metadata.get("tags", [])
    }


def _checks_named(notebook, names):
    return [c for c in lab_checks(LAB / "checks.py", _test_points(notebook)) if c.name in names]


def _pure_checks(notebook):
    return _checks_named(notebook, PURE_CHECKS)


@pytest.mark.parametrize("seed", [0, 5])
def test_the_pure_checks_pass_on_the_solutions(ns, notebook, seed):
    checks = _pure_checks(notebook)
    assert {c.name for c in checks} == PURE_CHECKS
    failed = [(r.name, r.detail) for r in run_checks(checks, Learner(_InProcess(ns)), seed) if not r.passed]
    assert not failed


def test_the_pure_checks_fail_on_the_student_version(empty, notebook):
    assert not any(r.passed for r in run_checks(_pure_checks(notebook), Learner(_InProcess(empty)), 0))


# ---------------------------------------------------------------- exercise 6's checks, one function each

DCP_CHECKS = ("dcp_save_path", "dcp_in_process")


def _dcp_checks(notebook):
    return _checks_named(notebook, DCP_CHECKS)


class _KernelLike(_InProcess):
    """As the kernel's channel: an exception that is not an ``Exception`` (DCP's CheckpointException is a
    BaseException) escapes ``answers.evaluate``, the cell fails, and no answer comes."""

    def ask(self, request):
        from rocmlab.harness import NoAnswer

        try:
            return super().ask(request)
        except BaseException as exc:  # noqa: BLE001
            raise NoAnswer(f"the cell raised {type(exc).__name__}") from None


def _dcp_failures(notebook, namespace, seed=0):
    results = run_checks(_dcp_checks(notebook), Learner(_KernelLike(namespace)), seed)
    return sorted(r.name for r in results if not r.passed)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("form", ["as written", "resolved", "str"])
def test_save_checkpoint_may_return_the_path_in_any_form(ns, notebook, tmp_path, monkeypatch, form):
    """The text says "return that path": a resolved or a str path is that path (the hidden check once
    compared the text, and blamed load_latest_checkpoint for it)."""
    monkeypatch.chdir(tmp_path)
    save = ns["save_checkpoint"]
    returned = {"as written": save, "resolved": lambda *a: save(*a).resolve(), "str": lambda *a: str(save(*a))}[form]
    assert _dcp_failures(notebook, dict(ns, save_checkpoint=returned), seed=3) == []


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_each_dcp_check_judges_the_function_it_names(ns, notebook, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    unpadded = ns["save_checkpoint"]

    def save_elsewhere(model, optimizer, step, root):
        return unpadded(model, optimizer, step, Path(root) / "sub")

    assert _dcp_failures(notebook, dict(ns, save_checkpoint=save_elsewhere)) == ["dcp_save_path"]
    from rocmlab.harness import mistakes_of

    (item,) = mistakes_of(_dcp_checks(notebook))
    wrong = dict(ns)
    exec(compile(item.code, "<mistake>", "exec"), wrong)  # noqa: S102 (the lab's own listed mistake)
    assert _dcp_failures(notebook, wrong) == ["dcp_in_process"]


def test_the_memory_figures_the_prose_states(ns):
    """Section 1's reading (tests/labs/prose_numbers.toml lists these as asserted here): the largest model 8
    MI300X train under each strategy, with the bytes an MI300X reports, and tiny-qwen-zh's parameter counts."""
    assert ns["MI300X_BYTES"] == 205_822_885_888 < 192 * 2**30
    largest = {
        s: round(ns["largest_model"](ns["MI300X_BYTES"], 8, s) / 1e9, 1) for s in ("ddp", "zero1", "zero2", "zero3")
    }
    assert largest == {"ddp": 12.9, "zero1": 37.4, "zero2": 54.9, "zero3": 102.9}
    assert (
        round(ns["state_bytes_per_rank"](7.61e9, 8, "ddp")["total"] / 2**30) == 113
    )  # "a 7B model needs 113 GiB per GPU"


def test_tiny_qwen_zh_parameter_counts_the_prose_states(quick_tiny_model):
    """Section 2's "0.74M parameters per layer and 1.05M in the embedding" (asserted, prose_numbers.toml)."""
    from rocmlab import lab

    model, _ = lab.load_model("tiny-qwen-zh", device="cpu", dtype=torch.float32)
    per_layer = sum(p.numel() for p in model.model.layers[0].parameters())
    assert (round(per_layer / 1e6, 2), round(model.model.embed_tokens.weight.numel() / 1e6, 2)) == (0.74, 1.05)


def test_a_rank_script_imports_what_the_notebook_imported(ns, tmp_path):
    """Issue 53: a learner's `re.fullmatch` worked in the notebook and died in both ranks (NameError: name 're')."""
    import re as learners_re

    ns["re"] = learners_re
    ns["WORK"] = tmp_path
    path = ns["write_rank_script"]("probe", ns["run_rank"], [])
    script = path.read_text(encoding="utf-8")
    assert "import re\n" in script and "import torch.distributed.nn" in script
    assert script.index("import torch.distributed.nn") < script.index("def run_rank")


def test_every_name_of_the_lab_s_rank_scripts_is_defined(ns, tmp_path):
    """A name the rank code uses and the script does not bind dies in every rank (NameError), after the launch
    started: ruff's undefined-name rule (F821) reads each script the lab writes, as the launches write them."""
    ns["WORK"] = tmp_path
    launches = {}  # each launch(...) call of the lab: name -> (work, functions), read from the source
    for cell in SOURCE.code_cells:
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "launch" and len(node.args) >= 3:
                name, work, functions = node.args[:3]
                launches[name.value] = (ns[work.id], [ns[f.id] for f in functions.elts])
    assert set(launches) == {"fsdp", "finetune"}
    ruff = Path(sys.executable).with_name("ruff")
    for name, (work, functions) in launches.items():
        path = ns["write_rank_script"](name, work, functions)
        found = subprocess.run(
            [str(ruff), "check", "--no-cache", "--select", "F821", "--output-format", "concise", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert found.returncode == 0, f"{name}: {found.stdout[-2000:]}"


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_the_listed_dcp_mistake_fails_the_visible_test_in_process(ns, notebook, tmp_path, monkeypatch):
    """What `rocmlab build --verify` proves by a full run, here in one process: the visible test's in-process part
    (the torn save) fails on the listed mistake, and passes on the solution."""
    from rocmlab.harness import mistakes_of

    monkeypatch.chdir(tmp_path)
    source = SOURCE.graded["10-dcp-1"]
    in_process = source[source.index("# In this process") : source.index("print(")]
    (item,) = mistakes_of(_dcp_checks(notebook))
    right = dict(ns, WORK=tmp_path)
    SOURCE.run(in_process, namespace=right, name="10-dcp-1 in process")
    wrong = dict(right)
    exec(compile(item.code, "<mistake>", "exec"), wrong)  # noqa: S102 (the lab's own listed mistake)
    with pytest.raises(BaseException):  # noqa: B017 (DCP raises CheckpointException, a BaseException)
        SOURCE.run(in_process, namespace=wrong, name="10-dcp-1 in process")


# ---------------------------------------------------------------- issue 47: evidence the kernel cannot shape

EVIDENCE_CHECKS = ("dcp_in_process", "export_bit_identical", "export_files", "export_returns")

# a learner who loads nothing: it names the newest complete step, and exports the fresh model it is given
LOADS_NOTHING = """
from pathlib import Path
def load_latest_checkpoint(model, optimizer, root):
    complete = [int(p.name.split("-")[1]) for p in Path(root).glob("step-*") if (p / ".metadata").is_file()]
    return max(complete, default=0)
def export_full_model(checkpoint_dir, base_model, tokenizer, out_dir):
    base_model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return Path(out_dir)
"""


class _AgreeingKernel(_KernelLike):
    """The loader's kernel, making each answer agree with itself where the answer holds both sides
    (main's did): the state "restored" is the state saved, the exported parameters the base plus the
    check's noise. The checks now draw the states and read the base themselves: nothing to copy."""

    def ask(self, request):
        from rocmlab.lab.answers import decode, encode

        reply = super().ask(request)
        answer, args = decode(reply), decode(request.get("args", []))
        if request.get("run") == "loaded_latest" and len(answer) == 7:
            empty, empty_state, loaded, want, _, want_m, _ = answer
            return encode((empty, empty_state, loaded, want, want, want_m, want_m))
        if request.get("run") == "exported" and len(answer) == 6:
            noise, base = args[2], answer[4]
            return encode((*answer[:5], {k: base[k] + noise[k] for k in base}))
        return reply


@pytest.fixture
def tiny_course_data(quick_tiny_model):
    """course_data reading the quick tiny model (its caches cleared before and after)."""
    from rocmlab import course_data

    caches = (course_data._model_folder, course_data._tokenizer, course_data.parameter_shapes)
    for cached in caches:
        cached.cache_clear()
    yield
    for cached in caches:
        cached.cache_clear()


def _evidence_results(notebook, channel):
    checks = _checks_named(notebook, EVIDENCE_CHECKS)
    assert sorted(c.name for c in checks) == sorted(EVIDENCE_CHECKS)
    return {r.name: r for r in run_checks(checks, Learner(channel), 7)}


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_loader_that_loads_nothing_fails_whatever_its_kernel_makes_agree(
    ns, notebook, tmp_path, monkeypatch, tiny_course_data
):
    """Cost: six loads of the quick tiny model, two exports. The solution passes the four rules; a
    loader that loads nothing, in a kernel that makes its answers agree, passed the restore and the
    bit-identical export while the check compared two values of its kernel, and passes neither now
    (nor the export's other rules, which count once its parameters are right)."""
    monkeypatch.chdir(tmp_path)
    honest = _evidence_results(notebook, _KernelLike(ns))
    assert all(r.passed for r in honest.values()), {n: r.detail for n, r in honest.items() if not r.passed}
    lazy = dict(ns)
    run_cell(LOADS_NOTHING, "a loader that loads nothing", lazy)
    forged = _evidence_results(notebook, _AgreeingKernel(lazy))
    assert [n for n, r in forged.items() if r.passed] == [], {n: r.detail[:200] for n, r in forged.items()}
    assert "the restored model state" in forged["dcp_in_process"].detail
    assert "exported parameter" in forged["export_bit_identical"].detail
    assert list(tmp_path.iterdir()) == []  # the checks' folders are removed


# ---------------------------------------------------------------- issue 47: the launches the checks make

LAUNCH_CHECKS = {  # the rules that judge the checks' own launches of fsdp_work and finetune_work
    "shard_placements", "shard_local_shapes", "shard_join", "shard_modules", "schedule_forward",
    "schedule_backward", "equiv_losses", "equiv_params", "equiv_falls", "dcp_resume",
    "dcp_bit_identical", "dcp_replay", "comm_measured",
}  # fmt: skip
EQUIVALENCE_CHECKS = {"equiv_losses", "equiv_params", "shard_placements", "comm_measured"}  # one launch of fsdp_work


def _checks_globals(notebook):
    """checks.py's namespace, as the harness loaded it."""
    return _checks_named(notebook, {"equiv_losses"})[0].function.__globals__


def _patient(checks):
    """``checks`` with launches that may take 200 s: in process no request is cut at 60 s, and on the
    shared 2-core machine at load 9 a launch of the quick model ran past the checks' 50 s."""
    checks[0].function.__globals__["LAUNCH_TIMEOUT_S"] = 200
    return checks


def test_every_rule_that_read_the_notebooks_launches_launches_itself(notebook):
    """No check reads the notebook's launch records (``fsdp_ranks``, ``ft_ranks``, ``ft_log``,
    ``ft_result``) or its own single-process run (``single_losses``, ``single_params``)."""
    text = (LAB / "checks.py").read_text(encoding="utf-8")
    for name in ("fsdp_ranks", "ft_ranks", "ft_log", "ft_result", "single_losses", "single_params"):
        assert f'"{name}' not in text and f"'{name}" not in text and f"({name}" not in text, name
    reads = {c.name for c in _checks_named(notebook, LAUNCH_CHECKS)}
    assert reads == LAUNCH_CHECKS


def test_the_rank_script_is_the_courses_code_around_the_learners_functions(ns, notebook, tmp_path):
    """The check writes the rank script: the learner's exercise functions (their source, asked of the
    kernel) first, then lab.py's rank code and work function, so that a learner's function cannot
    stand in for the course's; a "source" with anything beside one plain def is refused."""
    checks = _checks_globals(notebook)

    def inputs(channel):
        learner = Learner(channel, kernel_module(LAB / "checks.py"))
        return learner.run("rank_inputs", checks["launch_exercises"]())

    assert checks["launch_exercises"]() == sorted(
        ["shard_model", "set_prefetch", "rank_loss", "save_checkpoint", "load_latest_checkpoint"]
    )
    for work, exercises in (("fsdp_work", ("shard_model", "set_prefetch", "rank_loss")),
                            ("finetune_work", ("shard_model", "rank_loss", "save_checkpoint",
                                               "load_latest_checkpoint"))):  # fmt: skip
        script = checks["rank_script"](inputs(_InProcess(ns)), work)
        tree = ast.parse(script)
        defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert defined[: len(exercises)] == list(exercises) and defined[-1] == work, defined
        assert len(defined) == len(set(defined)), "a function defined twice"
        assert script.rstrip().endswith(f"run_rank({work}, json.loads(sys.argv[1]))")
        path = tmp_path / f"{work}.py"
        path.write_text(script, encoding="utf-8")
        compile(script, str(path), "exec")
    forged = dict(ns)
    run_cell("def train_step(*args):\n    return 0.0\n", "a forger's train_step", forged)
    script = checks["rank_script"](inputs(_InProcess(forged)), "fsdp_work")
    assert "return 0.0" not in script  # not an exercise: the course's train_step is written, not the kernel's
    with pytest.raises(AssertionError, match="not one plain function definition"):
        checks["rank_script"](inputs(_Smuggling(ns, "\ntrain_step = shard_model\n")), "fsdp_work")


class _Smuggling(_InProcess):
    """A kernel whose answer to "your functions' source" appends a statement to ``shard_model``'s."""

    def __init__(self, namespace, extra):
        super().__init__(namespace)
        self.extra = extra

    def ask(self, request):
        from rocmlab.lab.answers import decode, encode

        reply = super().ask(request)
        if request.get("run") == "rank_inputs":
            answer = decode(reply)
            answer["sources"]["shard_model"] += self.extra
            return encode(answer)
        return reply


_ONCE = {}


def _once(function, args):
    """``function``, answering ``args`` from ``_ONCE`` (the same deterministic run, made once by the
    test): the reference's single-process run is the forged copy's, and costs no second run."""

    def answer(*given):
        key = repr(tuple(given))
        if key == repr(args) and key in _ONCE:
            _ONCE["hits"] = _ONCE.get("hits", 0) + 1
            return _ONCE[key]
        return function(*given)

    return answer


# the classic mistake of exercise 4: each rank's own token mean, so FSDP averages per-rank means
PER_RANK_MEAN = """
def rank_loss(logits, labels, global_label_tokens, world_size):
    flat = logits[:, :-1].reshape(-1, logits.size(-1)).float()
    return F.cross_entropy(flat, labels[:, 1:].reshape(-1), ignore_index=-100)
"""


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_copies_of_the_single_run_do_not_make_fsdp_equal_to_it(ns, notebook, tmp_path, monkeypatch):
    """Cost: one launch of fsdp_work on the course model (the quick one would be built again by the
    ranks, which do not see its fixture) and 8 single-process steps (the reference's run is the forged
    copy's, ``_once``; 16 before): 84 s (45 CPU-s with its children) measured on the shared 2-core
    machine at load 9, 137 s before at load 5-6. comm_measured is judged on the same launch. A learner whose rank_loss averages per-rank means (its FSDP
    run is not the single process's) and whose ``fsdp_ranks``, ``ft_ranks`` and ``ft_log`` are copies
    of its single-process run passed the equivalence rules while they compared two values of its
    kernel; the checks now launch its functions themselves, in a fresh kernel, and compare with the
    reference kernel's single run: the equivalence fails, while the sharding, which it did right,
    passes on the same launch. (The blank learner's launches fail at its stubs: ``rocmlab build
    --verify`` grades the student version, and no check reads those names, as tested above.)"""
    from rocmlab.harness import Fresh, Reference, launch_allowance

    monkeypatch.chdir(tmp_path)
    losses, params = ns["train_single_process"](ns["TRAIN_CFG"], ns["EQUIV_STEPS"])
    _ONCE[repr((ns["TRAIN_CFG"], ns["EQUIV_STEPS"]))] = (losses, params)
    copied = {"losses": losses, "final": params, "params": {}, "shards": {}, "fsdp_modules": [], "n_layers": 0}
    forged = {
        "fsdp_ranks": [copied, copied],
        "ft_ranks": [{"attempt": 1, "resumed_from": 4, "snapshot": params, "final": params}] * 2,
        "ft_log": [{"attempt": a, "step": s, "loss": losses[s]} for a, steps in ((0, range(6)), (1, range(4, 8)))
                   for s in steps],
        "single_losses": losses,
        "single_params": params,
    }  # fmt: skip
    mean_of_means = dict(ns, **forged)
    run_cell(PER_RANK_MEAN, "a rank_loss of per-rank means", mean_of_means)
    reference = dict(ns, train_single_process=_once(ns["train_single_process"], (ns["TRAIN_CFG"], ns["EQUIV_STEPS"])))
    checks = _patient(_checks_named(notebook, EQUIVALENCE_CHECKS))
    allowance = launch_allowance((LAB / "checks.py").read_text(encoding="utf-8"))
    learner = Learner(_KernelLike(mean_of_means))
    fresh = Fresh(lambda: _KernelLike({}), allowance=allowance)  # fresh: none of its cells
    results = {
        r.name: r for r in run_checks(checks, learner, 3, reference=Reference(_InProcess(reference)), fresh=fresh)
    }
    assert results["shard_placements"].passed, results["shard_placements"]
    assert _ONCE.get("hits") == 1  # the reference's run was the copy's, not a second one
    assert results["comm_measured"].passed, results["comm_measured"]  # its formula is the solution's
    assert not results["equiv_losses"].passed and not results["equiv_losses"].error, results["equiv_losses"]
    assert "max |Δloss|" in results["equiv_losses"].detail, results["equiv_losses"].detail
    assert list(tmp_path.iterdir()) == []  # the launch's folder is removed


class _Launched:
    """A fresh kernel whose launch of fsdp_work recorded ``schedules`` and ``ddp`` on every rank (the
    traffic records comm_measured reads); what was asked, in ``log``."""

    def __init__(self, schedules, ddp, log):
        self.rank = {"schedules": schedules, "ddp": ddp}
        self.log = log

    def launch(self, request, limit_s):
        from rocmlab.lab.answers import encode

        self.log.append(("launch", request["run"], limit_s))
        return encode({"ok": True, "timed_out": False, "output": "", "ranks": [self.rank, self.rank], "log": []})

    def ask(self, request):
        raise AssertionError(f"comm_measured asked the fresh kernel {request['run']} outside a launch")


def _recorded_schedule(numels, param_bytes, reshard):
    """One step's collectives and layer starts in the order the dispatch recorder sees them (as in
    test_traffic_formula_and_the_measurement_agree_on_a_recorded_schedule): each group gathered
    before its forward, the layers gathered again in backward when resharded, all reduce-scattered."""
    root, layers = numels[0], numels[1:]
    events = [("all_gather", param_bytes * root)]
    for i, n in enumerate(layers):
        events += [("all_gather", param_bytes * n), ("forward", i)]
    backward = [("all_gather", param_bytes * n) for n in reversed(layers)] if reshard else []
    scatters = [("reduce_scatter", 4 * n) for n in reversed(layers)] + [("reduce_scatter", 4 * root)]
    return {"events": events + backward + scatters, "group_numels": list(numels)}


def test_comm_measured_asks_the_formula_before_the_launch_and_judges_it_by_the_launchs_traffic(
    ns, empty, notebook, tiny_course_data
):
    """The formula is asked of the learner's kernel before the fresh kernel starts (it is closed
    then); the launch's own traffic judges it: a formula that forgets the backward re-gather fails,
    and a launch whose groups are not the model's is a grading error, not the learner's."""
    from rocmlab.harness import Fresh, Reference, launch_allowance

    (check,) = _checks_named(notebook, {"comm_measured"})
    numels = check.function.__globals__["comm_numels"]()
    schedules = {name: _recorded_schedule(numels, pb, reshard) for name, pb, reshard in COMM_RUNS}
    allowance = launch_allowance((LAB / "checks.py").read_text(encoding="utf-8"))

    def graded(namespace, extra_ddp_bytes=0, groups=schedules):
        log, ddp_bytes = [], 4 * sum(numels) + extra_ddp_bytes
        learner = Learner(_InProcess(namespace))
        fresh = Fresh(lambda: _Launched(groups, {"bucket_bytes": [ddp_bytes]}, log),
                      before=lambda: (log.append("learner closed"), learner.close("shut down")),
                      allowance=allowance)  # fmt: skip
        (result,) = run_checks([check], learner, 3, reference=Reference(unavailable="none here"), fresh=fresh)
        return result, log

    result, log = graded(ns)
    assert result.passed, result
    assert log == ["learner closed", ("launch", "launched", allowance[1])]
    assert allowance == (2, float(check.function.__globals__["LAUNCH_LIMIT_S"]))
    forgetful = dict(ns)
    run_cell(FORGETS_THE_REGATHER, "a formula without the backward re-gather", forgetful)
    result, _ = graded(forgetful)
    assert "all_gather_backward predicted against measured" in result.detail and not result.error, result
    result, _ = graded(ns, extra_ddp_bytes=4096)  # the DDP buckets hold more than the parameters
    assert "ddp_all_reduce predicted against measured" in result.detail, result
    result, _ = graded(empty)
    assert result.detail == "your code raised NotImplementedError" and not result.error
    other = {name: dict(s, group_numels=[1, *s["group_numels"][1:]]) for name, s in schedules.items()}
    result, _ = graded(ns, groups=other)
    assert "the launch's FSDP groups" in result.error and result.detail == "", result


COMM_RUNS = (("default", 4, True), ("no-reshard", 4, False), ("bf16-params", 2, True))  # checks.py's
FORGETS_THE_REGATHER = """
def comm_bytes_per_step(group_numels, world_size, param_bytes=4, reduce_bytes=4, reshard_after_forward=True):
    share = (world_size - 1) / world_size
    total = sum(group_numels)
    forward = share * total * param_bytes
    scatter = share * total * reduce_bytes
    return {"all_gather_forward": forward, "all_gather_backward": 0.0, "reduce_scatter": scatter,
            "fsdp_total": forward + scatter, "ddp_all_reduce": 2 * share * total * 4}
"""
