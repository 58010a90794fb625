"""Lab 09 (profiling and the performance levers of ROCm): source shape, the recorded data, and the
solution functions run outside the notebook (no model, no profiler)."""

import csv
import importlib.util
import io
import math
import random
import re
import statistics

import pytest
from labsource import LabSource, definitions

from rocmlab.harness import Learner, lab_checks, run_checks
from rocmlab.lab.answers import evaluate

SOURCE = LabSource("09-profiling")
LAB = SOURCE.folder
DATA = LAB / "data"
TRACE_HEADER = [
    "Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
    "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size", "Scratch_Size", "VGPR_Count",
    "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
    "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z",
]  # fmt: skip
COUNTER_HEADER = [
    "Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id", "Grid_Size", "Kernel_Id",
    "Kernel_Name", "Workgroup_Size", "LDS_Block_Size", "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count",
    "SGPR_Count", "Counter_Name", "Counter_Value", "Start_Timestamp", "End_Timestamp",
]  # fmt: skip


GIVEN = ("name_the_bound", "parse_tunableop", "decision_table")  # written for the learner, tested here


@pytest.fixture(scope="module")
def sol():
    """The functions of the solution cells and the given ones in one namespace (their top-level
    statements need the notebook)."""
    namespace = {"statistics": statistics, "math": math}
    cells = SOURCE.tagged("solution") + [
        cell for cell in SOURCE.code_cells if any(re.search(rf"^def {name}\(", cell.source, re.M) for name in GIVEN)
    ]
    return SOURCE.run(*(definitions(cell.source, constants=lambda node: False) for cell in cells), namespace=namespace)


def rows_of(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def header_of(path):
    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader(f))


# -- source shape --------------------------------------------------------------------------------


def test_lab_toml_profiles():
    profiles = SOURCE.lab.profiles
    assert {"smoke", "gpu"} <= set(profiles)
    assert profiles["smoke"].params["MODEL"] == "tiny-qwen-zh"
    assert profiles["gpu"].params["MODEL"] == "Qwen/Qwen2.5-0.5B-Instruct"


def test_grade_ids_unique_and_every_test_cell_is_graded_by_checks():
    tests, solutions = SOURCE.tagged("test"), SOURCE.tagged("solution")
    assert len(SOURCE.graded) == len(tests) + len(solutions), "duplicate grade_id"
    for grade_id in SOURCE.graded:
        assert re.fullmatch(r"09-(stretch-)?[a-z]+-(sol-)?\d", grade_id), grade_id
    for cell in tests:
        assert "HIDDEN TESTS" not in cell.source, cell.metadata
        assert int(cell.metadata["points"]) > 0, cell.metadata
    # every test cell's points are split among its checks (lab_checks raises naming what does not add up)
    checks = lab_checks(LAB / "checks.py", {c.metadata["grade_id"]: float(c.metadata["points"]) for c in tests})
    assert len(checks) >= 2 * len(tests)
    for cell in solutions:
        assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source, cell.metadata
    assert len(tests) == 8  # seven graded exercises and one optional stretch


def test_prose_comes_in_zh_en_pairs():
    zh, en = len(SOURCE.tagged("zh")), len(SOURCE.tagged("en"))
    assert zh == en and zh >= 15


def test_recorded_data_is_labelled_illustrative():
    card = (DATA / "README.md").read_text(encoding="utf-8")
    assert "ILLUSTRATIVE, NOT MEASURED" in card
    text = (LAB / "lab.py").read_text(encoding="utf-8")
    assert "示意数据" in text and "illustrative" in text


# -- the recorded data ----------------------------------------------------------------------------


def test_make_data_reproduces_the_shipped_files(tmp_path):
    spec = importlib.util.spec_from_file_location("lab09_make_data", LAB / "make_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["make_data.py", str(tmp_path)])
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    shipped = sorted(p.relative_to(DATA) for p in DATA.rglob("*") if p.is_file() and p.name != "README.md")
    assert made == shipped
    for relative in made:
        assert (tmp_path / relative).read_bytes() == (DATA / relative).read_bytes(), relative


def test_rocprofv3_files_have_the_documented_columns():
    traces = sorted(DATA.glob("rocprofv3/*/*_kernel_trace.csv"))
    assert len(traces) == 3
    for path in traces:
        assert header_of(path) == TRACE_HEADER, path
        for row in rows_of(path):
            assert row["Kind"] == "KERNEL_DISPATCH" and int(row["End_Timestamp"]) > int(row["Start_Timestamp"])
    for path in DATA.glob("rocprofv3/prefill/pass_*/*_counter_collection.csv"):
        assert header_of(path) == COUNTER_HEADER, path
    stats = next(DATA.glob("rocprofv3/decode_eager/*_kernel_stats.csv"))
    assert header_of(stats) == [
        "Name",
        "Calls",
        "TotalDurationNs",
        "AverageNs",
        "Percentage",
        "MinNs",
        "MaxNs",
        "StdDev",
    ]


def test_kernel_summary_equals_the_recorded_stats(sol):
    mine = {r["name"]: r for r in sol["kernel_summary"](rows_of(next(DATA.glob("rocprofv3/decode_eager/*_trace.csv"))))}
    for stat in rows_of(next(DATA.glob("rocprofv3/decode_eager/*_kernel_stats.csv"))):
        assert mine[stat["Name"]]["calls"] == int(stat["Calls"])
        assert mine[stat["Name"]]["total_ns"] == int(stat["TotalDurationNs"])
        assert abs(100 * mine[stat["Name"]]["share"] - float(stat["Percentage"])) < 1e-3


def test_recorded_traces_tell_the_story(sol):
    """Eager decode waits for the host, graph replay and prefill keep the device busy."""
    bound = {}
    for name in ("decode_eager", "decode_graph", "prefill"):
        rows = rows_of(next(DATA.glob(f"rocprofv3/{name}/*_kernel_trace.csv")))
        spans = [(int(r["Start_Timestamp"]), int(r["End_Timestamp"])) for r in rows]
        idle = sol["busy_and_idle"](spans, min(a for a, _ in spans), max(b for _, b in spans))
        bound[name] = sol["name_the_bound"](1 - idle["idle_fraction"], 0.0)
    assert bound == {"decode_eager": "host", "decode_graph": "device", "prefill": "device"}


def test_counter_metrics_agree_with_speed_of_light(sol):
    pass_1 = sol["counter_metrics"](rows_of(next(DATA.glob("rocprofv3/prefill/pass_1/*.csv"))))
    pass_2 = sol["counter_metrics"](rows_of(next(DATA.glob("rocprofv3/prefill/pass_2/*.csv"))))
    top = sol["kernel_summary"](rows_of(next(DATA.glob("rocprofv3/prefill/*_trace.csv"))))[0]["name"]
    sol_rows = {r["Metric"]: r for r in rows_of(DATA / "rocprof-compute" / "prefill_gemm_speed_of_light.csv")}
    assert math.isclose(
        pass_1[top]["mfma_bf16_tflops"] * 1000, float(sol_rows["MFMA FLOPs (BF16)"]["Avg"]), rel_tol=0.02
    )
    assert math.isclose(
        pass_2[top]["lds_conflicts_per_access"], float(sol_rows["LDS Bank Conflicts/Access"]["Avg"]), rel_tol=0.05
    )
    for row in sol_rows.values():  # a percentage of peak is Avg / Peak
        assert math.isclose(float(row["Pct of Peak"]), 100 * float(row["Avg"]) / float(row["Peak"]), abs_tol=0.01)
    assert max(
        (k for k, m in pass_2.items() if m["lds_conflicts_per_access"] is not None),
        key=lambda k: pass_2[k]["lds_conflicts_per_access"],
    ).startswith("attn_fwd")


def test_tunableop_file_holds_qwen25_linear_shapes(sol):
    parsed = sol["parse_tunableop"]((DATA / "tunableop" / "tunableop_results0.csv").read_text(encoding="utf-8"))
    assert set(parsed["validators"]) == {
        "PT_VERSION",
        "ROCM_VERSION",
        "GCN_ARCH_NAME",
        "ROCBLAS_VERSION",
        "HIPBLASLT_VERSION",
    }
    hidden, inter, vocab, kv = 896, 4864, 151936, 2 * 64  # Qwen2.5-0.5B config.json
    layers = {(hidden, hidden), (kv, hidden), (inter, hidden), (hidden, inter), (vocab, hidden)}
    assert {(g["m"], g["k"]) for g in parsed["gemms"]} == layers
    assert {g["n"] for g in parsed["gemms"]} == {1, 4096}
    assert all(g["ms"] > 0 and g["layout"] == "TN" for g in parsed["gemms"])


# -- the solution functions ------------------------------------------------------------------------


def test_self_time_shares(sol):
    rows = [{"name": "aten::addmm", "self_us": 3.0, "calls": 1}, {"name": "aten::add", "self_us": 1.0, "calls": 1}]
    assert sol["self_time_shares"](rows, {"add": ["aten::add"], "mm": ["mm"]}) == {"add": 1.0, "mm": 0.0, "other": 0.0}
    with pytest.raises(ValueError):
        sol["self_time_shares"]([], {"mm": ["mm"]})


def test_busy_and_idle_matches_a_brute_force_grid(sol):
    rng = random.Random(3)
    for _ in range(50):
        intervals = [(a, a + rng.randint(-2, 12)) for a in (rng.randint(-10, 60) for _ in range(8))]
        grid = [any(a <= t < b for a, b in intervals) for t in range(50)]
        gap = run = 0
        for busy in grid:
            run = 0 if busy else run + 1
            gap = max(gap, run)
        got = sol["busy_and_idle"](intervals, 0, 50)
        assert (got["busy"], got["idle"], got["largest_gap"]) == (sum(grid), 50 - sum(grid), gap), intervals
    with pytest.raises(ValueError):
        sol["busy_and_idle"]([], 3, 3)


def test_name_the_bound(sol):
    f = sol["name_the_bound"]
    assert [f(0.9, 0.0), f(0.5, 0.1), f(0.9, 0.3)] == ["device", "host", "data"]
    with pytest.raises(ValueError):
        f(1.5, 0.0)


def test_compare_runs_uses_medians_and_the_interquartile_range(sol):
    got = sol["compare_runs"]([2.0, 2.1, 2.05, 2.02, 30.0], [1.0, 1.01, 1.02])
    assert got["verdict"] == "faster" and math.isclose(got["noise_s"], 0.08) and got["baseline_median_s"] == 2.05
    assert sol["compare_runs"]([1.0, 1.2, 1.1], [1.05, 1.15, 1.1])["verdict"] == "no difference"
    with pytest.raises(ValueError):
        sol["compare_runs"]([1.0, 1.0], [1.0, 1.0, 1.0])


def test_parse_tunableop_and_validators(sol):
    text = "Validator,PT_VERSION,2.9.1\n\nGemmStridedBatchedTunableOp_Half_NT,nt_8_16_32_B_4_ld_8_16_8,Default\n"
    gemm = sol["parse_tunableop"](text)["gemms"][0]
    assert (gemm["m"], gemm["n"], gemm["k"], gemm["batch"], gemm["library"], gemm["ms"]) == (
        8,
        16,
        32,
        4,
        "default",
        None,
    )
    with pytest.raises(ValueError, match="line 2"):
        sol["parse_tunableop"]("Validator,A,1\nGemmTunableOp_float_NN\n")


def test_memory_timeline(sol):
    events = [
        {"name": "[memory]", "ts": t, "args": {"Bytes": b, "Total Allocated": total, "Device Type": 0}}
        for t, b, total in ((1, 64, 1064), (2, 512, 1576), (3, -512, 1064))
    ]
    assert sol["memory_timeline"](events, 0) == {
        "start_bytes": 1000,
        "peak_bytes": 1576,
        "peak_above_start": 576,
        "largest_alloc_bytes": 512,
    }
    with pytest.raises(ValueError):
        sol["memory_timeline"](events, 1)


def test_decision_table(sol):
    rules = [
        {"symptom": "a", "metric": "x", "threshold": 0.5, "lever": "L"},
        {"symptom": "b", "metric": "x", "threshold": 0.9, "lever": "M"},
    ]
    rows = sol["decision_table"](rules, {"x": 0.6}, {"L": "faster", "M": "faster"})
    assert [(r["present"], r["pull"]) for r in rows] == [(True, True), (False, False)]
    with pytest.raises(ValueError, match="y"):
        sol["decision_table"]([{"symptom": "c", "metric": "y", "threshold": 0, "lever": "L"}], {}, {})


def test_counter_metrics_keeps_each_dispatch_duration_once(sol):
    text = "\n".join(",".join(r) for r in [
        ["Kernel_Name", "Dispatch_Id", "Counter_Name", "Counter_Value", "Start_Timestamp", "End_Timestamp"],
        ["k", "1", "FETCH_SIZE", "1", "0", "100"], ["k", "1", "WRITE_SIZE", "1", "0", "100"],
        ["k", "2", "FETCH_SIZE", "2", "100", "300"], ["k", "2", "WRITE_SIZE", "0", "100", "300"],
    ])  # fmt: skip
    got = sol["counter_metrics"](list(csv.DictReader(io.StringIO(text))))["k"]
    assert got["dispatches"] == 2 and got["duration_ns"] == 300
    assert math.isclose(got["dram_gbs"], 4 * 1024 / 300) and got["mfma_bf16_tflops"] is None


# -- the hidden checks, against the solution functions --------------------------------------------

JUDGE_CHECKS = {"judge_choices"} | {f"judge_{part}_{case}" for part in ("lever", "metric") for case in "ABC"}
NOTEBOOK_STATE = {"shares_values", "idle_union"} | JUDGE_CHECKS  # need the executed notebook
RECORD_CHECKS = {"record_writes_trace", "record_schedule", "record_shapes", "record_memory", "record_rejects_no_steps"}


class _InProcess:
    """A harness channel that answers in this process's namespace (the kernel's side, run here)."""

    def __init__(self, namespace):
        self.namespace = namespace

    def ask(self, request):
        return evaluate(request, self.namespace)


@pytest.mark.parametrize("seed", [0, 7])
def test_the_checks_pass_on_the_solution_functions(sol, seed):
    tests = {c.metadata["grade_id"]: float(c.metadata["points"]) for c in SOURCE.tagged("test")}
    checks = [c for c in lab_checks(LAB / "checks.py", tests) if c.name not in NOTEBOOK_STATE | RECORD_CHECKS]
    failed = [(r.name, r.detail) for r in run_checks(checks, Learner(_InProcess(sol)), seed) if not r.passed]
    assert not failed


def test_the_checks_catch_max_minus_min_noise(sol):
    def wrong(baseline, lever):
        got = sol["compare_runs"](baseline, lever)
        return dict(got, noise_s=max(max(baseline) - min(baseline), max(lever) - min(lever)))

    tests = {c.metadata["grade_id"]: float(c.metadata["points"]) for c in SOURCE.tagged("test")}
    (noise_iqr,) = [c for c in lab_checks(LAB / "checks.py", tests) if c.name == "noise_iqr"]
    (result,) = run_checks([noise_iqr], Learner(_InProcess(dict(sol, compare_runs=wrong))), 0)
    assert not result.passed


@pytest.fixture
def decoding(sol, tmp_path, monkeypatch):
    """The solution's profile_decode over a small linear "decoder" on the CPU, in a scratch work folder."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    monkeypatch.chdir(tmp_path)
    layer = torch.nn.Linear(32, 32)

    def next_token(state):
        with torch.no_grad():
            state["next"] = torch.relu(layer(state["next"]))

    names = {"torch": torch, "profile": profile, "record_function": record_function, "schedule": schedule}
    names |= {"ACTIVITIES": [ProfilerActivity.CPU], "start_decode": lambda: {"next": torch.randn(4, 32)}}
    return dict(sol, **names, next_token=next_token)


def _record_results(namespace, seed=0):
    tests = {c.metadata["grade_id"]: float(c.metadata["points"]) for c in SOURCE.tagged("test")}
    checks = [c for c in lab_checks(LAB / "checks.py", tests) if c.grade_id == "09-record-1"]
    return {r.name: r.passed for r in run_checks(checks, Learner(_InProcess(namespace)), seed)}


def _bind(namespace):
    """Re-define the solution's profile_decode so that its globals are `namespace`."""
    (cell,) = [c for c in SOURCE.tagged("solution") if c.metadata["grade_id"] == "09-record-sol-1"]
    return SOURCE.run(definitions(cell.source, constants=lambda node: False), namespace=namespace)


@pytest.mark.slow
def test_profile_decode_passes_every_record_check(decoding):
    assert _record_results(_bind(decoding)) == dict.fromkeys(
        ["record_writes_trace", "record_schedule", "record_shapes", "record_memory", "record_rejects_no_steps"], True
    )


@pytest.mark.slow
def test_the_record_checks_catch_a_profile_without_schedule_shapes_or_memory(decoding):
    namespace = _bind(decoding)
    from torch.profiler import profile

    def plain_profile(n_steps, trace_path):
        if n_steps < 1:
            raise ValueError(n_steps)
        state = namespace["start_decode"]()
        namespace["next_token"](state)  # the warm-up, outside the profile
        with profile(activities=namespace["ACTIVITIES"]) as prof:
            for _ in range(n_steps):
                with namespace["record_function"]("decode_step"):
                    namespace["next_token"](state)
                prof.step()
        prof.export_chrome_trace(trace_path)
        return trace_path

    got = _record_results(dict(namespace, profile_decode=plain_profile))
    assert got == {
        "record_writes_trace": True,
        "record_schedule": False,  # ProfilerStep#0 … #n-1: step 0 was recorded
        "record_shapes": False,
        "record_memory": False,
        "record_rejects_no_steps": True,
    }


# -- exercise 10: the judgement, against the recorded data -----------------------------------------


def _judge_namespace(sol, judgements):
    namespace = {"JUDGEMENTS": judgements}
    (cell,) = [c for c in SOURCE.code_cells if c.source.startswith("LEVER_CHOICES")]
    choices = definitions(cell.source, constants=lambda node: node.targets[0].id.endswith("_CHOICES"))
    return SOURCE.run(choices, namespace=dict(sol, **namespace))


def _judge_results(namespace):
    tests = {c.metadata["grade_id"]: float(c.metadata["points"]) for c in SOURCE.tagged("test")}
    checks = [c for c in lab_checks(LAB / "checks.py", tests) if c.grade_id == "09-judge-1"]
    return {r.name: r.passed for r in run_checks(checks, Learner(_InProcess(namespace)), 0)}


def _solution_judgements():
    (cell,) = [c for c in SOURCE.tagged("solution") if c.metadata["grade_id"] == "09-judge-sol-1"]
    return SOURCE.run(cell.source)["JUDGEMENTS"]


def test_the_judge_checks_pass_on_the_solution_and_name_each_wrong_answer(sol):
    right = _solution_judgements()
    assert all(_judge_results(_judge_namespace(sol, right)).values())
    wrong = {case: dict(answer) for case, answer in right.items()}
    wrong["A"]["metric"] = "kernel_count"  # the same 921 kernels in both recordings
    wrong["C"]["lever"] = "activation checkpointing"  # already pulled; the logits are left
    failed = {name for name, passed in _judge_results(_judge_namespace(sol, wrong)).items() if not passed}
    assert failed == {"judge_metric_A", "judge_lever_C"}
    bad = dict(right, B={"lever": "gradient accumulation", "metric": "peak_above_start_mib"})
    assert not _judge_results(_judge_namespace(sol, bad))["judge_choices"]


def test_the_recorded_cases_support_the_key(sol):
    """Case A: the same kernels and busy time, the idle share collapses (cases B and C are the learner's own run)."""
    metrics = SOURCE.run(
        *(
            definitions(c.source, constants=lambda node: False)
            for c in SOURCE.code_cells
            if "def trace_metrics" in c.source or "def recorded_idle" in c.source
        ),
        namespace=dict(sol),
    )
    traces = {
        n: rows_of(next(DATA.glob(f"rocprofv3/{n}/*_kernel_trace.csv")))
        for n in ("decode_eager", "decode_graph", "prefill")
    }
    eager, graph, prefill = (metrics["trace_metrics"](traces[n]) for n in ("decode_eager", "decode_graph", "prefill"))
    assert eager["kernel_count"] == graph["kernel_count"] and math.isclose(
        eager["busy_us"], graph["busy_us"], rel_tol=0.01
    )
    assert eager["idle_fraction"] > 0.5 > 0.2 > graph["idle_fraction"]
