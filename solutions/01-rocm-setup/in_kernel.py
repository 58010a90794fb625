"""Lab 01's kernel-side helpers: what a hidden check runs in the kernel (``learner.run``).

Each function builds the stand-ins an exercise's function is given (a torch module with chosen
version attributes, a fake device or host clock), calls the learner's function (``backend_of``,
``time_per_call``: the notebook's own names) and returns its answer for ``checks.py`` to judge.

The fake clocks follow one timing protocol and nothing else: ``warmup`` calls of fn, then
``repeats`` groups of start, ``calls`` calls of fn, stop. Any other step raises, and so does
every step after it, so each rule shows in ``time_per_call``'s own answer: no counter is read
back afterwards (the learner's code shares this kernel with the fakes and could set any counter).
"""

from types import SimpleNamespace


def backend_with(version, capability=(9, 0)):
    """``backend_of`` on a torch module whose ``version`` has the attributes ``version`` names."""
    capability = tuple(capability)
    torch_module = SimpleNamespace(
        version=SimpleNamespace(**version), cuda=SimpleNamespace(get_device_capability=lambda i=0: capability)
    )
    return backend_of(torch_module)


class _Protocol:
    def __init__(self, warmup, calls, repeats):
        self.steps = ["fn"] * warmup + (["start"] + ["fn"] * calls + ["stop"]) * repeats
        self.at, self.off = 0, ""

    def step(self, what):
        expected = self.steps[self.at] if self.at < len(self.steps) else "nothing more"
        self.at += 1
        if not self.off and what != expected:
            self.off = f"off the timing protocol at step {self.at}: {what}, where it has {expected}"
        if self.off:
            raise RuntimeError(self.off)


class _Device:
    """An asynchronous device: fn queues its cost; a mark is the end of the queue so far."""

    def __init__(self, costs, queued, protocol):
        self.costs, self.calls, self.end, self.protocol = list(costs), 0, queued, protocol

    def fn(self):
        self.protocol.step("fn")
        self.end += self.costs[min(self.calls, len(self.costs) - 1)]
        self.calls += 1

    def start(self):
        self.protocol.step("start")
        return self.end

    def stop(self, mark):
        self.protocol.step("stop")
        return self.end - mark


class _Host:
    """A host clock that synchronizes the device before every reading."""

    def __init__(self, cost, queued, protocol):
        self.cost, self.now, self.queued, self.protocol = cost, 0.0, queued, protocol

    def fn(self):
        self.protocol.step("fn")
        self.queued += self.cost

    def sync(self):
        self.now, self.queued = self.now + self.queued, 0.0

    def start(self):
        self.protocol.step("start")
        self.sync()
        return self.now

    def stop(self, mark):
        self.protocol.step("stop")
        self.sync()
        return self.now - mark


def time_on_device(costs, queued, *, calls, repeats, warmup):
    """``time_per_call`` on a fake device whose calls cost ``costs`` in turn (the last repeats)."""
    device = _Device(costs, queued, _Protocol(warmup, calls, repeats))
    return time_per_call(device.fn, calls=calls, repeats=repeats, warmup=warmup, start=device.start, stop=device.stop)


def time_on_host(cost, queued, *, calls, repeats, warmup):
    """``time_per_call`` with a synchronizing host clock; every call costs ``cost``."""
    host = _Host(cost, queued, _Protocol(warmup, calls, repeats))
    return time_per_call(host.fn, calls=calls, repeats=repeats, warmup=warmup, start=host.start, stop=host.stop)
