"""A lab's kernel-side helpers (``solutions/<lab>/in_kernel.py``, run by ``Learner.run``): their
free names are the notebook's, they run over a copy of the learner's names, compile once per
kernel, and travel with the checks; and no check sends the kernel code as a string."""

import ast
import builtins
import json
import symtable
from pathlib import Path

import pytest
from in_process import InProcess

from rocmlab.harness import (
    GradingError,
    KernelModule,
    Learner,
    LearnerRaised,
    Reference,
    harness_options,
    kernel_module,
    load_checks,
    run_checks,
)
from rocmlab.lab import answers

ROOT = Path(__file__).resolve().parents[2]
KERNEL_MODULES = sorted(ROOT.glob("solutions/*/in_kernel.py"))
CHECKS_FILES = sorted(
    [*ROOT.glob("solutions/*/checks.py"), *ROOT.glob("tests/fixtures/**/solutions/*/checks.py")],
)


# ---------------------------------------------------------------- free names are the notebook's


def free_names(source: str, filename: str) -> set[str]:
    """The names ``source`` reads that it never binds at its top level: the global names its
    functions and its top level use, less what it assigns, defines or imports."""
    top = symtable.symtable(source, filename, "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    used, tables = set(), [top]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        for symbol in table.get_symbols():
            is_global = table is top or symbol.is_global()
            if is_global and symbol.is_referenced() and not symbol.is_declared_global():
                used.add(symbol.get_name())
    return used - bound


def notebook_names(lab_py: Path) -> set[str]:
    """The top-level names the lab's notebook (its ``lab.py``) binds."""
    top = symtable.symtable(lab_py.read_text(encoding="utf-8"), str(lab_py), "exec")
    return {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}


def unknown_names(module: Path) -> set[str]:
    free = free_names(module.read_text(encoding="utf-8"), str(module))
    return free - notebook_names(module.with_name("lab.py")) - set(dir(builtins))


@pytest.mark.parametrize("module", KERNEL_MODULES, ids=lambda p: p.parent.name)
def test_every_free_name_of_a_kernel_module_is_the_notebook_s_or_a_builtin(module):
    """ruff ignores F821 in ``in_kernel.py`` (the notebook's names are free there); this is the check
    that takes its place: a typo still fails."""
    assert unknown_names(module) == set(), f"{module}: names neither the notebook nor the module defines"


def test_a_typo_in_a_kernel_module_is_an_unknown_name(tmp_path):
    (tmp_path / "lab.py").write_text("import torch\n\ndef rank_loss(x):\n    return x\n\nWORLD = 2\n")
    module = tmp_path / "in_kernel.py"
    module.write_text(
        "import math\n\ndef good(x):\n    return rank_loss(x) * WORLD + math.pi + len([x])\n\n"
        "def bad(x):\n    local = 1\n    return rank_los(x) + local + [y for y in range(3)][0]\n"
    )
    assert unknown_names(module) == {"rank_los"}


def test_lint_allows_free_names_only_in_kernel_modules():
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"**/solutions/*/in_kernel.py" = ["F821"]' in config


# ---------------------------------------------------------------- run: over the learner's names


MODULE = KernelModule(
    "import math\n\n\ndef scaled_norm(xs, scale=1):\n    return math.sqrt(sum(x * x for x in double_all(xs))) * scale\n\n\n"
    "def _private():\n    return 0\n",
    "in_kernel.py",
)


def test_run_calls_the_module_s_function_over_the_learner_s_names():
    learner = Learner(InProcess({"double_all": lambda xs: [2 * x for x in xs]}), MODULE)
    assert learner.run("scaled_norm", [3, 4], scale=10) == 100.0
    wrong = Learner(InProcess({"double_all": lambda xs: xs}), MODULE)
    assert wrong.run("scaled_norm", [3, 4]) == 5.0  # the learner's function decides, not the module
    with pytest.raises(LearnerRaised, match="NameError"):
        Learner(InProcess({}), MODULE).run("scaled_norm", [1])  # the learner defined no double_all
    raised = Learner(InProcess({"double_all": lambda xs: 1 / 0}), MODULE).run_raised("scaled_norm", [1])
    assert raised is not None and raised.is_a("ZeroDivisionError")
    assert Learner(InProcess({"double_all": list}), MODULE).run_raised("scaled_norm", [1]) is None


def test_run_names_only_the_module_s_public_functions():
    learner = Learner(InProcess({"double_all": list, "print": print}), MODULE)
    for name in ("_private", "print", "double_all", "math", "scaled_norm(1)"):
        with pytest.raises(GradingError, match="defines no public function"):
            learner.run(name)
    assert learner.requests == 0  # refused before anything reached the kernel
    with pytest.raises(GradingError, match="no in_kernel.py came with the checks"):
        Learner(InProcess({})).run("scaled_norm", [1])


def test_the_module_does_not_change_the_learner_s_names():
    names = {"double_all": lambda xs: xs, "math": "the learner's own"}
    Learner(InProcess(names), MODULE).run("scaled_norm", [1])
    assert names["math"] == "the learner's own" and set(names) == {"double_all", "math"}


def test_a_kernel_compiles_the_module_once(monkeypatch):
    compiled = []
    real = compile
    monkeypatch.setattr(answers, "_COMPILED", {})
    monkeypatch.setattr(answers, "compile", lambda *a: compiled.append(a[1]) or real(*a), raising=False)
    learner = Learner(InProcess({"double_all": list}), MODULE)
    for xs in ([1], [2], [3, 4]):
        learner.run("scaled_norm", xs)
    other = KernelModule(MODULE.source + "\n\ndef one():\n    return 1\n", "in_kernel.py")
    assert Learner(InProcess({}), other).run("one") == 1
    assert compiled == ["in_kernel.py", "in_kernel.py"]  # once per text, not per request


def test_the_reference_runs_the_same_module_and_its_failures_are_grading_errors():
    reference = Reference(InProcess({"double_all": lambda xs: [2 * x for x in xs]}), kernel=MODULE)
    assert reference.run("scaled_norm", [3, 4]) == 10.0
    with pytest.raises(GradingError, match="the reference kernel raised NameError on 'scaled_norm'"):
        Reference(InProcess({}), kernel=MODULE).run("scaled_norm", [1])


CHECKS = """
from rocmlab.harness import check

@check("t-1", points=1, en="doubles", zh="加倍")
def doubles(learner, variant, reference):
    xs = [variant.random.randint(1, 9) for _ in range(3)]
    assert learner.run("scaled_norm", xs) == reference.run("scaled_norm", xs)
"""


def test_checks_take_the_module_beside_them_and_give_it_to_both_kernels(tmp_path):
    (tmp_path / "checks.py").write_text(CHECKS)
    (tmp_path / "in_kernel.py").write_text(MODULE.source)
    checks = load_checks(CHECKS, str(tmp_path / "checks.py"))
    assert (
        checks[0].kernel
        == kernel_module(tmp_path / "checks.py")
        == KernelModule(MODULE.source, str(tmp_path / "in_kernel.py"))
    )
    solution = {"double_all": lambda xs: [2 * x for x in xs]}
    reference = Reference(InProcess(solution))
    assert run_checks(checks, Learner(InProcess(dict(solution))), 3, reference=reference)[0].passed
    (wrong,) = run_checks(checks, Learner(InProcess({"double_all": list})), 3, reference=reference)
    assert wrong.detail.startswith("wrong") and not wrong.error
    (alone,) = run_checks(
        load_checks(CHECKS, "elsewhere/checks.py"), Learner(InProcess(solution)), 3, reference=reference
    )
    assert "no in_kernel.py came with the checks" in alone.error and not alone.detail  # the grader's fault


def test_the_module_travels_with_the_harness_options(tmp_path):
    (tmp_path / "checks.py").write_text(CHECKS)
    assert harness_options(tmp_path / "checks.py", 1, tmp_path / "out.json", 30)["kernel"] is None
    (tmp_path / "in_kernel.py").write_text(MODULE.source)
    options = harness_options(tmp_path / "checks.py", 1, tmp_path / "out.json", 30)
    assert options["kernel"] == {"source": MODULE.source, "filename": str(tmp_path / "in_kernel.py")}
    json.dumps(options)  # the worker gets it as JSON


def test_a_kernel_module_that_is_not_python_is_named():
    with pytest.raises(ValueError, match="broken/in_kernel.py: not Python"):
        KernelModule("def (:\n", "broken/in_kernel.py")


# ---------------------------------------------------------------- no kernel code in a string


def kernel_code_strings(checks_file: Path) -> list[str]:
    """Where ``checks_file`` sends the kernel code rather than one expression: a ``setup=``, or a
    first argument of ``eval``/``raised`` that is not a single expression (or calls exec/eval/compile)."""
    tree = ast.parse(checks_file.read_text(encoding="utf-8"), str(checks_file))
    strings = {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in ("eval", "raised"):
            continue
        where = f"{checks_file.name}:{node.lineno}"
        if any(k.arg == "setup" for k in node.keywords) or len(node.args) > 1:
            found.append(f"{where}: setup code")
        if node.args and not _one_expression(node.args[0], strings):
            found.append(f"{where}: not one expression")
    return sorted(found, key=lambda f: int(f.split(":")[1]))


def _one_expression(node, strings: dict) -> bool:
    if isinstance(node, ast.Name):
        if node.id not in strings:
            return True  # not a string of this file (a variable of the check's)
        text = strings[node.id]
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) else "_" for v in node.values)
    else:
        return True
    try:
        expression = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return False
    calls = {n.func.id for n in ast.walk(expression) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return not calls & {"exec", "eval", "compile"}


def test_the_scan_finds_setup_code_and_statements(tmp_path):
    checks = tmp_path / "checks.py"
    checks.write_text(
        'SETUP = """\nx = 1\ny = 2\n"""\nONE = "f(x)"\n'
        "def a(learner):\n    learner.eval('x', setup=SETUP)\n    learner.eval(SETUP)\n    learner.eval(ONE)\n"
        "    learner.raised('exec(\"x = 1\")')\n    learner.eval(f'f({1})')\n    learner.run('helper', x=1)\n"
    )
    assert kernel_code_strings(checks) == [
        "checks.py:7: setup code",
        "checks.py:8: not one expression",
        "checks.py:10: not one expression",
    ]


@pytest.mark.parametrize("checks_file", [pytest.param(path, id=path.parent.name) for path in CHECKS_FILES])
def test_no_check_sends_kernel_code_as_a_string(checks_file):
    assert kernel_code_strings(checks_file) == [], "move it into the lab's in_kernel.py and call learner.run"


def test_a_real_kernel_runs_the_module_sent_with_the_request_and_compiles_it_once():
    from jupyter_client.manager import start_new_kernel

    from rocmlab.harness import KernelChannel

    km, kc = start_new_kernel()
    try:
        kc.execute_interactive("def double_all(xs):\n    return [2 * x for x in xs]\n", timeout=60)
        learner = Learner(KernelChannel(kc, km, timeout_s=30), MODULE)
        assert [learner.run("scaled_norm", [3, 4], scale=s) for s in (1, 2)] == [10.0, 20.0]
        assert learner.eval("len(__import__('rocmlab.lab.answers', fromlist=['_']).__dict__['_COMPILED'])") == 1
        assert learner.raised("scaled_norm") is not None  # nothing of the module is left among the learner's names
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run_names(checks_file: Path) -> set[str]:
    """The kernel-side functions ``checks_file`` runs by a literal name (``.run("x", ...)``, ``fresh.launch("x", ...)``)."""
    tree = ast.parse(checks_file.read_text(encoding="utf-8"))
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("run", "run_raised", "launch")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


@pytest.mark.parametrize("checks_file", CHECKS_FILES, ids=lambda p: p.parent.name)
def test_every_function_a_check_runs_is_in_its_lab_s_kernel_module(checks_file):
    """A misspelt name would be a grading error for every learner; found here, before a class is graded.
    And every public function of the module is run by some check (none is left over)."""
    wanted = run_names(checks_file)
    module = kernel_module(checks_file)
    assert wanted <= (module.functions if module else set()), f"{checks_file}: {sorted(wanted)}"
    if module:
        assert module.functions <= wanted, f"{module.filename}: no check runs {sorted(module.functions - wanted)}"
