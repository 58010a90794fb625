"""The torchrun launcher: argument checks, rank bookkeeping, and real launches (slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from rocmlab.lab import launch
from rocmlab.lab.launch import RankOutput, TorchrunResult, run_torchrun


def write(path, source: str):
    path.write_text(textwrap.dedent(source))
    return path


# ---------------------------------------------------------------- fast units


def test_missing_script_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.py"):
        run_torchrun("nope.py", cwd=tmp_path, show=False)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"nproc": 0}, "nproc"),
        ({"nproc": "2"}, "nproc"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_restarts": -1}, "max_restarts"),
    ],
)
def test_bad_arguments_are_rejected(tmp_path, kwargs, word):
    script = write(tmp_path / "s.py", "print(1)\n")
    with pytest.raises(ValueError, match=word):
        run_torchrun(script, show=False, **kwargs)


def test_command_uses_standalone_and_passes_restarts_and_args(tmp_path):
    cmd = launch._torchrun_command(tmp_path / "s.py", 3, ("--x", 5), 2, tmp_path)
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "3"
    assert cmd[cmd.index("--max-restarts") + 1] == "2"
    assert cmd[-4:] == [str(tmp_path), str(tmp_path / "s.py"), "--x", "5"]
    assert "--max-restarts" not in launch._torchrun_command(tmp_path / "s.py", 2, (), 0, tmp_path)


def test_env_is_merged_and_none_removes(monkeypatch):
    monkeypatch.setenv("ROCMLAB_KEEP", "1")
    monkeypatch.setenv("ROCMLAB_DROP", "1")
    env = launch._child_env({"ROCMLAB_NEW": 7, "ROCMLAB_DROP": None})
    assert env["ROCMLAB_KEEP"] == "1" and env["ROCMLAB_NEW"] == "7"
    assert "ROCMLAB_DROP" not in env


def test_collect_ranks_keeps_last_attempt_and_marks_missing(tmp_path):
    (tmp_path / "rank0.attempt0.log").write_text("first\n")
    (tmp_path / "rank0.attempt0.rc").write_text("1")
    (tmp_path / "rank0.attempt1.log").write_text("second\n")
    (tmp_path / "rank0.attempt1.rc").write_text("0")
    (tmp_path / "rank1.attempt1.log").write_text("hung\n")
    ranks = launch._collect_ranks(tmp_path, 3)
    assert ranks == [RankOutput(0, 0, "second\n"), RankOutput(1, None, "hung\n"), RankOutput(2, None, "")]


def test_result_ok_and_summary():
    ranks = [RankOutput(0, 0, ""), RankOutput(1, -signal.SIGKILL, "")]
    assert TorchrunResult(0, False, 1.0, ranks).ok
    assert not TorchrunResult(0, True, 1.0, ranks).ok
    bad = TorchrunResult(1, False, 1.0, ranks)
    assert not bad.ok and "SIGKILL" in bad.summary() and bad.rank(1).returncode == -9


def run_rank_entry(tmp_path, source: str, rank="1", attempt="2"):
    script = write(tmp_path / "s.py", source)
    env = dict(os.environ, RANK=rank, TORCHELASTIC_RESTART_COUNT=attempt)
    proc = subprocess.run(
        [sys.executable, "-m", "rocmlab.lab.launch", str(tmp_path), str(script)], env=env, timeout=60, check=False
    )
    return proc.returncode, launch._collect_ranks(tmp_path, 2)


def test_rank_entry_records_output_and_exit_code(tmp_path):
    rc, ranks = run_rank_entry(tmp_path, "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(7)\n")
    assert rc == 7
    assert ranks[1].returncode == 7 and "out" in ranks[1].output and "err" in ranks[1].output
    assert ranks[0] == RankOutput(0, None, "")


def test_rank_entry_passes_on_a_signal_death(tmp_path):
    rc, ranks = run_rank_entry(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert rc == -signal.SIGKILL and ranks[1].returncode == -signal.SIGKILL


# ---------------------------------------------------------------- real torchrun (slow)

PINNED_OR_NOT = """
    import sys, torch, torch.distributed as dist
    if sys.argv[1] == "early":
        import torch.distributed.nn
    dist.init_process_group("gloo")
    torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)  # imports torch.distributed.nn if not yet
    dist.destroy_process_group()
    from rocmlab.lab import backend_threads
    print("left:", backend_threads())
"""


@pytest.mark.slow
def test_destroy_frees_the_group_unless_an_import_after_init_pins_it(tmp_path):
    """The cause of lab 05's SIGABRTs (issue 16): torch.distributed.nn.functional takes
    group=group.WORLD as a default argument, so importing it after init keeps the group alive."""
    write(tmp_path / "pg.py", PINNED_OR_NOT)
    late = run_torchrun("pg.py", nproc=2, args=["late"], cwd=tmp_path, timeout_s=120, show=False)
    early = run_torchrun("pg.py", nproc=2, args=["early"], cwd=tmp_path, timeout_s=120, show=False)
    assert late.ok and early.ok, late.summary() + early.summary()
    for rank in (0, 1):
        assert "left: ['gloo_tcp_loop', 'pt_gloo_runloop', 'pt_gloo_runloop']" in late.rank(rank).output
        assert "left: []" in early.rank(rank).output


ALL_REDUCE = """
    import json, os, sys, torch, torch.distributed as dist
    import torch.distributed.nn  # before init: a later import pins the group (see test_destroy_...)
    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print("rank", dist.get_rank(), "of", dist.get_world_size(), "args", sys.argv[1:])
    with open(f"out{dist.get_rank()}.json", "w") as f:
        json.dump({"sum": t.item(), "env": os.environ.get("ROCMLAB_TEST_VAR")}, f)
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_ranks_run_and_report(tmp_path, capsys):
    write(tmp_path / "ar.py", ALL_REDUCE)
    result = run_torchrun(
        "ar.py", nproc=2, args=["--flag", 3], cwd=tmp_path, env={"ROCMLAB_TEST_VAR": "seen"}, timeout_s=120
    )
    assert result.ok, result.summary() + result.output
    assert [r.rank for r in result.ranks] == [0, 1]
    assert all(r.returncode == 0 for r in result.ranks)
    for rank in (0, 1):
        assert f"rank {rank} of 2 args ['--flag', '3']" in result.rank(rank).output
        data = json.loads((tmp_path / f"out{rank}.json").read_text())
        assert data == {"sum": 3.0, "env": "seen"}
    shown = capsys.readouterr().out
    assert "rank 0" in shown and "rank 1" in shown
    assert len(launch._LAUNCHED) >= 5  # torchrun, two wrappers, two ranks
    assert launch.leftover_processes() == []


HANG = """
    import os, signal, subprocess, sys, time, torch.distributed as dist
    import torch.distributed.nn
    pids = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with open(f"{pids}/rank{rank}.pid", "w") as f:
        f.write(str(os.getpid()))
    if rank == 1:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # only SIGKILL will end it
        helper = subprocess.Popen(["sleep", "1000"], start_new_session=True)
        with open(f"{pids}/helper.pid", "w") as f:
            f.write(str(helper.pid))
        print("rank 1 skips the barrier and sleeps", flush=True)
        time.sleep(1000)
    dist.barrier()
"""


def assert_dead(pid_file):
    pid = int(pid_file.read_text())
    try:
        proc = psutil.Process(pid)
        assert proc.status() == psutil.STATUS_ZOMBIE, f"{pid_file.name}: pid {pid} survived"
    except psutil.NoSuchProcess:
        pass


@pytest.mark.slow
def test_hanging_rank_is_killed_at_timeout_and_nothing_survives(tmp_path):
    write(tmp_path / "hang.py", HANG)
    pids = tmp_path / "pids"
    pids.mkdir()
    start = time.monotonic()
    result = run_torchrun("hang.py", nproc=2, args=[pids], cwd=tmp_path, timeout_s=20, show=False)
    assert result.timed_out and not result.ok
    assert time.monotonic() - start < 20 + 4 * launch.GRACE_S + 30
    assert "skips the barrier" in result.rank(1).output
    assert result.rank(1).returncode in (None, -signal.SIGKILL)
    for name in ("rank0.pid", "rank1.pid", "helper.pid"):
        assert (pids / name).exists(), f"{name} was never written: {result.output}"
        assert_dead(pids / name)
    leftovers = [
        p for p in psutil.process_iter(["cmdline"]) if any(str(tmp_path) in part for part in (p.info["cmdline"] or []))
    ]
    assert leftovers == []
    assert launch.leftover_processes() == []


CRASH = """
    import os, sys, time
    if os.environ["RANK"] == "1":
        raise ZeroDivisionError("rank 1 crashes on purpose")
    time.sleep(60)
"""


@pytest.mark.slow
def test_crashing_rank_reports_its_own_status(tmp_path):
    write(tmp_path / "crash.py", CRASH)
    result = run_torchrun("crash.py", nproc=2, cwd=tmp_path, timeout_s=50, show=False)
    assert not result.timed_out and result.returncode != 0 and not result.ok
    assert result.rank(1).returncode == 1
    assert "ZeroDivisionError" in result.rank(1).output
    assert result.rank(0).returncode != 0


RESTART = """
    import os, sys
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    print("attempt", attempt)
    if attempt == 0 and os.environ["RANK"] == "0":
        sys.exit(5)
"""


@pytest.mark.slow
def test_max_restarts_reruns_and_keeps_the_last_attempt(tmp_path):
    write(tmp_path / "restart.py", RESTART)
    result = run_torchrun("restart.py", nproc=2, cwd=tmp_path, max_restarts=1, timeout_s=90, show=False)
    assert result.ok, result.summary() + result.output
    for rank in (0, 1):
        assert result.rank(rank).output.strip() == "attempt 1"
        assert result.rank(rank).returncode == 0


def test_import_lines_bind_the_notebook_s_imports_in_a_fresh_interpreter():
    """A rank script sees only its own imports: these lines rebuild each imported name of a notebook (a
    learner's `import re` in an answer cell once died in both ranks with NameError)."""
    import json
    import re
    import subprocess
    import sys
    from pathlib import Path as P

    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from rocmlab.lab.launch import import_lines

    def mine():
        return 1

    namespace = {
        "re": re,
        "json": json,
        "F": F,
        "P": P,
        "DDP": DDP,
        "mine": mine,
        "x": 3,
        "_hidden": re,
        "device": object(),
    }
    lines = import_lines(namespace)
    assert "mine" not in lines and "x" not in lines and "_hidden" not in lines and "device" not in lines
    probe = "assert re.fullmatch('a+', 'aa') and F.relu and P('a').name == 'a' and DDP.__name__ == 'DistributedDataParallel'"
    subprocess.run([sys.executable, "-c", lines + probe + "\nprint(json.dumps(1))"], check=True, timeout=120)
