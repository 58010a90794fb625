"""A reused worker: notebooks run one after another in it, and a run that kills or outlives it
costs only that run (real kernels, so slow)."""

import tempfile

import nbformat
import psutil
import pytest

from rocmlab.execution.worker import Spec, Worker

pytestmark = pytest.mark.slow


def notebook(folder, name, *sources):
    path = folder / f"{name}.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), str(path))
    return path


def spec(folder, path, timeout_s=60, **extra_env):
    return Spec(
        input=str(path),
        output=str(folder / "out" / path.name),
        cwd=str(folder / "work"),
        parameters={},
        cell_timeout_s=30,
        timeout_s=timeout_s,
        extra_env=extra_env,
    )


def printed(folder, path):
    executed = nbformat.read(str(folder / "out" / path.name), as_version=4)
    return "".join(o.get("text", "") for c in executed.cells for o in c.outputs)


def test_one_worker_runs_notebooks_in_turn_each_with_its_own_environment(tmp_path):
    show = notebook(tmp_path, "show", "import os\nprint(os.getpid(), os.environ['LESSON'])")
    with Worker() as worker:
        first = worker.run(spec(tmp_path, show, LESSON="one"))
        kernel_pid, lesson = printed(tmp_path, show).split()
        worker_pid = worker.proc.pid
        assert first.status == "passed", first.reason
        assert lesson == "one"
        assert not psutil.pid_exists(int(kernel_pid))  # the run's kernel ended with the run
        second = worker.run(spec(tmp_path, show, LESSON="two"))
        assert second.status == "passed", second.reason
        assert printed(tmp_path, show).split()[1] == "two"
        assert worker.proc.pid == worker_pid
    assert not psutil.pid_exists(worker_pid)


def test_a_run_past_its_time_or_killing_the_worker_costs_only_that_run(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # the worker's and its kernels'
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    hang = notebook(tmp_path, "hang", "import time\ntime.sleep(600)")
    kill = notebook(tmp_path, "kill", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    fine = notebook(tmp_path, "fine", "print('still grading')")
    with Worker() as worker:
        assert worker.run(spec(tmp_path, hang, timeout_s=8)).status == "timeout"
        assert worker.proc is None
        crashed = worker.run(spec(tmp_path, kill))
        assert crashed.status == "crashed" and "without a result" in crashed.reason
        after = worker.run(spec(tmp_path, fine))
        assert after.status == "passed", after.reason
        assert printed(tmp_path, fine).strip() == "still grading"
    assert list(temp.iterdir()) == []  # the killed kernels' connection files went with their runs


SLOW_CHECK = """
import time
from rocmlab.harness import check


@check("t-1", points=1, en="X is 1", zh="X 为 1")
def x_is_one(learner, variant):
    time.sleep({seconds})
    assert learner.get("X") == 1
"""


def with_harness(folder, path, timeout_s, check_s):
    """A run whose harness asks one check that takes ``check_s`` of the harness's own time."""
    run = spec(folder, path, timeout_s=timeout_s)
    out = folder / f"{path.stem}.checks.json"
    run.engine_options = {
        "harness": {
            "source": SLOW_CHECK.format(seconds=check_s),
            "seed": 1,
            "out": str(out),
            "probe_timeout_s": 30.0,
            "answer_budget_s": 120.0,
            "budget_s": 600.0,
        }
    }
    return run


def test_the_lab_limit_stops_the_cells_and_the_harness_has_its_own_budget_after_them(tmp_path):
    """A broken kernel whose every cell runs to its cell limit (the forgery class's shadowed
    builtins) is stopped at the lab's limit, not at the lab's limit plus the harness's budget;
    and checks that outlast what is left of the lab's limit still run to the end."""
    stuck = notebook(tmp_path, "stuck", "import time\ntime.sleep(25)", "X = 1")
    fine = notebook(tmp_path, "fine", "X = 1")
    with Worker() as worker:
        stopped = worker.run(with_harness(tmp_path, stuck, timeout_s=8, check_s=0))
        assert stopped.status == "timeout" and "the lab ran past its limit of 8 s" in stopped.reason, stopped.reason
        assert stopped.harness is None  # no check ran on a run stopped at its limit
        checked = worker.run(with_harness(tmp_path, fine, timeout_s=15, check_s=16))
        assert checked.status == "passed", checked.reason
        assert [c["passed"] for c in checked.harness["checks"]] == [True], checked.harness
