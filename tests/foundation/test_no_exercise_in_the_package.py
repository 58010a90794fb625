"""The rocmlab package is importable in the learner's kernel (lab 01 runs `python -m rocmlab.doctor`
there; the harness's kernel side imports it), so no module of it may hold a function or class that
a lab's exercise asks the learner to write: a learner would import it and rebuild the answer.

The exercises' names are those defined in each lab's solution cells (solutions/<lab>/lab.py, cells
tagged "solution"); the package's are every module's top-level bindings (definitions, assignments,
imports), read without importing it. Methods are left out: ``Slice.bandwidth()`` is not lab 04's
``bandwidth(op, size_bytes, seconds, world_size)``."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest
from labsource import LabSource, as_code

import rocmlab
from rocmlab import probes

PACKAGE = Path(rocmlab.__file__).parent
LAB_IDS = sorted(p.parent.name for p in (Path(__file__).resolve().parents[2] / "solutions").glob("*/lab.py"))


@functools.cache
def exercise_names(lab_id: str) -> frozenset[str]:
    names = set()
    for cell in LabSource(lab_id).tagged("solution"):
        tree = ast.parse(as_code(cell.source))  # a cell's IPython magics as comments
        names |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return names


def top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


@functools.cache  # the package's sources do not change during a run; every lab's test reads them
def package_bindings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in top_level_names(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            found.setdefault(name, []).append(str(path.relative_to(PACKAGE.parent)))
    return found


def test_every_lab_has_exercises_to_compare():
    assert len(LAB_IDS) == 10 and all(exercise_names(lab) for lab in LAB_IDS)
    assert "parse_rocminfo" in exercise_names("01-rocm-setup")


@pytest.mark.parametrize("lab_id", LAB_IDS)
def test_no_module_of_the_package_binds_an_exercise_name(lab_id):
    bound = package_bindings()
    clashes = {name: bound[name] for name in sorted(exercise_names(lab_id)) if name in bound}
    assert not clashes, f"{lab_id}: the importable package binds exercise names: {clashes}"


def test_lab_01s_rocminfo_parser_is_not_importable():
    for module in ("rocmlab.probes", "rocmlab.doctor", "rocmlab.doctor.facts", "rocmlab.doctor.checks_gpu"):
        assert not hasattr(importlib.import_module(module), "parse_rocminfo"), module


def test_the_scan_sees_every_kind_of_binding():
    tree = ast.parse(
        "import a.b\nfrom c import d as triage\ndef parse_rocminfo(t): pass\nclass BM25: pass\n"
        "roofline = None\nx, (perplexity, y) = 1, (2, 3)\nclass K:\n    def bandwidth(self): pass\n"
    )
    assert top_level_names(tree) == {"a", "triage", "parse_rocminfo", "BM25", "roofline", "x", "perplexity", "y", "K"}


# ---- contracts, not only names: lab 01's exercises against the doctor's functions --------------

DOCTOR_MODULES = ("rocmlab.probes", "rocmlab.doctor", "rocmlab.doctor.facts", "rocmlab.doctor.checks_gpu")
DOCTOR_MODULES += ("rocmlab.doctor.checks_env", "rocmlab.doctor.checks_case")


def _torch(hip=None, cuda=None):
    return SimpleNamespace(version=SimpleNamespace(hip=hip, cuda=cuda))


UUIDS = [f"GPU-{0x4B2C1A9F8D3E6F00 + i:016X}" for i in range(8)]
# Lab 01's visible tests (solutions/01-rocm-setup/lab.py): inputs and the answers the contract gives.
CONTRACTS = {
    "backend_of": [
        ((_torch("6.4.43484"),), "rocm"),
        ((_torch(None, "12.8"),), "cuda"),
        ((_torch(),), "cpu"),
        ((_torch("", None),), "cpu"),
    ],
    "wheel_supports": [
        (("gfx942:sramecc+:xnack-", ["gfx90a", "gfx942"]), True),
        (("gfx1201", ["gfx90a", "gfx1100"]), False),
        (("gfx1100", ["gfx110"]), False),
        (("gfx90a:xnack-", ["gfx90a:xnack+"]), False),
        (("gfx90a:sramecc+:xnack-", ["gfx90a"]), True),
        (("gfx90a", ["gfx90a:xnack-"]), True),
    ],
    "visible_gpus": [
        ((UUIDS, {}), list(range(8))),
        ((UUIDS, {"HIP_VISIBLE_DEVICES": "2,3"}), [2, 3]),
        ((UUIDS, {"ROCR_VISIBLE_DEVICES": f"{UUIDS[5]},0"}), [5, 0]),
        ((UUIDS, {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "1,0"}), [5, 4]),
        ((UUIDS, {"HIP_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": "3,3,1"}), [3, 1]),
    ],
}


def _adapters(exercise, f):
    """The one-line wrappers a learner would write around ``f``: the call itself, a lift over the
    list argument, a count for the UUIDs, a dict of the module's version attributes."""
    yield lambda *a: f(*a)
    if exercise == "wheel_supports":
        yield lambda d, arch_list: any(f(d, e) for e in arch_list)
        yield lambda d, arch_list: any(f(d, [e]) for e in arch_list)
        gpu = lambda d: {"gfx": probes.base_target(d), "features": probes.target_features(d)}  # noqa: E731
        yield lambda d, arch_list: f(gpu(d), arch_list)[0] == "yes"  # the doctor's GPU shape
    if exercise == "visible_gpus":
        yield lambda uuids, env: f(len(uuids), env)
        yield lambda uuids, env: f(len(uuids), env)[0]
    if exercise == "backend_of":
        version = lambda m, k: getattr(getattr(m, "version", None), k, None)  # noqa: E731
        yield lambda m: f({"importable": True, "hip": version(m, "hip"), "cuda": version(m, "cuda")})


def _answers_the_contract(adapter, cases) -> bool:
    try:
        return all(adapter(*args) == want for args, want in cases)
    except Exception:  # noqa: BLE001 (a function that cannot take the inputs does not answer them)
        return False


def _doctor_functions():
    for name in DOCTOR_MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isfunction(value) and value.__module__.startswith("rocmlab"):
                yield f"{value.__module__}.{attr}", value


def test_the_contracts_catch_the_functions_issue_47_removed():
    """The check below means something: the three functions the doctor had, each wrapped in one
    line, answered lab 01's visible tests."""

    def target_compatible(device, built):
        def split(t):
            base, *feats = t.split(":")
            return base, {x[:-1]: x[-1] for x in feats if x and x[-1] in "+-"}

        (b1, have), (b2, need) = split(device), split(built)
        return b1 == b2 and all(have.get(k, v) == v for k, v in need.items())

    def backend_of_info(info):
        return (
            "none"
            if not info.get("importable")
            else "rocm"
            if info.get("hip")
            else "cuda"
            if info.get("cuda")
            else "cpu"
        )

    for exercise, f in (("wheel_supports", target_compatible), ("backend_of", backend_of_info)):
        assert any(_answers_the_contract(a, CONTRACTS[exercise]) for a in _adapters(exercise, f)), exercise


def test_no_doctor_function_answers_a_lab_01_exercise_through_a_one_line_wrapper():
    """Issue 47: the doctor's functions are importable in the learner's kernel, so none may answer
    lab 01's exercises once wrapped in a line. Where the doctor needs the same knowledge it takes
    the runtime's own answer (the GPUs torch got) or a different contract (``loads_on``: a feature
    the topology leaves open is "per process", a feature the target lacks refuses code naming it)."""
    answering = [
        (exercise, name)
        for name, f in _doctor_functions()
        for exercise, cases in CONTRACTS.items()
        if any(_answers_the_contract(adapter, cases) for adapter in _adapters(exercise, f))
    ]
    assert not answering, f"doctor functions that answer lab 01's exercises: {answering}"
