"""How much does `rocmlab run` add on top of the notebook's own work, and what does --jobs buy?

Prints, for generated CPU-bound labs:
  * the wall time of the same cells run as a plain Python script,
  * the start-up time of a bare Jupyter kernel,
  * the wall time of `rocmlab run` for one lab, and its overhead beyond script + kernel start-up,
  * the wall time of four independent labs with --jobs 1 and --jobs 2, and the speed-up.
Targets on a 2-core machine: overhead within 3 s of kernel start-up; --jobs 2 at least 1.6x.

Usage: python benchmarks/run_overhead.py [--work-s 6] [--repeats 2] [--record]
(--record: the figures into docs/measurements.md, benchmarks/measurements.py)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rocmlab.course.catalog import discover
from rocmlab.execution.run import local_target, run_labs

LAB_TOML = """id = "{id}"
version = "1.0.0"
title = {{ zh = "基准", en = "Benchmark" }}
minutes = 1
[profiles.smoke]
params = {{ WORK_S = {work} }}
timeout_s = 300
"""

LAB_PY = """# %% [markdown] tags=["zh"]
# 基准实验

# %% [markdown] tags=["en"]
# Benchmark lab

# %% tags=["parameters"]
PROFILE = "smoke"
SEED = 0
WORK_S = 1.0

# %%
import time
def spin(seconds):
    end, n = time.process_time() + seconds, 0
    while time.process_time() < end:
        n += 1
    return n

# %%
count = spin(WORK_S)
print("iterations", count)
"""


def make_course(root: Path, n: int, work_s: float) -> None:
    for i in range(1, n + 1):
        folder = root / "solutions" / f"{i:02d}-bench"
        folder.mkdir(parents=True)
        (folder / "lab.toml").write_text(LAB_TOML.format(id=f"{i:02d}-bench", work=work_s), encoding="utf-8")
        (folder / "lab.py").write_text(LAB_PY, encoding="utf-8")


def plain_script_seconds(root: Path, work_s: float) -> float:
    source = (root / "solutions" / "01-bench" / "lab.py").read_text()
    script = source.replace("WORK_S = 1.0", f"WORK_S = {work_s}")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    return time.perf_counter() - start


def kernel_startup_seconds() -> float:
    from jupyter_client.manager import start_new_kernel

    start = time.perf_counter()
    km, kc = start_new_kernel(kernel_name="python3")
    kc.execute_interactive("pass", timeout=60)
    elapsed = time.perf_counter() - start
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    return elapsed


def timed_run(root: Path, labs, jobs: int, out: Path, target) -> float:
    start = time.perf_counter()
    records = run_labs(root, labs, "smoke", target, out, jobs=jobs, stream=open("/dev/null", "w"))
    elapsed = time.perf_counter() - start
    bad = [r for r in records if r.status != "passed"]
    if bad:
        raise SystemExit(f"benchmark lab failed: {bad[0].lab}: {bad[0].reason}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--work-s", type=float, default=6.0, help="CPU seconds of work per lab (real smoke labs: 30-100 s)"
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--record", action="store_true", help="add the figures to docs/measurements.md")
    args = parser.parse_args()
    target = local_target()
    with tempfile.TemporaryDirectory(prefix="rocmlab-bench-") as tmp:
        root = Path(tmp)
        make_course(root, 4, args.work_s)
        labs = discover(root)
        plain = statistics.median(plain_script_seconds(root, args.work_s) for _ in range(args.repeats))
        kernel = statistics.median(kernel_startup_seconds() for _ in range(args.repeats))
        one = statistics.median(timed_run(root, labs[:1], 1, root / f"r1-{i}", target) for i in range(args.repeats))
        serial = timed_run(root, labs, 1, root / "serial", target)
        parallel = timed_run(root, labs, 2, root / "parallel", target)
    overhead = one - plain
    print(f"plain python script, one lab        {plain:7.2f} s")
    print(f"bare kernel start-up                {kernel:7.2f} s")
    print(f"rocmlab run, one lab                {one:7.2f} s")
    print(
        f"overhead over the script            {overhead:7.2f} s  ({overhead - kernel:+.2f} s beyond kernel start-up; target <= 3 s)"
    )
    print(f"four labs, --jobs 1                 {serial:7.2f} s")
    print(f"four labs, --jobs 2                 {parallel:7.2f} s")
    print(f"speed-up of --jobs 2                {serial / parallel:7.2f} x  (target >= 1.6 x)")
    if args.record:
        import measurements

        figures = (
            f"{args.work_s:g} CPU-s of work per lab: script {plain:.2f} s, kernel start-up {kernel:.2f} s, "
            f"`rocmlab run` {one:.2f} s ({overhead - kernel:+.2f} s beyond start-up); four labs --jobs 1 "
            f"{serial:.2f} s, --jobs 2 {parallel:.2f} s ({serial / parallel:.2f}x)"
        )
        print(f"recorded in {measurements.record('run_overhead', figures)}")


if __name__ == "__main__":
    main()
