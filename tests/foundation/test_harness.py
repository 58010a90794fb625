"""The trusted harness (rocmlab.harness) and its wire format (rocmlab.lab.answers): what travels,
what cannot pass for a right answer, variants per seed, and a real kernel that lies, raises,
hangs and recovers."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rocmlab.harness import (
    ERRORS_ALONE,
    AnswerTimeExhausted,
    KernelChannel,
    Learner,
    LearnerRaised,
    NoAnswer,
    Variant,
    load_checks,
    run_checks,
)
from rocmlab.lab.answers import Opaque, Raised, decode, encode, evaluate


def roundtrip(value):
    return decode(encode(value))


def test_plain_data_travels_with_its_types():
    value = {"a": (1, 2.5, None), "b": [True, "x"], 3: {1, 2}, "big": 2**70, "nan": math.nan, "raw": b"\x00\xff"}
    got = roundtrip(value)
    assert got["a"] == (1, 2.5, None) and type(got["a"]) is tuple and got[3] == {1, 2}
    assert got["big"] == 2**70 and math.isnan(got["nan"]) and got["raw"] == b"\x00\xff"


def test_arrays_and_tensors_keep_dtype_shape_and_layout():
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    assert roundtrip(array).dtype == np.int16 and (roundtrip(array) == array).all()
    assert roundtrip(np.float32(1.5)) == np.float32(1.5)
    tensor = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t()
    got = roundtrip(tensor)
    assert got.dtype == torch.bfloat16 and got.shape == (3, 2) and torch.equal(got, tensor)
    assert got.rocmlab_layout == {"stride": [1, 3], "contiguous": False, "device": "cpu"}
    fp8 = torch.tensor([448.0, -2.0]).to(torch.float8_e4m3fn)
    assert roundtrip(fp8).dtype == torch.float8_e4m3fn and torch.equal(roundtrip(fp8).float(), fp8.float())
    assert roundtrip(torch.float16) is torch.float16 and roundtrip(torch.Size([2, 3])) == (2, 3)


def test_an_object_that_claims_to_equal_anything_arrives_as_its_value_or_its_name():
    class AnyFloat(float):
        __eq__ = lambda self, other: True  # noqa: E731
        __hash__ = float.__hash__

    class Pretender:
        __class__ = property(lambda self: float)  # isinstance(x, float) says yes
        __eq__ = lambda self, other: True  # noqa: E731

    class AnyArray(np.ndarray):
        __eq__ = lambda self, other: True  # noqa: E731

    assert type(roundtrip(AnyFloat(0.5))) is float and roundtrip(AnyFloat(0.5)) != 1.0
    for spoof in (Pretender(), np.zeros(2).view(AnyArray), object()):
        got = roundtrip(spoof)
        assert isinstance(got, Opaque) and got != 0.0 and got != got.type


def test_npy_payloads_never_unpickle():
    import base64
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    forged = {"$rocmlab": "ndarray", "npy": base64.b64encode(buffer.getvalue()).decode()}
    with pytest.raises(ValueError, match="dtype"):  # refused by the dtype table before numpy reads it
        decode(forged)
    assert isinstance(roundtrip(np.array([{"x": 1}], dtype=object)), Opaque)


def npy(header: dict, payload: bytes = b"") -> str:
    """A ``.npy`` buffer with this header (descr, fortran_order, shape) and payload, base64."""
    import base64
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return base64.b64encode(buffer.getvalue() + payload).decode()


@pytest.mark.parametrize(
    "descr, shape, payload",
    [
        ("|V0", (2**40,), b""),  # 2^40 zero-byte elements: nothing to read, and a huge count
        ([("a", "<f4")], (1,), b"\0" * 4),  # a record
        ("<f8", (2**40,), b""),  # a header that claims more than the bytes hold
        ("<f8", (2,), b"\0" * 24),  # bytes beyond the elements
        ("<M8[s]", (1,), b"\0" * 8),  # a datetime: not plain data of a lab
    ],
)
def test_arrays_carry_plain_dtypes_whose_bytes_cover_their_elements(descr, shape, payload):
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    for tag in ("ndarray", "scalar"):
        with pytest.raises(ValueError):
            decode({"$rocmlab": tag, "npy": npy(header, payload)})
    with pytest.raises(ValueError):
        decode({"$rocmlab": "tensor", "dtype": "float64", "npy": npy(header, payload)})
    assert decode(
        {"$rocmlab": "ndarray", "npy": npy({"descr": "<f8", "fortran_order": False, "shape": (2,)}, b"\0" * 16)}
    ).shape == (2,)


def test_an_array_past_the_size_cap_is_refused(monkeypatch):
    import rocmlab.lab.answers as answers

    monkeypatch.setattr(answers, "MAX_ARRAY_BYTES", 1024)
    assert decode(encode(np.zeros(128))).shape == (128,)
    with pytest.raises(ValueError):
        decode(encode(np.zeros(129)))


def test_dtype_names_come_from_a_table_never_from_torchs_attributes(monkeypatch):
    monkeypatch.setattr(torch, "planted", torch.float32, raising=False)  # a dtype, under a name not in the table
    lazily_loaded = []  # torch loads submodules (torch._dynamo: 1.7 s) in its module __getattr__
    monkeypatch.setattr(torch, "__getattr__", lambda name: lazily_loaded.append(name), raising=False)
    tensor = encode(torch.ones(2))
    for name in ("_dynamo", "planted", "load", "Tensor", "float32.__class__", "nn", 7, None):
        with pytest.raises(ValueError, match="dtype"):
            decode({"$rocmlab": "torch.dtype", "v": name})
        with pytest.raises(ValueError, match="dtype"):
            decode({**tensor, "dtype": name})
    assert lazily_loaded == []
    assert decode({"$rocmlab": "torch.dtype", "v": "bfloat16"}) is torch.bfloat16


def nested(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_is_bounded():
    assert roundtrip(nested(100)) is not None  # cut off with an opaque marker
    with pytest.raises(ValueError, match="too deep"):
        decode(nested(40))


def test_evaluate_binds_values_over_a_copy_of_the_learners_names():
    names = {"double": lambda x: 2 * x, "kept": 1}
    assert decode(evaluate({"expr": "double(v) + kept", "values": {"v": encode(4)}}, names)) == 9
    assert decode(evaluate({"expr": "kept", "setup": "kept = 5"}, names)) == 1  # no code but one expression
    raised = decode(evaluate({"expr": "double(None)"}, names))
    assert isinstance(raised, Raised) and raised.is_a("TypeError") and raised.is_a("Exception")


def test_variants_differ_per_seed_and_check_and_repeat_on_a_regrade():
    assert Variant(1, "a").random.random() == Variant(1, "a").random.random()
    assert Variant(1, "a").random.random() != Variant(2, "a").random.random()
    assert Variant(1, "a").numpy().normal() != Variant(1, "b").numpy().normal()
    assert torch.equal(
        torch.rand(3, generator=Variant(7, "c").torch()), torch.rand(3, generator=Variant(7, "c").torch())
    )


class InProcess:
    """A channel answered by ``evaluate`` over ``names``, in this process (no kernel)."""

    def __init__(self, names, lie=None):
        self.names, self.lie = names, lie

    def ask(self, request):
        return self.lie if self.lie is not None else evaluate(request, self.names)


CHECKS = """
from rocmlab.harness import check

@check("t-1", points=1, en="doubles", zh="加倍")
def doubles(learner, variant):
    x = variant.random.randint(1, 100)
    got = learner.call("double", x)
    assert type(got) is int and got == 2 * x

@check("t-1", points=2, en="rejects None", zh="拒绝 None")
def rejects(learner, variant):
    raised = learner.raised("double(None)")
    assert raised is not None and raised.is_a("TypeError")
"""


def test_a_stub_that_always_raises_earns_no_error_rule():
    checks = load_checks(CHECKS.replace('"TypeError"', '"ValueError"'), "checks.py")
    stub = run_checks(checks, Learner(InProcess({"double": lambda x: (_ for _ in ()).throw(ValueError())})), seed=3)
    assert [(r.points, r.detail) for r in stub] == [(0.0, "your code raised ValueError"), (0.0, ERRORS_ALONE)]
    strict = {"double": lambda x: 2 * x if isinstance(x, int) else (_ for _ in ()).throw(ValueError())}
    assert [r.points for r in run_checks(checks, Learner(InProcess(strict)), seed=3)] == [1.0, 2.0]


def test_each_rule_scores_on_its_own_and_says_why_it_failed():
    checks = load_checks(CHECKS, "checks.py")
    right = run_checks(checks, Learner(InProcess({"double": lambda x: 2 * x})), seed=3)
    assert [(r.name, r.points, r.passed) for r in right] == [("doubles", 1.0, True), ("rejects", 2.0, True)]
    lenient = run_checks(checks, Learner(InProcess({"double": lambda x: 2 * (x or 0)})), seed=3)
    assert [(r.points, r.detail) for r in lenient] == [(1.0, ""), (0.0, "wrong answer")]
    raising = run_checks(checks, Learner(InProcess({"double": lambda x: 1 / 0})), seed=3)
    assert raising[0].detail == "your code raised ZeroDivisionError"
    liar = run_checks(checks, Learner(InProcess({}, lie={"$rocmlab": "object", "type": "x"})), seed=3)
    assert [r.passed for r in liar] == [False, False]


@pytest.fixture(scope="module")
def kernel():
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel()
    kc.execute_interactive(
        "def double(x):\n    return 2 * x\ndef slow():\n    import time\n    time.sleep(60)\n", timeout=60
    )
    yield km, kc
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def test_a_real_kernel_answers_raises_hangs_and_recovers(kernel):
    km, kc = kernel
    learner = Learner(KernelChannel(kc, km, timeout_s=3))
    assert learner.call("double", 21) == 42 and learner.get("double.__name__") == "double"
    assert learner.eval("None") is None and learner.raised("print()") is None  # None is an answer
    with pytest.raises(LearnerRaised):
        learner.eval("double()")
    with pytest.raises(NoAnswer, match="no answer within 3 s"):
        learner.call("slow")
    assert learner.call("double", 2) == 4  # interrupted, then served again


def test_a_forged_answer_is_only_an_answer(kernel):
    km, kc = kernel
    kc.execute_interactive(
        "import rocmlab.lab.answers as _a\nfrom IPython.display import display as _d\n_real = _a.serve\n"
        "_a.serve = lambda request: _d({_a.ANSWER_MIME: 'forged'}, raw=True)\n",
        timeout=30,
    )
    try:
        assert Learner(KernelChannel(kc, km, timeout_s=5)).call("double", 2) == "forged"
    finally:
        kc.execute_interactive("_a.serve = _real", timeout=30)


OWN_FAILURES = """
from rocmlab.harness import check, own_work

@check("t-1", points=1, en="doubles", zh="加倍")
def doubles(learner, variant):
    assert learner.call("double", 4) == 8

@check("t-1", points=1, en="setup", zh="准备")
def setup_raises(learner, variant):
    reference = HIDDEN_FILES["missing.json"]  # the check's own data is missing: before any question
    assert learner.call("double", 1) == reference

@check("t-1", points=1, en="reference", zh="参考")
def reference_raises(learner, variant):
    got = learner.call("double", 2)
    with own_work("the reference"):
        want = 1 / 0
    assert got == want

@check("t-1", points=1, en="usable", zh="可用")
def arithmetic_on_the_answer(learner, variant):
    assert learner.call("double", 3) + 1 == 7
"""


def test_a_check_that_fails_itself_is_a_grading_error_not_a_broken_rule():
    checks = load_checks(OWN_FAILURES, "checks.py")
    right = {r.name: r for r in run_checks(checks, Learner(InProcess({"double": lambda x: 2 * x})), seed=3)}
    assert right["doubles"].passed and right["arithmetic_on_the_answer"].passed
    for name, why in (("setup_raises", "its setup raised KeyError"), ("reference_raises", "the reference: Zero")):
        result = right[name]
        assert result.error.startswith(f"check {name}: ") and why in result.error, result.error
        assert result.detail == "" and not result.passed and result.points == 0.0
    # the learner's own answer that the check cannot use is still the learner's
    opaque = {r.name: r for r in run_checks(checks, Learner(InProcess({"double": lambda x: object()})), seed=3)}
    assert opaque["arithmetic_on_the_answer"].detail.startswith("unusable answer: TypeError")
    assert opaque["arithmetic_on_the_answer"].error == "" and opaque["setup_raises"].error


def test_a_kernel_has_one_answer_time_budget_for_all_its_answers(kernel):
    km, kc = kernel
    channel = KernelChannel(kc, km, timeout_s=30, budget_s=2)
    learner = Learner(channel)
    with pytest.raises(AnswerTimeExhausted, match="answer time exhausted"):
        learner.call("slow")  # cut at the budget left, not at the request's own limit
    spent = channel.spent_s
    with pytest.raises(AnswerTimeExhausted):
        learner.call("double", 2)  # refused without asking
    assert channel.spent_s == spent and learner.answers == 0
    assert Learner(KernelChannel(kc, km, timeout_s=5)).call("double", 2) == 4  # the kernel serves again


class Budgeted(InProcess):
    """Answers ``left`` requests, then its answer time is exhausted."""

    def __init__(self, names, left):
        super().__init__(names)
        self.left = left

    def ask(self, request):
        self.left -= 1
        if self.left < 0:
            raise AnswerTimeExhausted("answer time exhausted: the kernel used the 1 s it has for all its answers")
        return super().ask(request)


def test_past_the_answer_budget_the_remaining_checks_fail_also_when_a_check_catches_it():
    swallowing = (
        CHECKS
        + """
@check("t-1", points=1, en="swallows", zh="吞掉")
def swallows(learner, variant):
    try:
        learner.call("double", 1)
    except Exception:
        pass
"""
    )
    checks = load_checks(swallowing, "checks.py")
    results = run_checks(checks, Learner(Budgeted({"double": lambda x: 2 * x}, left=1)), seed=3)
    assert [r.passed for r in results] == [True, False, False]
    assert all(r.detail.startswith("answer time exhausted") and not r.error for r in results[1:])


QUALIFIED = """
from rocmlab.harness import check

@check("t-1", points=1, en="doubles", zh="加倍")
def doubles(learner, variant):
    assert learner.call("double", 4) == 8

@check("t-1", points=1, en="nothing gives 0", zh="没有时为 0", counts_with="doubles")
def nothing(learner, variant):
    assert learner.call("double", 0) == 0
"""


def test_a_rule_about_absence_counts_only_with_the_rule_it_qualifies():
    checks = load_checks(QUALIFIED, "checks.py")
    right = run_checks(checks, Learner(InProcess({"double": lambda x: 2 * x})), seed=3)
    assert [r.points for r in right] == [1.0, 1.0]
    zero = run_checks(checks, Learner(InProcess({"double": lambda x: 0})), seed=3)
    assert [r.points for r in zero] == [0.0, 0.0]
    assert zero[1].detail == "counts together with doubles, which did not pass"
    from rocmlab.harness import problems

    broken = load_checks(QUALIFIED.replace('counts_with="doubles"', 'counts_with="nothing"'), "checks.py")
    assert problems(broken, {"t-1": 2.0}) == [
        "check nothing: counts_with names 'nothing', not another check of the file"
    ]


def test_the_checks_read_the_runs_parameters_from_the_lab_not_from_the_kernel(tmp_path):
    from rocmlab.harness import harness_options, lab_parameters

    (tmp_path / "lab.py").write_text(
        '# %%\nimport os\n\n# %% tags=["parameters"]\nSEED = 0\nSIZES = [1, 2]  # sizes\nPATH = os.sep\n\n# %%\nSEED = 5\n'
    )
    (tmp_path / "checks.py").write_text("from rocmlab.harness import check\n")
    assert lab_parameters(tmp_path / "checks.py") == {"SEED": 0, "SIZES": [1, 2]}  # PATH: not a literal
    options = harness_options(tmp_path / "checks.py", 1, tmp_path / "out.json", 30, {"SEED": 7, "PROFILE": "smoke"})
    assert options["parameters"] == {"SEED": 7, "SIZES": [1, 2], "PROFILE": "smoke"}
    source = "from rocmlab.harness import check\n@check('t-1', points=1, en='e', zh='z')\ndef seed(learner, variant):\n    assert learner.get('SEED') == PARAMETERS['SEED']\n"
    (result,) = run_checks(load_checks(source, "checks.py", parameters={"SEED": 7}), Learner(InProcess({"SEED": 5})), 1)
    assert not result.passed  # the kernel rebound SEED: the harness's own value decides


DIFFERENTIAL = """
from rocmlab.harness import check

@check("t-1", points=1, en="scales the lab's values", zh="缩放本实验的数据")
def scales_values(learner, variant, reference):
    s = variant.random.randint(2, 9)
    assert learner.eval("scaled(values, s)", s=s) == reference.eval("scaled(values, s)", s=s)

@check("t-1", points=1, en="doubles", zh="加倍")
def doubles(learner, variant):
    assert learner.call("double", 4) == 8
"""


def test_a_check_that_takes_reference_compares_the_learner_with_the_reference_kernel():
    """The same expression on the same inputs, asked of both: a learner who rebinds the lab's data
    (``values``) so that its own computation agrees with itself no longer agrees with the reference."""
    from rocmlab.harness import Reference

    checks = load_checks(DIFFERENTIAL, "checks.py")
    assert [c.wants_reference for c in checks] == [True, False]
    solution = {"values": [1.0, 2.0], "scaled": lambda v, s: [x * s for x in v], "double": lambda x: 2 * x}
    reference = Reference(InProcess(dict(solution)))
    honest = run_checks(checks, Learner(InProcess(dict(solution))), seed=3, reference=reference)
    assert [r.passed for r in honest] == [True, True]
    forger = {**solution, "values": [], "scaled": lambda v, s: []}  # agrees with a reference taken in its kernel
    assert run_checks(checks, Learner(InProcess(forger)), seed=3, reference=Reference(InProcess(forger)))[0].passed
    forged = run_checks(checks, Learner(InProcess(forger)), seed=3, reference=reference)
    assert not forged[0].passed and forged[0].detail.startswith("wrong") and forged[0].error == ""


def test_without_a_reference_kernel_its_checks_are_grading_errors_not_broken_rules():
    from rocmlab.harness import Reference

    checks = load_checks(DIFFERENTIAL, "checks.py")
    learner = {"values": [1.0], "scaled": lambda v, s: v, "double": lambda x: 2 * x}
    for reference in (None, Reference(unavailable="it did not run the solution: KeyError: 'model'")):
        first, second = run_checks(checks, Learner(InProcess(learner)), seed=3, reference=reference)
        assert first.error.startswith("check scales_values: the reference kernel: ") and first.detail == ""
        assert second.passed
    raising = Reference(InProcess({}))  # the reference's own code raised: the grader's fault too
    first, _ = run_checks(checks, Learner(InProcess(learner)), seed=3, reference=raising)
    assert "the reference kernel raised NameError" in first.error and first.detail == ""


def test_the_course_s_own_notebook_is_its_own_reference_and_a_learner_s_is_not():
    """``rocmlab run`` / ``build --verify`` (``OWN_KERNEL``): the run's kernel answers as the
    reference too; a run whose harness names no reference kernel grades those checks as errors."""
    from jupyter_client.manager import start_new_kernel

    from rocmlab.harness import OWN_KERNEL, run_harness

    km, kc = start_new_kernel()
    try:
        kc.execute_interactive(
            "values = [1.0, 2.0]\ndef scaled(v, s):\n    return [x * s for x in v]\ndef double(x):\n    return 2 * x\n",
            timeout=60,
        )
        config = {"source": DIFFERENTIAL, "seed": 3, "probe_timeout_s": 30}
        own = run_harness(kc, km, {**config, "reference": OWN_KERNEL})
        assert [c["passed"] for c in own["checks"]] == [True, True]
        graded = run_harness(kc, km, config, reference="it did not run the solution: KeyError: 'model'")
        first, second = graded["checks"]
        assert "the reference kernel: it did not run the solution" in first["error"] and second["passed"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


CONSTANT_CHECKS = """
from rocmlab.harness import check

CHOICES = LAB_CONSTANTS["CHOICES"]  # noqa: F821

@check("t-1", points=1, en="picks a choice", zh="从选项中选")
def picks(learner, variant):
    assert learner.get("PICK") in CHOICES
"""


def test_the_checks_read_the_lab_s_constants_from_lab_py_not_from_the_kernel(tmp_path):
    """One copy of course data (``LAB_CONSTANTS``): the notebook's literal, shipped with the checks;
    a kernel that rebinds it does not move the rule, and a name lab.py lacks is named at load."""
    from rocmlab.errors import LabError
    from rocmlab.harness import harness_options, lab_checks

    (tmp_path / "lab.py").write_text('# %%\nCHOICES = ("a", "b")\n\n# %% tags=["parameters"]\nSEED = 0\n')
    (tmp_path / "checks.py").write_text(CONSTANT_CHECKS)
    options = harness_options(tmp_path / "checks.py", 1, tmp_path / "out.json", 30)
    assert options["constants"] == {"CHOICES": ("a", "b")}
    checks = load_checks(CONSTANT_CHECKS, "elsewhere/checks.py", constants=options["constants"])
    assert run_checks(checks, Learner(InProcess({"PICK": "a"})), 1)[0].passed
    forged = run_checks(checks, Learner(InProcess({"PICK": "z", "CHOICES": ("z",)})), 1)[0]
    assert not forged.passed
    (tmp_path / "lab.py").write_text("# %%\nOTHER = 1\n")
    with pytest.raises(LabError, match="checks.py: the checks do not load: KeyError: .*no literal constant 'CHOICES'"):
        lab_checks(tmp_path / "checks.py", {"t-1": 1.0})


FRESH_CHECKS = """
from rocmlab.harness import check

@check("t-1", points=1, en="launches", zh="启动")
def launches(learner, variant, fresh):
    assert fresh.run("launch", 3) == 6

@check("t-1", points=1, en="doubles", zh="加倍")
def doubles(learner, variant):
    assert learner.call("double", 4) == 8
"""
FRESH_MODULE = "def launch(n):\n    return double(n)\n"


class Opened:
    """A ``Fresh`` opener over an in-process kernel whose names are ``names``; what happened, in order."""

    def __init__(self, names, log, fails=""):
        self.names, self.log, self.fails = names, log, fails

    def __call__(self):
        self.log.append("fresh kernel")
        if self.fails:
            raise RuntimeError(self.fails)
        return InProcess(self.names)


class Logged(InProcess):
    def __init__(self, names, log):
        super().__init__(names)
        self.log = log

    def ask(self, request):
        self.log.append("learner kernel")
        return super().ask(request)


def fresh_checks():
    from rocmlab.harness import KernelModule

    return load_checks(FRESH_CHECKS, "checks.py", kernel=KernelModule(FRESH_MODULE, "in_kernel.py"), constants={})


def test_checks_that_take_fresh_run_after_the_others_and_keep_the_labs_order():
    from rocmlab.harness import Fresh

    checks = fresh_checks()
    assert [(c.wants_fresh, c.wants_reference) for c in checks] == [(True, False), (False, False)]
    log = []
    fresh = Fresh(Opened({"double": lambda x: 2 * x}, log), before=lambda: log.append("learner closed"))
    results = run_checks(checks, Learner(Logged({"double": lambda x: 2 * x}, log)), seed=3, fresh=fresh)
    assert [(r.name, r.passed) for r in results] == [("launches", True), ("doubles", True)]
    assert log == ["learner kernel", "learner closed", "fresh kernel"]
    # what the fresh kernel answers, not the learner's kernel, decides the fresh check
    lying = Fresh(Opened({"double": lambda x: 0}, []))
    results = run_checks(checks, Learner(InProcess({"double": lambda x: 2 * x})), seed=3, fresh=lying)
    assert [(r.passed, r.detail.startswith("wrong")) for r in results] == [(False, True), (True, False)]


def test_a_lab_without_fresh_checks_opens_no_fresh_kernel():
    from rocmlab.harness import Fresh

    log = []
    checks = [c for c in fresh_checks() if not c.wants_fresh]
    fresh = Fresh(Opened({}, log), before=lambda: log.append("learner closed"))
    (result,) = run_checks(checks, Learner(InProcess({"double": lambda x: 2 * x})), seed=3, fresh=fresh)
    assert result.passed and log == [] and not fresh.started


def test_a_fresh_kernel_that_does_not_start_is_a_grading_error_and_the_learners_failures_are_theirs():
    from rocmlab.harness import Fresh

    checks = fresh_checks()
    learner = {"double": lambda x: 2 * x}
    for fresh in (None, Fresh(Opened({}, [], fails="bwrap: cannot mount"))):
        first, second = run_checks(checks, Learner(InProcess(learner)), seed=3, fresh=fresh)
        assert first.error.startswith("check launches: the fresh kernel: ") and first.detail == "", first
        assert second.passed
    raising = Fresh(Opened({"double": lambda x: 1 / 0}, []))  # the learner's files raise in it
    first, _ = run_checks(checks, Learner(InProcess(learner)), seed=3, fresh=raising)
    assert first.detail == "your code raised ZeroDivisionError" and first.error == ""


def test_a_check_that_asks_the_learners_kernel_once_the_fresh_one_started_is_a_grading_error():
    from rocmlab.harness import Fresh, KernelModule

    late = FRESH_CHECKS.replace("== 6\n", "== 6\n    learner.call('double', 1)\n")

    checks = load_checks(late, "checks.py", kernel=KernelModule(FRESH_MODULE, "in_kernel.py"), constants={})
    learner = Learner(InProcess({"double": lambda x: 2 * x}))
    fresh = Fresh(Opened({"double": lambda x: 2 * x}, []), before=lambda: learner.close("shut down"))
    first, second = run_checks(checks, learner, seed=3, fresh=fresh)
    assert "asked a kernel after shut down" in first.error and first.detail == ""
    assert second.passed  # it ran before the fresh kernel started


# ---------------------------------------------------------------- launches: their own time allowance

NAP_MODULE = "def nap(s):\n    import time\n    time.sleep(s)\n    return s\n"
LAUNCH_CHECKS = """
from rocmlab.harness import check

LAUNCHES = 1
LAUNCH_LIMIT_S = 1

@check("t-1", points=1, en="launches", zh="启动")
def launches(learner, variant, fresh):
    assert fresh.launch("nap", NAP_S) == NAP_S
"""


def launching_fresh(kernel, allowance, timeout_s=1.0, budget_s=1.0):
    """A ``Fresh`` whose kernel is the real ``kernel``, with requests of ``timeout_s`` and an answer
    budget of ``budget_s``, and ``allowance`` for its launches."""
    from rocmlab.harness import Fresh, KernelModule

    km, kc = kernel
    channel = KernelChannel(kc, km, timeout_s=timeout_s, budget_s=budget_s)
    return Fresh(lambda: channel, kernel=KernelModule(NAP_MODULE, "in_kernel.py"), allowance=allowance), channel


def test_a_launch_longer_than_a_request_may_take_succeeds_within_its_allowance_and_charges_no_answer_budget(kernel):
    fresh, channel = launching_fresh(kernel, (2, 10.0))
    with pytest.raises(NoAnswer):  # the same wait as a request: past the request's 1 s
        fresh.run("nap", 1.5)
    spent = channel.spent_s
    assert fresh.launch("nap", 1.5) == 1.5  # past a request's limit and the whole answer budget
    assert channel.spent_s == spent and channel.launch_s >= 1.5 and fresh.launches == 1


def test_a_launch_past_its_allowance_is_the_learners_failure_with_a_message_that_says_so(kernel):
    from rocmlab.harness import KernelModule

    checks = load_checks(
        LAUNCH_CHECKS.replace("NAP_S", "30"), "checks.py", kernel=KernelModule(NAP_MODULE, "x"), constants={}
    )
    fresh, channel = launching_fresh(kernel, (1, 1.0), timeout_s=30, budget_s=60)
    (result,) = run_checks(checks, Learner(InProcess({})), seed=3, fresh=fresh)
    assert result.error == "" and not result.passed
    assert result.detail.startswith("the launch ran past its allowance of 1 s (the lab's LAUNCH_LIMIT_S): your code")
    assert channel.spent_s == 0 and not channel.broken  # interrupted: the kernel serves again
    assert fresh.run("nap", 0) == 0


def test_one_launch_more_than_the_lab_declares_is_a_grading_error(kernel):
    from rocmlab.harness import KernelModule

    two = LAUNCH_CHECKS.replace("NAP_S", "0") + "    assert fresh.launch('nap', 0) == 0\n"
    checks = load_checks(two, "checks.py", kernel=KernelModule(NAP_MODULE, "x"), constants={})
    fresh, _ = launching_fresh(kernel, (1, 5.0))
    (result,) = run_checks(checks, Learner(InProcess({})), seed=3, fresh=fresh)
    assert result.detail == "" and "launch 2 of this run: its checks.py declares LAUNCHES = 1" in result.error
    assert fresh.launches == 1


def test_the_launch_allowance_is_read_from_the_checks_file_capped_and_in_the_workers_budget(tmp_path):
    from rocmlab.errors import LabError
    from rocmlab.harness import MAX_LAUNCH_S, MAX_LAUNCHES, RECOVER_S, harness_options, launch_allowance

    source = LAUNCH_CHECKS.replace("NAP_S", "0")
    assert launch_allowance(source) == (1, 1.0)
    assert launch_allowance(CHECKS) == (0, 0.0)
    huge = source.replace("LAUNCHES = 1", "LAUNCHES = 1000000").replace("LAUNCH_LIMIT_S = 1", "LAUNCH_LIMIT_S = 1e9")
    assert launch_allowance(huge) == (MAX_LAUNCHES, MAX_LAUNCH_S)
    for broken in (source.replace("LAUNCHES = 1\n", ""), source.replace("= 1\n", "= -1\n", 1)):
        with pytest.raises(LabError, match="checks.py: LAUNCHES must be a positive integer"):
            launch_allowance(broken, "checks.py")
    with pytest.raises(LabError, match="LAUNCH_LIMIT_S must be a positive number"):
        launch_allowance(source.replace("LAUNCH_LIMIT_S = 1", "LAUNCH_LIMIT_S = 'long'"), "checks.py")
    (tmp_path / "checks.py").write_text(source.replace("LAUNCH_LIMIT_S = 1", "LAUNCH_LIMIT_S = 200"))
    options = harness_options(tmp_path / "checks.py", 1, tmp_path / "out.json", 30)
    (tmp_path / "checks.py").write_text(source.replace("LAUNCHES = 1\nLAUNCH_LIMIT_S = 1\n", ""))
    without = harness_options(tmp_path / "checks.py", 1, tmp_path / "out.json", 30)
    assert options["launches"] == [1, 200.0] and without["launches"] == [0, 0.0]
    assert options["budget_s"] - without["budget_s"] == 200 + RECOVER_S


SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("*/checks.py")), ids=lambda p: p.parent.name)
def test_no_checks_file_reads_a_file_beside_it(path):
    """A sandboxed worker (the namespace backend) sees no course: what a check needs of the lab
    travels in the harness's options (``HIDDEN_FILES``, ``LAB_CONSTANTS``, ``LAB_SOURCE``)."""
    assert "__file__" not in path.read_text(encoding="utf-8"), f"{path}: reads beside itself; use LAB_SOURCE"


def test_the_course_scripts_a_check_launches_come_from_the_options_where_the_course_is_hidden(tmp_path):
    """Lab 04's course scripts and lab 10's rank code are read from ``LAB_SOURCE``: loaded as the
    worker loads them, under a path that does not exist, they are lab.py's own text."""
    from rocmlab.harness import harness_options

    lab04, lab10 = SOLUTIONS / "04-collectives-rccl" / "checks.py", SOLUTIONS / "10-fsdp2" / "checks.py"
    names = {}
    for path in (lab04, lab10):
        options = harness_options(path, 1, tmp_path / "out.json", 30)
        assert options["lab_source"] == path.with_name("lab.py").read_text(encoding="utf-8")
        hidden = str(tmp_path / "hidden" / path.parent.name / "checks.py")
        loaded = load_checks(
            options["source"],
            hidden,
            options["files"],
            options["parameters"],
            None,
            options["constants"],
            options["lab_source"],
        )
        names[path] = loaded[0].function.__globals__
    course_script = names[lab04]["course_script"]
    for name in names[lab04]["RING_SCRIPTS"]:
        assert f"# %%writefile {name}\n{course_script(name)}" in lab04.with_name("lab.py").read_text(encoding="utf-8")
    assert names[lab10]["lab_source"]() == lab10.with_name("lab.py").read_text(encoding="utf-8")
