"""Lab 05's kernel-side helpers: what a hidden check runs in the learner's kernel (``learner.run``).

No function starts a process. The ranks of exercise 1 are threads that talk through a stand-in
for ``torch.distributed`` (a barrier and a table of tensors); exercises 2 and S2 get a stand-in
for ``DDP`` with one replica (DDP's own averaging is not what they grade); exercise 3 watches
``os.replace``/``os.rename``/``os.fsync`` while the learner's save runs in a temp folder. Each
public function calls the learner's functions (``broadcast_parameters``, ``average_gradients``,
``make_sharded_loader``, ``train_ddp_epochs``, ``save_checkpoint_atomic``,
``resume_from_checkpoint``, ``bucketed_all_reduce_``, ``accumulate_gradients``) on the check's
inputs and returns what they did as plain data for ``checks.py`` to judge.
"""

import contextlib
import os
import shutil
import stat
import tempfile
import threading
import types
from pathlib import Path

import torch
import torch.distributed as real_dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# ---------------------------------------------------------------- threads as ranks


class _Done:
    def wait(self, *args, **kwargs):
        return True

    def is_completed(self):
        return True


class _ThreadDist:
    """``torch.distributed`` for ``n`` threads: collectives through a barrier and a table."""

    ReduceOp = real_dist.ReduceOp

    def __init__(self, n):
        self._n, self._barrier, self._slots = n, threading.Barrier(n, timeout=20), [None] * n
        self._local = threading.local()

    def get_world_size(self, group=None):
        return self._n

    def get_rank(self, group=None):
        return self._local.rank

    def is_initialized(self):
        return True

    def is_available(self):
        return True

    def barrier(self, *args, **kwargs):
        self._barrier.wait()

    def _exchange(self, tensor):
        self._slots[self._local.rank] = tensor.detach().clone()
        self._barrier.wait()
        got = list(self._slots)
        self._barrier.wait()
        return got

    def broadcast(self, tensor, src=0, group=None, async_op=False, **kwargs):
        got = self._exchange(tensor)
        with torch.no_grad():
            tensor.copy_(got[src])
        return _Done() if async_op else None

    def all_reduce(self, tensor, op=real_dist.ReduceOp.SUM, group=None, async_op=False):
        got = self._exchange(tensor)
        total = got[0].clone()
        for other in got[1:]:
            if op == real_dist.ReduceOp.MAX:
                total = torch.maximum(total, other)
            elif op == real_dist.ReduceOp.MIN:
                total = torch.minimum(total, other)
            elif op == real_dist.ReduceOp.PRODUCT:
                total = total * other
            else:
                total = total + other
        if op == real_dist.ReduceOp.AVG:
            total = total / self._n
        with torch.no_grad():
            tensor.copy_(total)
        return _Done() if async_op else None

    def __getattr__(self, name):
        return getattr(real_dist, name)


def _with_global(function, name, value):
    """``function`` reading ``name`` as ``value``: the learner's code, with its ``dist`` or ``DDP`` swapped."""
    return types.FunctionType(
        function.__code__,
        {**function.__globals__, name: value},
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )


def _run_ranks(n, body):
    """``[body(rank, dist) for rank in range(n)]``, the ranks as threads sharing one stand-in ``dist``."""
    fake = _ThreadDist(n)
    results, errors = [None] * n, []

    def run(rank):
        fake._local.rank = rank
        try:
            results[rank] = body(rank, fake)
        except BaseException as exc:  # noqa: BLE001 (a rank's failure ends every rank, then is raised)
            errors.append(exc)
            fake._barrier.abort()

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in threads):
        raise TimeoutError("a rank did not finish")
    return results


def _mlp(state, frozen_bias):
    hidden = state["0.weight"].shape[0]
    model = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)).double()
    model.load_state_dict(state)
    if frozen_bias:
        model[0].bias.requires_grad_(False)
    return model


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _grads(model):
    return {k: p.grad for k, p in model.named_parameters()}


# ---------------------------------------------------------------- exercise 1: data parallelism from scratch


def broadcast_states(states, src):
    """Each rank's parameters after ``broadcast_parameters(model, src=src)`` from its own ``states[rank]``."""
    models = [_mlp(s, True) for s in states]

    def body(rank, fake):
        _with_global(broadcast_parameters, "dist", fake)(models[rank], src=src)
        return _state(models[rank])

    return _run_ranks(len(states), body)


def averaged_gradients(state, grads, frozen_bias):
    """Each rank's ``.grad``s after ``average_gradients``, from ``grads[rank]`` (the frozen bias: None)."""
    models = [_mlp(state, frozen_bias) for _ in grads]
    for model, given in zip(models, grads, strict=True):
        for k, p in model.named_parameters():
            p.grad = None if frozen_bias and k == "0.bias" else given[k].clone()

    def body(rank, fake):
        _with_global(average_gradients, "dist", fake)(models[rank])
        return _grads(models[rank])

    return _run_ranks(len(grads), body)


def scratch_train(inits, lr, batches, per_rank, x, y):
    """Each rank's parameters after SGD with both functions, rank r on its slice of each global batch."""

    def body(rank, fake):
        model = _mlp(inits[rank], True)
        _with_global(broadcast_parameters, "dist", fake)(model)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        average = _with_global(average_gradients, "dist", fake)
        for idx in batches:
            mine = torch.tensor(idx[rank * per_rank : (rank + 1) * per_rank])
            loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
            opt.zero_grad()
            loss.backward()
            average(model)
            opt.step()
        return _state(model)

    return _run_ranks(len(inits), body)


# ---------------------------------------------------------------- exercise 2: DDP and DistributedSampler


def _dataset(x, y):
    return TensorDataset(torch.arange(x.shape[0]), x, y)


def sharded_orders(x, y, per_rank, world, seed):
    """For each rank, the index batches ``make_sharded_loader`` yields in epochs 0 and 1."""
    data = _dataset(x, y)
    loaders = [make_sharded_loader(data, per_rank, r, world, seed) for r in range(world)]
    orders = []
    for loader in loaders:
        epochs = []
        for epoch in (0, 1):
            loader.sampler.set_epoch(epoch)
            epochs.append([batch[0].tolist() for batch in loader])
        orders.append(epochs)
    return orders


class _OneReplicaDDP(torch.nn.Module):
    """A stand-in for DDP with one replica: it records how it was built and where forward and backward ran."""

    built = []

    def __init__(self, module, device_ids=None, *args, **kwargs):
        super().__init__()
        self.module = module
        self.sync = True
        self.log = []
        _OneReplicaDDP.built.append({"same_module": True, "device_ids": device_ids, "extra": sorted(kwargs)})

    @contextlib.contextmanager
    def no_sync(self):
        before, self.sync = self.sync, False
        try:
            yield
        finally:
            self.sync = before

    def forward(self, *args, **kwargs):
        self.log.append(("forward", self.sync))
        out = self.module(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda grad: self.log.append(("backward", self.sync)))
        return out


def ddp_train(x, y, per_rank, world, rank, seed, lr, state, epochs):
    """``(returned model, its module's state or None, seen, the DDPs built)`` of ``train_ddp_epochs``
    for one rank of ``world`` on the CPU, DDP being the one-replica stand-in."""
    data = _dataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(data, batch_size=per_rank, sampler=sampler)
    _OneReplicaDDP.built.clear()
    returned = tuple(
        _with_global(train_ddp_epochs, "DDP", _OneReplicaDDP)(
            _mlp(state, False), loader, epochs, lr, torch.device("cpu")
        )
    )
    wrapped = returned[0]
    params = dict(wrapped.module.state_dict()) if hasattr(wrapped, "module") else None
    return wrapped, params, returned[1], list(_OneReplicaDDP.built)


# ---------------------------------------------------------------- exercise 3: atomic checkpoints


class _Spied:
    """``save_checkpoint_atomic`` into a temp folder of the work folder, with ``os.replace``,
    ``os.rename`` and ``os.fsync`` recorded (``fsync``: whether its file is a directory)."""

    def __init__(self, name):
        self.folder = Path(tempfile.mkdtemp(prefix="ckpt-check-", dir=os.getcwd()))
        self.target, self.calls = self.folder / name, []
        self.real = {"replace": os.replace, "rename": os.rename, "fsync": os.fsync}

    def _spy(self, kind):
        def spy(*args, **kwargs):
            if kind == "fsync":
                fd = args[0] if args else kwargs.get("fd")
                fd = fd if isinstance(fd, int) else fd.fileno()
                self.calls.append(["fsync", stat.S_ISDIR(os.fstat(fd).st_mode)])
            else:
                self.calls.append([kind, [str(a) for a in args]])
            return self.real[kind](*args, **kwargs)

        return spy

    def save(self, state):
        os.replace, os.rename, os.fsync = self._spy("replace"), self._spy("rename"), self._spy("fsync")
        try:
            save_checkpoint_atomic(state, self.target)
        finally:
            os.replace, os.rename, os.fsync = self.real["replace"], self.real["rename"], self.real["fsync"]

    def listing(self):
        return sorted(p.name for p in self.folder.iterdir())

    def close(self):
        shutil.rmtree(self.folder, ignore_errors=True)


def spied_save(name, state):
    """``(calls, files left in the folder, the file's bytes)`` after one save of ``state`` as ``name``."""
    spied = _Spied(name)
    try:
        spied.save(state)
        return spied.calls, spied.listing(), spied.target.read_bytes()
    finally:
        spied.close()


def failed_save(name, state):
    """``(what the failing save raised or None, the file before, after, files left)``: a good save,
    then one of a state that cannot be pickled."""
    spied = _Spied(name)
    try:
        spied.save(state)
        before, raised = spied.target.read_bytes(), None
        try:
            spied.save({"step": state["step"] + 1, "bad": lambda: None})
        except Exception as exc:  # noqa: BLE001 (whatever the failing save raised is the answer)
            raised = type(exc).__name__
        return raised, before, spied.target.read_bytes(), spied.listing()
    finally:
        spied.close()


# ---------------------------------------------------------------- exercise 4: elastic restart


def resumed(blob, init):
    """``(returned step, model state, momentum buffers)`` of ``resume_from_checkpoint`` on a model
    from ``init`` and its SGD-with-momentum optimizer, the checkpoint file holding ``blob`` (None: no file)."""
    folder = Path(tempfile.mkdtemp(prefix="resume-check-", dir=os.getcwd()))
    try:
        path = folder / "ckpt.pt"
        if blob is not None:
            path.write_bytes(blob)
        model = _mlp(init, False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        step = resume_from_checkpoint(path, model, opt)
        momentum = [opt.state[p].get("momentum_buffer") if p in opt.state else None for p in model.parameters()]
        return step, _state(model), momentum
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- stretch S1: bucketing


def bucketed(grads, cap, world, others):
    """``(returned, each call's tensor, the gradients after)`` of ``bucketed_all_reduce_`` with a
    stand-in all_reduce that records each call and adds the other ranks' gradients (``others``,
    flat) at the same offsets."""
    sent, pos, others = [], [0], others.to(grads[0].dtype)

    def all_reduce(t):
        sent.append(t.detach().reshape(-1).clone())
        t.add_(others[pos[0] : pos[0] + t.numel()].view_as(t))
        pos[0] += t.numel()

    calls = bucketed_all_reduce_(grads, cap, world, all_reduce)
    return calls, sent, grads


# ---------------------------------------------------------------- stretch S2: no_sync accumulation


def accumulated(state, start, x, y, per, m):
    """``(the stand-in DDP's forward/backward log, .grads after, parameters)`` of
    ``accumulate_gradients`` over ``m`` micro-batches of ``per`` rows, from the gradients ``start``."""
    ddp = _OneReplicaDDP(_mlp(state, False))
    for k, p in ddp.module.named_parameters():
        p.grad = start[k].clone()
    micro = [(x[i * per : (i + 1) * per], y[i * per : (i + 1) * per]) for i in range(m)]
    accumulate_gradients(ddp, micro, torch.nn.functional.mse_loss)
    return ddp.log, _grads(ddp.module), _state(ddp.module)
