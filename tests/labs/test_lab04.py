"""Lab 04 (collectives and RCCL debugging): its solution cells against its graded tests.

Fast tests run the pure-Python exercises (init plan, busbw, busbw against the fabric's peak, the
debugging kit) straight from the lab source, check that each test cell rejects the empty student
version and plausible wrong answers, and check the source's shape (contracts in both languages,
stretch after the core). Slow tests launch the ring all-reduce under torchrun with 2 to 4 ranks.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
import torch
from in_process import InProcess
from labsource import LabSource, as_code, student

from rocmlab.lab import datasheets

SOURCE = LabSource("04-collectives-rccl")
LAB = SOURCE.folder


@pytest.fixture(scope="module")
def cells():
    return SOURCE.graded


def write_module(tmp_path, cells, grade_id, *, empty=False):
    source = cells[grade_id]
    name = source.splitlines()[0].split()[1]
    (tmp_path / name).write_text(as_code(student(source) if empty else source))
    return tmp_path / name


def write_given(tmp_path, name):
    """Write the given (ungraded) %%writefile cell that creates `name`."""
    (tmp_path / name).write_text(as_code(SOURCE.cell_starting(f"%%writefile {name}")))
    return tmp_path / name


def run_cells(*sources, namespace=None):
    namespace = {"torch": torch, "math": __import__("math"), "json": json} if namespace is None else namespace
    return SOURCE.run(*sources, namespace=namespace)


def import_from(tmp_path, module_name, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(module_name, None)
    return __import__(module_name)


def test_every_profile_parameter_is_in_the_parameters_cell():
    for name, profile in SOURCE.lab.profiles.items():
        missing = set(profile.params) - SOURCE.parameter_names
        assert not missing, f"profile {name}: {missing} not assigned in the parameters cell"


def test_grade_ids_are_unique_and_paired(cells):
    tests = [g for g in cells if "-sol-" not in g]
    assert len(tests) >= 6 and all(g.startswith("04-") for g in cells)


def test_every_solution_cell_has_a_contract_in_both_languages_right_above():
    """The check of labs 01/02: a zh cell with 约定 and an en cell with "contract" right above each solution."""
    cells = SOURCE.cells
    for i, cell in enumerate(cells):
        if "solution" not in cell.metadata.get("tags", []):
            continue
        zh, en = cells[i - 2], cells[i - 1]
        assert "zh" in zh.metadata.get("tags", []) and "约定" in zh.source, cell.metadata["grade_id"]
        assert "en" in en.metadata.get("tags", []) and "contract" in en.source, cell.metadata["grade_id"]


def test_stretch_comes_after_the_core_under_a_stretch_heading():
    ids = list(SOURCE.graded)
    stretch = [i for i, g in enumerate(ids) if g.startswith("04-stretch-")]
    assert stretch and stretch == list(range(len(ids) - len(stretch), len(ids))), ids
    first = next(i for i, c in enumerate(SOURCE.cells) if "04-stretch-" in c.metadata.get("grade_id", ""))
    headings = [c.source for c in SOURCE.cells[:first] if c.cell_type == "markdown"][-4:]
    assert any("## 选做" in h for h in headings) and any("## Stretch" in h for h in headings)
    assert SOURCE.lab.minutes <= 105, "the graded core fits about 100 of the 120 minutes"


def test_zh_prose_has_none_of_the_reviewed_calques():
    source = (LAB / "lab.py").read_text(encoding="utf-8")
    for calque in ("丢掉几天", "实践者报告", "诚实的基准", "smoke 配置", "# Lab 0"):
        zh_lines = [line for line in source.splitlines() if calque in line and "Lab 04 · Collectives" not in line]
        assert not zh_lines, (calque, zh_lines)


@pytest.mark.parametrize("grade_id", ["04-init-1"])
def test_init_plan_solution_passes_and_student_fails(tmp_path, cells, monkeypatch, grade_id):
    write_module(tmp_path, cells, "04-init-sol-1")
    module = import_from(tmp_path, "init_plan", monkeypatch)
    run_cells(cells[grade_id], namespace={"init_plan": module.init_plan, "torch": torch})
    write_module(tmp_path, cells, "04-init-sol-1", empty=True)
    module = import_from(tmp_path, "init_plan", monkeypatch)
    with pytest.raises(NotImplementedError):
        run_cells(cells[grade_id], namespace={"init_plan": module.init_plan, "torch": torch})


def test_the_given_dist_common_imports_torch_distributed_nn_before_init(tmp_path):
    """Issue 16: imported after init_process_group, torch.distributed.nn pins the default group."""
    source = write_given(tmp_path, "dist_common.py").read_text()
    assert "import torch.distributed.nn" in source and "from init_plan import init_plan" in source
    assert source.index("import torch.distributed.nn") < source.index("init_process_group")


def test_busbw_solution_passes_and_student_fails(cells):
    run_cells(cells["04-busbw-sol-1"], cells["04-busbw-1"])
    with pytest.raises(NotImplementedError):
        run_cells(student(cells["04-busbw-sol-1"]), cells["04-busbw-1"])


def test_busbw_matches_nccl_tests_factors(cells):
    bandwidth = run_cells(cells["04-busbw-sol-1"])["bandwidth"]
    for n in (2, 3, 8):
        assert bandwidth("all_reduce", 1e9, 1.0, n) == pytest.approx((1.0, 2 * (n - 1) / n))
        for op in ("reduce_scatter", "all_gather", "all_to_all"):
            assert bandwidth(op, 1e9, 1.0, n)[1] == pytest.approx((n - 1) / n)
        for op in ("broadcast", "reduce"):
            assert bandwidth(op, 1e9, 1.0, n)[1] == pytest.approx(1.0)


def test_busbw_vs_peak_solution_passes_and_student_fails(cells):
    ns = {"math": __import__("math"), "datasheets": datasheets}
    run_cells(cells["04-peak-sol-1"], cells["04-peak-1"], namespace=dict(ns))
    with pytest.raises(NotImplementedError):
        run_cells(student(cells["04-peak-sol-1"]), cells["04-peak-1"], namespace=dict(ns))


@pytest.mark.parametrize(
    "original, broken",
    [
        ("links = n_gpus - 1", "links = link.gpus - 1"),  # every mesh link counted, whatever n
        ("links = 1\n", "links = n_gpus - 1\n"),  # a switch peak that grows with n
        ("100 * busbw_gbs / theoretical", "busbw_gbs / theoretical"),  # a fraction, not a percentage
    ],
)
def test_busbw_vs_peak_test_rejects_a_wrong_denominator(cells, original, broken):
    solution = cells["04-peak-sol-1"]
    assert original in solution
    ns = {"math": __import__("math"), "datasheets": datasheets}
    with pytest.raises(AssertionError, match="rule"):
        run_cells(solution.replace(original, broken, 1), cells["04-peak-1"], namespace=ns)


def test_interconnect_rows_state_the_cited_figures():
    xgmi, h100, h200 = (datasheets.interconnect(k) for k in ("MI300X", "H100 SXM", "H200 SXM"))
    assert (xgmi.topology, xgmi.gpus, xgmi.link_gbs, xgmi.usable_link_gbs) == ("mesh", 8, 64, 48)
    assert xgmi.sources[0].startswith("https://rocm.blogs.amd.com/") and "mi300x-rccl-xgmi" in xgmi.sources[0]
    for row in (h100, h200):
        assert (row.topology, row.gpus, row.link_gbs, row.usable_link_gbs) == ("switch", 8, 450, None)
        assert any("hopper-architecture" in url for url in row.sources)
    for row in datasheets.INTERCONNECTS:
        datasheets.by_key(row.gpu)  # every fabric belongs to a GPU of the datasheet table
        assert row.sources and all(url.startswith("https://") for url in row.sources)
    assert datasheets.interconnect("MI300X xGMI") is xgmi
    with pytest.raises(KeyError, match="known"):
        datasheets.interconnect("B200")


def test_debug_kit_solution_passes_and_student_fails(cells):
    run_cells(cells["04-stretch-debug-sol-1"], cells["04-stretch-debug-1"])
    with pytest.raises(NotImplementedError):
        run_cells(student(cells["04-stretch-debug-sol-1"]), cells["04-stretch-debug-1"])


def test_debug_kit_sets_both_flight_recorder_names_to_the_same_values(cells):
    debug_env = run_cells(cells["04-stretch-debug-sol-1"])["debug_env"]
    env = debug_env("hang", dump_dir="/tmp/fr")
    assert env["TORCH_FR_BUFFER_SIZE"] == env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "/tmp/fr/rank_"
    assert "torch_version" not in cells["04-stretch-debug-sol-1"], "no branching on an arbitrary torch version"


@pytest.mark.parametrize(
    "dropped",
    [
        '"TORCH_FR_BUFFER_SIZE": "2000", ',  # only the old name: the flight recorder of torch >= 2.8 wants the new
        '"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",',  # only the new name: ProcessGroupNCCL still reads the old
        '"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{dump_dir}/rank_",',
    ],
)
def test_debug_kit_test_rejects_a_single_flight_recorder_name(cells, dropped):
    solution = cells["04-stretch-debug-sol-1"]
    assert dropped in solution
    with pytest.raises(AssertionError, match="hang"):
        run_cells(solution.replace(dropped, "", 1), cells["04-stretch-debug-1"])


def test_debug_kit_test_rejects_wrong_interface_without_debug_logs(cells):
    """The hidden requirement of 1.0.x, now stated: wrong_interface must also turn NCCL_DEBUG on."""
    solution = cells["04-stretch-debug-sol-1"]
    wrong = '"wrong_interface": {**logs, "NCCL_DEBUG_SUBSYS": "INIT,NET", **socket},'
    assert wrong in solution
    broken = solution.replace(wrong, '"wrong_interface": {**socket},', 1)
    with pytest.raises(AssertionError, match="wrong_interface"):
        run_cells(broken, cells["04-stretch-debug-1"])
    zh_contract = next(c for c in SOURCE.cells if "选做 S1 的约定" in c.source)
    assert "NCCL_DEBUG" in zh_contract.source.split('`"wrong_interface"`')[1].split("\n")[0]


# ---------------------------------------------------------------- torchrun (slow)


def ring_run(tmp_path, cells, nproc, sizes, *, break_it=False):
    from rocmlab.lab import run_torchrun

    write_module(tmp_path, cells, "04-init-sol-1")
    write_given(tmp_path, "dist_common.py")
    ring = write_module(tmp_path, cells, "04-ring-sol-1")
    if break_it:  # all-gather forgotten: each rank keeps only its own reduced chunk
        ring.write_text(
            ring.read_text().replace(
                "    for step in range(n - 1):\n        exchange((rank + 1 - step)",
                "    for step in range(0):\n        exchange((rank + 1 - step)",
            )
        )
    (tmp_path / "run_ring.py").write_text(as_code(SOURCE.cell_starting("%%writefile run_ring.py")))
    runs = tmp_path / "runs"
    runs.mkdir()
    result = run_torchrun("run_ring.py", nproc=nproc, args=[runs, 0, *sizes], cwd=tmp_path, timeout_s=180, show=False)
    return result, [json.loads((runs / f"ring_ws{nproc}_rank{r}.json").read_text()) for r in range(nproc)]


@pytest.mark.slow
def test_ring_all_reduce_with_four_ranks(tmp_path, cells, monkeypatch):
    result, ranks = ring_run(tmp_path, cells, 4, [1, 6, 4099])
    assert result.ok, result.summary()
    dist_common = import_from(tmp_path, "dist_common", monkeypatch)
    for size in (1, 6, 4099):
        expected = sum(dist_common.rank_input(r, size, 0) for r in range(4))
        sent = 0
        for data in ranks:
            case = next(c for c in data["results"] if c["size"] == size)
            assert torch.allclose(torch.tensor(case["ring"]).reshape(-1), expected, rtol=1e-5, atol=1e-5)
            assert case["steps"] == 6
            sent += case["sent_elements"]
        assert sent == 2 * 3 * size


@pytest.mark.slow
def test_ring_test_cell_catches_a_missing_all_gather(tmp_path, cells, monkeypatch):
    result, ranks = ring_run(tmp_path, cells, 2, [7, 1000], break_it=True)
    assert result.ok, result.summary()
    case = next(c for c in ranks[0]["results"] if c["size"] == 7)
    assert not torch.allclose(torch.tensor(case["ring"]), torch.tensor(case["reference"]))


def test_every_test_cell_is_graded_by_checks_whose_points_add_up():
    """Since 1.2.0 the graded rules live in checks.py (the trusted harness), none in the notebook."""
    from rocmlab.harness import hidden_files, load_checks, problems

    checks_file = LAB / "checks.py"
    checks = load_checks(checks_file.read_text(encoding="utf-8"), str(checks_file), hidden_files(checks_file))
    tests = SOURCE.tagged("test")
    assert all("HIDDEN TESTS" not in cell.source for cell in tests)
    cells = {cell.metadata["grade_id"]: float(cell.metadata["points"]) for cell in tests}
    assert problems(checks, cells) == []
    assert len({c.name for c in checks}) == len(checks)


# -- the guarded and fixed runs are launched by the check, on N_RANKS from the run's parameters or the
#    reference kernel, with the learner's hang_tools.py as the only learner input (issue 47) --------

HANG_CHECKS = {"guarded_fails_fast", "guarded_names_missing", "guarded_every_rank_fails", "fixed_runs", "fixed_minimum"}


def _launched(n, missing):
    """What ``in_kernel.uneven_run`` returns for the guarded and fixed runs of a right hang_tools.py on
    ``n`` ranks: the guarded run failed and rank 0 printed gloo's monitoredBarrier line with
    wait_all_ranks (format: pytorch's torch/csrc/distributed/c10d/ProcessGroupGloo.cpp,
    ProcessGroupGloo::monitoredBarrier); the fixed run's ranks wrote train_uneven.py's JSON."""
    line = f"[Rank 0]: Ranks {', '.join(map(str, sorted(missing)))} failed to pass monitoredBarrier in 5000 ms"
    guarded = {
        "timed_out": False,
        "returncode": 1,
        "returncodes": [1] * n,
        "outputs": [line if r == 0 else "" for r in range(n)],
        "records": [None] * n,
    }
    steps = min(len(range(r, 7, n)) for r in range(n))
    total = float(sum(r + s * n for s in range(steps) for r in range(n)))
    fixed = {
        "timed_out": False,
        "returncode": 0,
        "returncodes": [0] * n,
        "outputs": [""] * n,
        "records": [{"rank": r, "steps": steps, "total": total} for r in range(n)],
    }
    return {"guarded": guarded, "fixed": fixed}  # fmt: skip


def _fresh():
    """A fresh kernel in this process, with the allowance lab 04's checks.py declares for its launches."""
    from rocmlab.harness import Fresh, launch_allowance

    return Fresh(lambda: InProcess({}), allowance=launch_allowance((LAB / "checks.py").read_text(encoding="utf-8")))


class _Launches:
    """A learner whose kernel-side launches return ``outcomes`` by tag, recording what was asked."""

    def __init__(self, outcomes):
        self.outcomes, self.asked = outcomes, []

    def __call__(self, learner):
        def run(function, scripts, env, nproc, timeout_s, tag, flags):
            self.asked.append((function, tag, tuple(flags), nproc, sorted(scripts), env))
            learner.requests, learner.answers, learner.values = (
                x + 1 for x in (learner.requests, learner.answers, learner.values)
            )
            return self.outcomes[tag]  # as the kernel's answer, a value

        learner.run = run
        return learner


def _hang_results(profile, learner_names, reference_names=None, launches=None):
    from rocmlab.harness import Learner, Reference, lab_parameters, load_checks, run_checks

    path = LAB / "checks.py"
    parameters = lab_parameters(path, SOURCE.lab.profile(profile).parameters)
    checks = [
        c for c in load_checks(path.read_text(encoding="utf-8"), str(path), {}, parameters) if c.name in HANG_CHECKS
    ]
    assert {c.name for c in checks} == HANG_CHECKS
    reference = Reference(InProcess(reference_names)) if reference_names is not None else None
    fresh = _fresh()  # a kernel that ran none of the learner's cells
    if launches is not None:
        launches(fresh.asked)
    return checks, run_checks(checks, Learner(InProcess(learner_names)), 47, reference=reference, fresh=fresh)


def test_hang_checks_launch_each_run_once_on_world_size_ranks_without_a_reference_kernel():
    launches = _Launches(_launched(2, {1}))
    checks, results = _hang_results("smoke", {}, launches=launches)
    assert not any(c.wants_reference for c in checks) and all(c.wants_fresh for c in checks)
    assert all(r.passed for r in results), [(r.name, r.detail or r.error) for r in results if not r.passed]
    scripts = ["dist_common.py", "train_uneven.py"]  # the course's, read from lab.py on the harness side
    assert launches.asked == [
        ("uneven_run", "guarded", ("--guard",), 2, scripts, {}),
        ("uneven_run", "fixed", ("--guard", "--fix"), 2, scripts, {}),
    ]


def test_hang_checks_on_a_machine_sized_run_launch_the_reference_kernels_n_ranks():
    """On multi-gpu (WORLD_SIZE 0) a learner whose kernel reports 2 devices, with runs of 2 ranks to
    match, earns nothing where the reference kernel ran 4 ranks on the same machine: the check
    launches 4."""
    launches = _Launches(_launched(4, {3}))
    checks, results = _hang_results("multi-gpu", {}, {"N_RANKS": 4}, launches)
    assert all(c.wants_reference for c in checks)
    assert all(r.passed for r in results), [(r.name, r.detail or r.error) for r in results if not r.passed]
    assert {asked[3] for asked in launches.asked} == {4}
    claims_two = {"N_RANKS": 2, "torch": SimpleNamespace(cuda=SimpleNamespace(device_count=lambda: 2))}
    _, results = _hang_results("multi-gpu", claims_two, {"N_RANKS": 4}, _Launches(_launched(2, {1})))
    assert not any(r.points for r in results), [r.name for r in results if r.points]
    _, results = _hang_results("multi-gpu", {}, launches=_Launches(_launched(4, {3})))  # no reference: the grader's
    assert all(r.error and not r.detail for r in results), [(r.name, r.detail) for r in results]


def test_hang_checks_without_hang_tools_in_the_work_folder_launch_nothing_and_fail(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, results = _hang_results("smoke", {})
    assert not any(r.points for r in results), [r.name for r in results if r.points]
    details = {r.name: r.detail for r in results}
    assert "no hang_tools.py" in details["guarded_fails_fast"] and "no hang_tools.py" in details["fixed_runs"], details


def _forged_hang_records(folder, n):
    """The notebook's ``guarded`` and ``fixed`` runs rebound to what a right hang_tools.py gives
    (format: lab.run_torchrun's TorchrunResult), and runs04/fixed_*.json written to match."""
    outcomes = _launched(n, {r for r in range(n) if len(range(r, 7, n)) < len(range(0, 7, n))})
    records = {}
    for tag, run in outcomes.items():
        ranks = [
            SimpleNamespace(rank=r, returncode=c, output=o)
            for r, (c, o) in enumerate(zip(run["returncodes"], run["outputs"]))
        ]
        records[tag] = SimpleNamespace(
            timed_out=False,
            returncode=run["returncode"],
            ok=run["returncode"] == 0,
            ranks=ranks,
            rank=ranks.__getitem__,
        )
    runs = folder / "runs04"
    runs.mkdir(exist_ok=True)
    for rank, record in enumerate(outcomes["fixed"]["records"]):
        (runs / f"fixed_ws{n}_rank{rank}.json").write_text(json.dumps(record), encoding="utf-8")
    return records


@pytest.mark.slow
def test_the_checks_launch_the_guarded_and_fixed_runs_with_the_learners_hang_tools(tmp_path, cells, monkeypatch):
    """The student version's hang_tools.py, beside forged ``guarded``/``fixed`` records and rank
    files that a right answer would have left, earns none of the rules: the check judges the two
    runs it launches (2-rank gloo; the student's ranks fail at once, a few seconds each). That the
    solution's hang_tools.py earns every rule through the same launches is the real grader's
    (tests/labs/test_every_lab.py, tests/grading/test_grade_references.py)."""
    monkeypatch.chdir(tmp_path)
    write_module(tmp_path, cells, "04-init-sol-1")
    write_module(tmp_path, cells, "04-hang-sol-1", empty=True)
    _, results = _hang_results("smoke", _forged_hang_records(tmp_path, 2))
    assert not any(r.points for r in results), [(r.name, r.detail) for r in results if r.points]


# -- the ring runs' backend is judged by the GPUs the grader counts, never the learner's torch ------


def _ring_launches(backend):
    """What ``in_kernel.ring_run`` answers for each world size: run_ring.py's JSON per rank, with the
    plan the ranks joined with and the hello sum."""

    def ring_run(function, scripts, n, seed, sizes, timeout_s):
        assert function == "ring_run" and sorted(scripts) == ["dist_common.py", "run_ring.py"]
        records = [
            {"plan": {"rank": r, "world_size": n, "backend": backend}, "hello_sum": n * (n + 1) / 2, "results": []}
            for r in range(n)
        ]
        return {"timed_out": False, "returncode": 0, "returncodes": [0] * n, "outputs": [""] * n, "records": records}

    return ring_run


def _joined(learner_names, backend):
    from rocmlab.harness import Learner, lab_parameters, load_checks, run_checks

    path = LAB / "checks.py"
    parameters = lab_parameters(path, SOURCE.lab.profile("smoke").parameters)
    checks = load_checks(path.read_text(encoding="utf-8"), str(path), {}, parameters)
    (check,) = [c for c in checks if c.name == "ring_runs_joined_as_planned"]
    assert not check.wants_reference and check.wants_fresh
    fresh = _fresh()
    launch = _ring_launches(backend)
    fresh.asked.run = lambda function, *args: fresh.asked.recall(launch(function, *args))
    (result,) = run_checks([check], Learner(InProcess(learner_names)), 47, fresh=fresh)
    return result


def _with_gpus(count):
    """A learner's kernel whose ``torch`` (as ``__import__`` gives it) claims ``count`` GPUs and HIP."""
    import builtins

    fake = SimpleNamespace(cuda=SimpleNamespace(device_count=lambda: count), version=SimpleNamespace(hip="7.0.0"))
    real = builtins.__import__

    def forged_import(name, *args, **kwargs):
        return fake if name == "torch" else real(name, *args, **kwargs)

    return {"__builtins__": {**vars(builtins), "__import__": forged_import}}


def test_ring_runs_on_this_machine_join_with_its_backend():
    result = _joined({}, "nccl" if torch.cuda.device_count() >= 3 else "gloo")
    assert result.passed, result.detail or result.error


def test_a_learners_torch_that_claims_gpus_earns_nothing_for_nccl_ranks():
    """Ranks that report nccl, in a kernel whose torch claims 8 GPUs: the grader counts this
    machine's GPUs itself (none here, or fewer than the ranks need) and wants gloo."""
    if torch.cuda.device_count() >= 3:
        pytest.skip("this machine gives every rank a GPU: nccl is the right backend here")
    result = _joined(_with_gpus(8), "nccl")
    assert not result.points, result.detail


# -- the desync run is launched by the check, under the learner's debug_env("desync") (issue 47) ----

DESYNC_CHECKS = {"desync_reports", "desync_used_the_kit"}


def _desync_results(learner_names):
    from rocmlab.harness import Learner, lab_parameters, load_checks, run_checks

    path = LAB / "checks.py"
    parameters = lab_parameters(path, SOURCE.lab.profile("smoke").parameters)
    checks = [
        c for c in load_checks(path.read_text(encoding="utf-8"), str(path), {}, parameters) if c.name in DESYNC_CHECKS
    ]
    assert {c.name for c in checks} == DESYNC_CHECKS
    fresh = _fresh()  # the launch runs here, in this test's folder
    return {r.name: r for r in run_checks(checks, Learner(InProcess(learner_names)), 47, fresh=fresh)}


@pytest.mark.slow
def test_the_checks_launch_the_uneven_run_under_the_learners_desync_row(tmp_path, cells, monkeypatch):
    """Cost: one 2-rank gloo launch of the course's uneven script (about 10 s). The solution's
    debug_env makes it fail at once with gloo's mismatch report: both rules hold; a debug_env
    whose desync row lacks DETAIL earns neither, whatever the notebook's own run recorded."""
    monkeypatch.chdir(tmp_path)
    write_module(tmp_path, cells, "04-init-sol-1")  # the learner's init_plan.py, in its work folder
    kit = run_cells(cells["04-stretch-debug-sol-1"])
    results = _desync_results({"debug_env": kit["debug_env"]})
    assert all(r.passed for r in results.values()), {n: r.detail or r.error for n, r in results.items() if not r.passed}

    def no_detail(symptom, **kwargs):
        return {"TORCH_NCCL_DESYNC_DEBUG": "1"} if symptom == "desync" else kit["debug_env"](symptom, **kwargs)

    results = _desync_results({"debug_env": no_detail})
    assert not any(r.points for r in results.values()), {n: r.detail for n, r in results.items() if r.points}


# -- the ring runs are launched by the check in a fresh kernel: forged runs04/ files and a patched
#    launcher in the learner's last cell earn nothing (issue 47) --------------------------------------

RING_CHECKS = {"ring_runs_complete", "ring_runs_joined_as_planned", "ring_sums", "ring_steps", "ring_traffic"}


def _forged_ring_records(n, sizes, seed):
    """runs04/ring_ws{n}_rank{r}.json exactly as run_ring.py writes them for a right ring.py on gloo:
    the sums, 2(n-1) steps and the elements the solution's chunks send."""
    dist_common = run_cells(
        SOURCE.cell_starting("%%writefile dist_common.py")
        .split("\n", 1)[1]
        .replace("from init_plan import init_plan", "")
    )
    records = []
    for rank in range(n):
        results = []
        for size in sizes:
            total = sum(dist_common["rank_input"](r, size, seed) for r in range(n)).tolist()
            chunks = [len(c) for c in torch.tensor_split(torch.arange(size), n)]
            sent = sum(chunks[(rank - s) % n] for s in range(n - 1)) + sum(
                chunks[(rank + 1 - s) % n] for s in range(n - 1)
            )
            results.append({"size": size, "ring": total, "reference": total, "sent_elements": sent,
                            "received_elements": sent, "steps": 2 * (n - 1)})  # fmt: skip
        plan = {"rank": rank, "world_size": n, "local_rank": rank, "backend": "gloo", "label": "gloo", "device": "cpu"}
        records.append({"plan": plan, "hello_sum": n * (n + 1) / 2, "results": results})
    return records


PATCH_THE_LAUNCHER = """
import rocmlab.lab.launch
from types import SimpleNamespace
_ok = lambda n: SimpleNamespace(ok=True, timed_out=False, returncode=0,
                                ranks=[SimpleNamespace(rank=r, returncode=0, output="") for r in range(n)])
rocmlab.lab.launch.run_torchrun = lambda *a, nproc=2, **k: _ok(nproc)
ring_runs = {n: _ok(n) for n in (2, 3)}
"""


@pytest.mark.slow
def test_forged_ring_files_and_a_patched_launcher_earn_no_ring_rule(tmp_path, cells):
    """Cost: two kernels and the two ring launches of the student's ring.py (2 and 3 gloo ranks that
    fail at import of their answer: about 15-25 s on 2 busy cores). The forged files are what a right
    ring.py writes (the rules pass on them, judged in process); graded by a real worker, the check
    launches the course's run_ring.py in a fresh kernel with the learner's ring.py, and no rule holds."""
    from rocmlab.execution.worker import Spec, Worker
    from rocmlab.harness import Learner, harness_options, lab_parameters, load_checks, run_checks

    path = LAB / "checks.py"
    smoke = SOURCE.lab.profile("smoke").parameters
    parameters = lab_parameters(path, smoke)
    forged = {n: _forged_ring_records(n, parameters["RING_SIZES"], parameters["SEED"]) for n in (2, 3)}
    work = tmp_path / "work"
    (work / "runs04").mkdir(parents=True)
    for n, records in forged.items():
        for rank, record in enumerate(records):
            (work / "runs04" / f"ring_ws{n}_rank{rank}.json").write_text(json.dumps(record), encoding="utf-8")
    write_module(work, cells, "04-init-sol-1")
    write_module(work, cells, "04-ring-sol-1", empty=True)

    checks = [
        c for c in load_checks(path.read_text(encoding="utf-8"), str(path), {}, parameters) if c.name in RING_CHECKS
    ]
    fresh = _fresh()
    answer = {n: {"timed_out": False, "returncode": 0, "returncodes": [0] * n, "records": r} for n, r in forged.items()}
    fresh.asked.run = lambda function, scripts, n, *rest: fresh.asked.recall(answer[n])
    assert all(r.passed for r in run_checks(checks, Learner(InProcess({})), 47, fresh=fresh))  # the forgery is right

    notebook = tmp_path / "forger.ipynb"
    nbformat = pytest.importorskip("nbformat")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PATCH_THE_LAUNCHER)]), str(notebook))
    spec = Spec(
        input=str(notebook),
        output=str(tmp_path / "out" / notebook.name),
        cwd=str(work),
        parameters={},
        cell_timeout_s=60,
        timeout_s=300,
        allow_errors=True,
        engine_options={"harness": harness_options(path, 47, tmp_path / "checks.json", 60, smoke)},
    )
    with Worker() as worker:
        outcome = worker.run(spec)
    assert outcome.harness and "checks" in outcome.harness, outcome.reason
    ring = {c["name"]: c for c in outcome.harness["checks"] if c["name"] in RING_CHECKS}
    assert set(ring) == RING_CHECKS and not any(c["points"] for c in ring.values()), ring
    assert all(c["detail"] and not c["error"] for c in ring.values()), ring  # the learner's, not the grader's
    assert "exit codes" in ring["ring_runs_complete"]["detail"], ring  # launched: the student's ring.py fails
    assert outcome.harness["fresh_start_s"] > 0
