import pytest
import torch

from rocmlab import lab


def test_timer_synchronizes_before_reading_the_clock_and_time_it_skips_warmup():
    events = []
    ticks = iter(range(100))

    def clock():
        events.append("clock")
        return float(next(ticks))

    def sync(_device):
        events.append("sync")

    calls = []
    stats = lab.time_it(lambda: calls.append(1), repeats=3, warmup=2, clock=clock, sync=sync)
    assert len(calls) == 5
    assert events == ["sync", "clock", "sync", "clock"] * 3
    assert stats["samples"] == [1.0, 1.0, 1.0] and stats["median"] == 1.0


def test_time_it_rejects_no_repeats():
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        lab.time_it(lambda: None, repeats=0)


def test_seed_everything_repeats_torch_and_numpy():
    import numpy as np

    lab.seed_everything(7)
    a = (torch.rand(3), np.random.rand(3))
    lab.seed_everything(7)
    b = (torch.rand(3), np.random.rand(3))
    assert torch.equal(a[0], b[0]) and (a[1] == b[1]).all()


def test_pick_device_and_environment_line():
    assert lab.pick_device("cpu").type == "cpu"
    assert lab.pick_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="asks for a GPU but torch sees none"):
            lab.pick_device("cuda")
    line = lab.describe_environment("smoke")
    assert f"torch {torch.__version__}" in line and line.endswith("profile smoke")


def test_unknown_helper_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = lab.nope
