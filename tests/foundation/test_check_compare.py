"""The checks' comparison toolkit (rocmlab.check_compare): each rule, attacked with the answer
that would slip past a careless comparison."""

import math
from collections import OrderedDict, namedtuple

import numpy as np
import pytest
import torch

from rocmlab.check_compare import assert_close, assert_equal, is_close, label
from rocmlab.grading.feedback import learner_detail
from rocmlab.lab.answers import decode, encode


def failure(compare, got, want, **options) -> str:
    with pytest.raises(AssertionError) as raised:
        compare(got, want, **options)
    return str(raised.value)


# ---------------------------------------------------------------- tolerances


def test_close_follows_the_reference_s_magnitude():
    want = torch.tensor([1000.0, 1.0, 0.0], dtype=torch.float64)
    assert_close(want + torch.tensor([0.009, 0.0, 0.0], dtype=torch.float64), want, rtol=1e-5, atol=0)
    message = failure(assert_close, want + torch.tensor([0.0, 2e-5, 0.0], dtype=torch.float64), want, rtol=1e-5, atol=0)
    assert "1 of 3 differ (rtol 1e-05, atol 0)" in message and "at index 1" in message
    assert_close(torch.tensor([1e-9], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64), atol=1e-8)


def test_the_message_names_the_largest_difference_and_where_it_is():
    want = np.zeros((2, 3))
    got = want.copy()
    got[0, 1], got[1, 2] = 0.5, 2.0
    message = failure(assert_close, got, want, what=label("forward", layers=2, depth=3))
    assert message.startswith("forward (layers=2, depth=3): 2 of 6 differ")
    assert "largest |diff| 2 at index (1, 2): got 2.0, expected 0.0" in message


def test_bfloat16_and_float8_compare_by_their_values():
    want = torch.tensor([1.0, -2.5, 448.0])
    assert_close(want.to(torch.bfloat16), want.to(torch.bfloat16), rtol=0, atol=0)
    assert_close(want.to(torch.float8_e4m3fn), want.to(torch.float8_e4m3fn), rtol=0, atol=0)
    told = "wrong: " + failure(assert_close, want.to(torch.bfloat16), want)
    assert learner_detail(told) == "dtype torch.bfloat16, expected torch.float32"
    assert_close(want.to(torch.bfloat16), want, rtol=1e-2, dtype=False)


# ---------------------------------------------------------------- kind, shape, dtype


@pytest.mark.parametrize(
    ("got", "want", "learner"),
    [
        ([1.0, 2.0], torch.tensor([1.0, 2.0]), "expected a tensor, got list"),
        (torch.tensor([1.0]), np.array([1.0]), "expected a numpy array, got Tensor"),
        (torch.zeros(2, 3), torch.zeros(3, 2), "shape (2, 3), expected (3, 2)"),
        (torch.zeros(3, dtype=torch.float16), torch.zeros(3), "dtype torch.float16, expected torch.float32"),
        (np.zeros(3, dtype=np.int64), np.zeros(3), "dtype int64, expected float64"),
        ("1.0", 1.0, "expected a number, got str"),
        (None, 1.0, "expected a number, got NoneType"),
        ([1, 2], (1, 2), "expected a tuple, got list"),
        ((1, 2), [1, 2], "expected a list, got tuple"),
        ([("k", 1)], {"k": 1}, "expected a dict, got list"),
    ],
)
def test_a_wrong_kind_shape_or_dtype_is_told_to_the_learner(got, want, learner):
    for compare in (assert_close, assert_equal):
        assert learner_detail("wrong: " + failure(compare, got, want)) == learner


def test_the_learner_reads_the_detail_in_the_language_of_their_notebook():
    message = "wrong: " + failure(assert_close, torch.zeros(2, 3), torch.zeros(3, 2))
    assert learner_detail(message, "en") == learner_detail(message) == "shape (2, 3), expected (3, 2)"
    assert learner_detail(message, "zh") == "形状为 (2, 3)，应为 (3, 2)"
    told = "wrong: " + failure(assert_equal, [1], (1,))
    assert learner_detail(told, "zh") == "应为 tuple，得到 list"
    assert learner_detail("wrong: [[learner: format e4m3fnuz]] 0x7F", "zh") == "format e4m3fnuz"  # English only


def test_values_and_indices_are_not_told_to_the_learner():
    message = failure(assert_close, torch.tensor([1.0, 9.0]), torch.tensor([1.0, 2.0]), what="scores")
    assert learner_detail("wrong: " + message) == "" and "expected 2.0" in message


def test_a_bool_is_not_a_number_and_no_number_is_a_bool():
    assert "expected a number, got bool" in failure(assert_equal, True, 1)
    assert "expected a number, got bool" in failure(assert_close, False, 0.0)
    assert "got 1, expected True" in failure(assert_equal, 1, True)
    assert_equal(np.bool_(True), True)
    assert "got True, expected False" in failure(assert_equal, True, False)


def test_numpy_scalars_are_numbers():
    assert_close(np.float32(0.5), 0.5)
    assert_equal(np.int64(3), 3)
    assert is_close(np.float64(1.0 + 1e-12), 1.0) and not is_close("1.0", 1.0) and not is_close(True, 1.0)


# ---------------------------------------------------------------- NaN and infinity


def test_nan_where_the_reference_is_finite_fails_with_its_index():
    want = torch.zeros(2, 3)
    got = want.clone()
    got[1, 0] = math.nan
    message = failure(assert_close, got, want, rtol=1.0, atol=1e9)  # no tolerance lets a NaN through
    assert message == "value at index (1, 0): nan is not finite where the reference is finite 0.0"
    got[0, 2] = math.inf
    assert "at index (0, 2): inf is not finite" in failure(assert_close, got, want, atol=1e9)
    assert "(2 such elements)" in failure(assert_close, got, want, atol=1e9)


def test_nan_and_infinity_in_the_reference_are_matched_only_by_themselves():
    want = np.array([math.nan, math.inf, -math.inf, 1.0])
    assert_close(want.copy(), want)
    assert_equal(want.copy(), want)
    assert "at index 0: 0.0 is not nan where the reference is nan" in failure(
        assert_close, np.array([0.0, math.inf, -math.inf, 1.0]), want, atol=1e9
    )
    assert "at index 2: inf is not the reference's infinity -inf" in failure(
        assert_close, np.array([math.nan, math.inf, math.inf, 1.0]), want
    )
    assert "nan is not finite where the reference is finite 2.0" in failure(assert_close, math.nan, 2.0, atol=1e9)
    assert_close(math.nan, math.nan)
    assert_close(-math.inf, -math.inf)
    assert not is_close(math.inf, 1e308, rtol=1.0)


# ---------------------------------------------------------------- plain data


def test_a_mapping_where_a_dict_is_asked_and_a_namedtuple_where_a_tuple_is_compare_by_value():
    Pair = namedtuple("Pair", "a b")
    assert_equal(OrderedDict(b=2, a=1), {"a": 1, "b": 2})
    assert_equal(Pair(1, [2, 3]), (1, [2, 3]))
    assert_close({"loss": Pair(1.0, 2.0)}, {"loss": (1.0, 2.0 + 1e-9)})
    assert_equal(decode(encode(OrderedDict(a=Pair(1, 2)))), {"a": (1, 2)})  # the wire keeps the rule


def test_plain_data_differences_are_named_by_their_path():
    want = {"params": 4, "grads": [1, 2, (3, 4.0)], "name": "zero3"}
    assert "value['grads'][2][1]: 1 of 1 differ" in failure(
        assert_equal, {"params": 4, "grads": [1, 2, (3, 4.5)], "name": "zero3"}, want
    )
    assert "value: keys differ: missing ['name'], unexpected ['nom']" in failure(
        assert_equal, {"params": 4, "grads": [1, 2, (3, 4.0)], "nom": "zero3"}, want
    )
    assert "bill['grads']: 2 items, expected 3" in failure(
        assert_equal, {"params": 4, "grads": [1, 2], "name": "zero3"}, want, what="bill"
    )
    assert "value['name']: got 'zero2', expected 'zero3'" in failure(
        assert_equal, {"params": 4, "grads": [1, 2, (3, 4.0)], "name": "zero2"}, want
    )


def test_equal_has_no_tolerance_and_close_has_one():
    assert_close(0.1 + 0.2, 0.3)
    assert "1 of 1 differ; the largest" in failure(assert_equal, 0.1 + 0.2, 0.3)
    assert_equal(torch.arange(4), torch.arange(4))
    assert "value at index 3: 4 differs 3" in failure(assert_equal, torch.tensor([0, 1, 2, 4]), torch.arange(4))
    assert_equal(2**70, 2**70)
    assert failure(assert_equal, 2**70 + 1, 2**70) == f"value: got {2**70 + 1}, expected {2**70}"


def test_other_values_compare_by_type_and_value():
    from rocmlab.lab.answers import Opaque

    assert_equal({1, 2}, {2, 1})
    assert_equal(None, None)
    assert_equal(b"x", b"x")
    assert_equal(torch.float16, torch.float16)
    assert "got <thing>, expected 'x'" in failure(assert_equal, Opaque("thing"), "x")
    assert "got 'x', expected None" in failure(assert_equal, "x", None)


def test_label_names_the_inputs():
    assert label("forward") == "forward"
    assert label("forward", layers=3, form="str") == "forward (layers=3, form='str')"
    assert len(label("x", big=list(range(1000)))) < 60
