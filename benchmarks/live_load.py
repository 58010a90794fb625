"""Load of a live workshop: LEARNERS learners submit 2 labs each within WINDOW seconds, grading
workers (``rocmlab live worker`` processes) grade from the live queue, and one worker is killed
with SIGKILL while it grades.

Checks, each printed:

- every submission graded once, none lost: an attempt not graded is lost; an attempt whose result
  two workers logged is duplicated (from the workers' own logs, not from the queue);
- the attempt the killed worker held was regraded (by another worker, claimed twice);
- the live scores equal a batch ``rocmlab grade LAB --seeds`` of the same submissions.

Prints the CPU seconds per submission of the live workers and of the batch grade, side by side
(every process each started, sandboxes and kernels included: as root each side's processes are
in a CPU-accounting cgroup of their own, and each worker's in one inside the live side's,
benchmarks/cpu_accounting.py; elsewhere only waited-for children count, which misses the kernels
forked from a zygote), twice: with the kill (every live process, the killed worker's lost grading
and its replacement's start included, which a batch grade never pays) and in the steady state (the
workers never killed, over the attempts they recorded, against the batch's CPU-s per submission of
the same labs). As root it also splits each side's CPU by process kind (grading process, sandbox
worker, zygote, kernel, ...; sampled, so what ended between two samples is shown apart) and says
what the workers' start-up cost before the burst. Then the batch grade's wall time for the same
burst, the load average, p50 and p95 of submit -> result, whether p95 is within that wall time, and
ends with exactly one line:
``submissions: N graded: N lost: 0 duplicated: 0 p50: X s p95: Y s``. Exit 1 if any check fails.
``--no-kill`` kills no worker (the steady state alone; the regrade check is skipped).

The labs are the grading fixture lab (tests/fixtures/submissions) and a copy of it under a second id,
answered correctly, partly or wrongly in turn. ``--real LAB LAB`` uses two labs of this checkout
instead, each learner submitting its solution or its unanswered student notebook in turn. The
learners submit straight into the queue (the live service's collect and HTTP are not timed here).

    .venv/bin/python benchmarks/live_load.py [--learners 60] [--window 120] [--workers 2] [--real LAB LAB]
        [--no-kill] [--record]

``--record`` adds the figures to docs/measurements.md (section "live") when every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "submissions"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import classroom  # noqa: E402 (after the sys.path setup)
from cpu_accounting import CpuGroup, ProcessSampler, waited_children_cpu_s  # noqa: E402 (after the sys.path setup)

from rocmlab.build.assignments import render_lab  # noqa: E402 (after the sys.path setup)
from rocmlab.course.catalog import discover, select  # noqa: E402 (after the sys.path setup)
from rocmlab.course.notebooks import solution_notebook, write_notebook  # noqa: E402 (after the sys.path setup)
from rocmlab.live.queue import LiveQueue  # noqa: E402 (after the sys.path setup)
from rocmlab.processes import exit_on_sigterm  # noqa: E402 (after the sys.path setup)

BIN = Path(sys.executable).parent
SECOND_LAB = "02-grade"


def fixture_course(workdir: Path) -> tuple[Path, list[str]]:
    """The fixture lab and a copy of it as 02-grade, in a course of their own."""
    root = workdir / "course"
    shutil.copytree(classroom.COURSE, root)
    second = root / "solutions" / SECOND_LAB
    shutil.copytree(root / "solutions" / classroom.LAB, second)
    toml = second / "lab.toml"
    toml.write_text(toml.read_text().replace(f'id = "{classroom.LAB}"', f'id = "{SECOND_LAB}"'))
    return root, [classroom.LAB, SECOND_LAB]


def fixture_answers(root: Path, labs: list[str], workdir: Path) -> dict:
    """lab -> the notebooks learners submit in turn (correct, partial, wrong)."""
    answers = {}
    for lab_id in labs:
        lab = select(discover(root), [lab_id])[0]
        import nbformat

        base = nbformat.read(render_lab(root, lab, "en", workdir / f"release-{lab_id}"), as_version=4)
        answers[lab_id] = [
            classroom.answer(base),
            classroom.answer(base, norm_src=classroom.NORM_WRONG),
            classroom.answer(base, classroom.SUM_WRONG, classroom.NORM_WRONG),
        ]
    return answers


def real_answers(root: Path, labs: list[str], workdir: Path) -> dict:
    """lab -> (its solution notebook, its unanswered student notebook)."""
    import nbformat

    answers = {}
    for lab_id in labs:
        lab = select(discover(root), [lab_id])[0]
        student = nbformat.read(render_lab(root, lab, "en", workdir / f"release-{lab_id}"), as_version=4)
        answers[lab_id] = [solution_notebook(lab, "en"), student]
    return answers


def start_worker(root: Path, queue: Path, log: Path, lease_s: float, cpu: CpuGroup, workers: int) -> subprocess.Popen:
    """A ``rocmlab live worker`` in the CPU group ``cpu`` (its own, inside the live side's), told
    how many workers share the machine, as a hub tells its workers (``ROCMLAB_LIVE_WORKERS``)."""
    with log.open("a") as out:
        return subprocess.Popen(
            [str(BIN / "rocmlab"), "--root", str(root), "live", "worker", "--queue", str(queue)]
            + ["--lease", str(lease_s), "--poll", "0.2"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=cpu.join,
            env={**os.environ, "ROCMLAB_LIVE_WORKERS": str(workers)},
        )


def wait_ready(workers: list[subprocess.Popen], logs: list[Path], timeout_s: float = 600) -> None:
    """Until every worker said it grades from the queue (imports and preflight done), as a hub's
    workers are ready long before its learners submit."""
    deadline = time.monotonic() + timeout_s
    while not all("grading from" in log.read_text(errors="replace") for log in logs):
        for worker, log in zip(workers, logs, strict=True):
            if worker.poll() is not None:
                raise SystemExit(f"a live worker ended before it was ready:\n{log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the live workers were not ready within {timeout_s:g} s")
        time.sleep(0.2)


def stop_workers(workers: list[subprocess.Popen]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)


def submit_all(queue: LiveQueue, spool: Path, answers: dict, learners: int, window_s: float, on_tick) -> list[int]:
    """Each learner submits each lab once, at times spread over ``window_s`` in random order; ids."""
    plan = [(f"learner{n:03d}", lab, n) for n in range(learners) for lab in answers]
    random.Random(0).shuffle(plan)
    started, ids = time.monotonic(), []
    for index, (learner, lab, n) in enumerate(plan):
        due = started + window_s * index / max(1, len(plan))
        while time.monotonic() < due:
            on_tick()
            time.sleep(min(0.1, max(0.0, due - time.monotonic())))
        notebooks = answers[lab]
        path = spool / learner / lab / f"{lab}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_notebook(notebooks[n % len(notebooks)], path)
        ids.append(queue.submit(learner, lab, f"2026-12-02T03:00:{index:02d}.000000", str(path)).id)
    return ids


class Killer:
    """Kills (SIGKILL, its whole process group) the first worker seen holding an attempt once
    ``after`` attempts are graded, and starts a fresh one in its place; ``after`` None: kills none."""

    def __init__(self, queue: LiveQueue, workers: list, restart, after: int | None):
        self.queue, self.workers, self.restart, self.after = queue, workers, restart, after
        self.killed_attempt: int | None = None
        self.killed_pid: int | None = None

    def tick(self) -> None:
        if self.after is None or self.killed_attempt is not None or self.queue.counts()["graded"] < self.after:
            return
        grading = [a for a in self.queue.attempts() if a.state == "grading"]
        for attempt in grading:
            pid = int(attempt.worker.split("-")[-2])
            for index, worker in enumerate(self.workers):
                if worker.pid == pid and worker.poll() is None:
                    os.killpg(worker.pid, signal.SIGKILL)
                    worker.wait(timeout=30)
                    self.workers[index] = self.restart()
                    self.killed_attempt, self.killed_pid = attempt.id, pid
                    print(f"killed worker {attempt.worker} while it graded attempt {attempt.id}", flush=True)
                    return


def wait_until_done(queue: LiveQueue, total: int, timeout_s: float, tick) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tick()
        counts = queue.counts()
        if counts["graded"] + counts["failed"] >= total:
            return
        time.sleep(0.5)


def logged_results(logs: list[Path]) -> dict[int, int]:
    """attempt id -> how many workers logged recording its result."""
    seen: dict[int, int] = {}
    for log in logs:
        if not log.is_file():  # the replacement's, when no worker was killed
            continue
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("graded attempt "):
                attempt_id = int(line.split()[2])
                seen[attempt_id] = seen.get(attempt_id, 0) + 1
    return seen


def batch_scores(
    root: Path, labs: list[str], queue: LiveQueue, spool: Path, workdir: Path, cpu: CpuGroup
) -> tuple[dict, dict]:
    """(learner, lab) -> score of ``rocmlab grade LAB --seeds`` (the live seeds) of the same
    submissions, and lab -> the batch's CPU seconds per submission of it."""
    scores, per_lab = {}, {}
    for lab in labs:
        cpu_before, graded_before = cpu.cpu_s(), len(scores)
        seeds = workdir / f"seeds-{lab}.json"
        seeds.write_text(json.dumps(queue.seeds_summary(lab)))
        out = workdir / f"batch-{lab}"
        done = subprocess.run(
            [str(BIN / "rocmlab"), "--root", str(root), "grade", lab, "--submissions", str(spool)]
            + ["--out", str(out), "--jobs", "2", "--seeds", str(seeds)],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
            preexec_fn=cpu.join,
        )
        if done.returncode != 0:
            raise SystemExit(f"rocmlab grade {lab} failed:\n{done.stderr[-2000:]}")
        for student in json.loads((out / "summary.json").read_text())["students"]:
            scores[(student["student"], lab)] = student["score"]
        per_lab[lab] = (cpu.cpu_s() - cpu_before) / max(1, len(scores) - graded_before)
        print(f"batch CPU-s per submission of {lab}: {per_lab[lab]:.2f}", flush=True)
    return scores, per_lab


def print_split(side: str, sampler: ProcessSampler, total_s: float, count: int) -> None:
    """The side's CPU by process kind, per submission (sampled; what ended between samples is apart)."""
    kinds = sampler.by_kind()
    unsampled = total_s - sum(kinds.values())
    parts = [f"{kind} {cpu_s / count:.2f}" for kind, cpu_s in sorted(kinds.items(), key=lambda kv: -kv[1])]
    print(
        f"{side} CPU-s per submission by process kind (sampled every {sampler.interval_s:g} s): "
        + ", ".join(parts)
        + f", not sampled (ended between samples) {unsampled / count:.2f}; "
        f"{sampler.count('kernel')} kernels, {sampler.count('zygote')} zygotes, "
        f"{sampler.count('grading process')} grading processes",
        flush=True,
    )
    other = sampler.biggest("other")
    if other:
        print(f"  {side} 'other': " + "; ".join(f"{command} {cpu_s:.1f} s" for command, cpu_s in other), flush=True)


def worker_pid(attempt) -> int:
    """The pid of the worker that recorded ``attempt`` (its worker id: host-pid-random)."""
    return int(attempt.worker.split("-")[-2])


def percentile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", type=int, default=60)
    parser.add_argument("--window", type=float, default=120, help="seconds over which the submissions arrive")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lease", type=float, default=20, help="seconds of a worker's lease (renewed)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for every grade")
    parser.add_argument("--real", nargs=2, metavar="LAB", help="two labs of this checkout instead of the fixture")
    parser.add_argument("--no-kill", action="store_true", help="kill no worker (the steady state alone)")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    parser.add_argument("--record", action="store_true", help="add the figures to docs/measurements.md")
    args = parser.parse_args()
    exit_on_sigterm()  # a stopped benchmark ends its workers too (the finally below)

    workdir = Path(args.keep or tempfile.mkdtemp(prefix="rocmlab-live-load-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    live_cpu, batch_cpu = CpuGroup("live"), CpuGroup("batch")
    try:
        if args.real:
            root, labs = REPO, list(args.real)
            answers = real_answers(root, labs, workdir)
        else:
            root, labs = fixture_course(workdir)
            answers = fixture_answers(root, labs, workdir)
        # the spool below the queue's folder, as the live service keeps it (ROCMLAB_LIVE_SPOOL's default):
        # a worker's kernels have that folder covered, so its graders stay open across attempts
        queue_path, spool = workdir / "live" / "queue.sqlite", workdir / "live" / "spool"
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        queue = LiveQueue(queue_path)
        logs = [workdir / f"worker-{n}.log" for n in range(args.workers + 1)]  # the last: the replacement
        print(f"CPU counted from {live_cpu.how}", flush=True)
        waited_before_live = waited_children_cpu_s()
        groups = {}  # worker pid -> its CPU group, inside the live side's

        def start(n: int) -> subprocess.Popen:
            group = CpuGroup(f"worker-{n}", live_cpu)
            worker = start_worker(root, queue_path, logs[n], args.lease, group, args.workers)
            groups[worker.pid] = group
            return worker

        with ProcessSampler(live_cpu) as live_sampler:
            workers = [start(n) for n in range(args.workers)]
            originals = [w.pid for w in workers]
            killer = Killer(queue, workers, lambda: start(args.workers), after=None if args.no_kill else 2)
            try:
                wait_ready(workers, logs[: args.workers])
                startup_s = live_cpu.cpu_s()
                started = time.monotonic()
                ids = submit_all(queue, spool, answers, args.learners, args.window, killer.tick)
                print(f"{len(ids)} submissions in {time.monotonic() - started:.0f} s", flush=True)
                wait_until_done(queue, len(ids), args.timeout, killer.tick)
            finally:
                stop_workers(workers)
                live_cpu.close()  # what the killed worker left running is killed: its CPU so far counts
        live_cpu_s, live_waited_s = live_cpu.cpu_s(), waited_children_cpu_s() - waited_before_live
        attempts = {a.id: a for a in queue.attempts()}
        graded = [attempts[i] for i in ids if attempts[i].state == "graded"]
        lost = len(ids) - len(graded)
        logged = logged_results(logs)
        duplicated = sum(1 for count in logged.values() if count > 1)
        unlogged = sum(1 for a in graded if a.id not in logged)
        latencies = [a.finished_at - a.queued_at for a in graded]
        checks_ok = lost == 0 and duplicated == 0 and unlogged == 0
        if args.no_kill:
            print("no worker killed (--no-kill)")
        elif killer.killed_attempt is None:
            print("no worker was killed mid-grade (the class finished first): use more learners")
            checks_ok = False
        else:
            regraded = attempts[killer.killed_attempt]
            again = regraded.state == "graded" and regraded.tries == 2
            print(f"attempt {regraded.id} held by the killed worker: {regraded.state}, claimed {regraded.tries} times")
            checks_ok &= again
        waited_before_batch, batch_started = waited_children_cpu_s(), time.monotonic()
        with ProcessSampler(batch_cpu) as batch_sampler:
            try:
                batch, batch_per_lab = batch_scores(root, labs, queue, spool, workdir, batch_cpu)
            finally:
                batch_cpu.close()
        batch_cpu_s, batch_wall_s = batch_cpu.cpu_s(), time.monotonic() - batch_started
        batch_waited_s = waited_children_cpu_s() - waited_before_batch
        print(
            f"batch rocmlab grade of the same {len(batch)} submissions (--jobs 2): "
            f"{batch_wall_s:.1f} s; load average at end: {os.getloadavg()[0]:.1f}"
        )
        live = {(a.learner, a.lab): a.score for a in graded}
        differ = sorted(k for k in live if batch.get(k) != live[k])
        print(f"live scores equal the batch rocmlab grade: {not differ} ({len(live)} submissions)")
        for key in differ[:10]:
            print(f"  {key}: live {live[key]} batch {batch.get(key)}")
        checks_ok &= not differ
        per_live, per_batch = live_cpu_s / max(1, len(graded)), batch_cpu_s / max(1, len(batch))
        waited_live, waited_batch = live_waited_s / max(1, len(graded)), batch_waited_s / max(1, len(batch))
        print(
            f"CPU-s per submission of the waited-for children alone (kernels forked from a zygote missed): "
            f"live {waited_live:.2f} batch {waited_batch:.2f}"
        )
        if live_cpu.folder is not None:
            print(
                f"live start-up (the workers' imports and preflight, before the first submission): "
                f"{startup_s:.2f} CPU-s for {args.workers} workers"
            )
            print_split("live", live_sampler, live_cpu_s, max(1, len(graded)))
            print_split("batch", batch_sampler, batch_cpu_s, max(1, len(batch)))
        steady = steady_state(groups, originals, killer.killed_pid, graded, batch_per_lab)
        with_kill = (
            "" if args.no_kill else " with the kill (the killed worker's lost grading and its replacement's start)"
        )
        ratio = per_live / per_batch if per_batch else float("nan")
        print(f"CPU-s per submission{with_kill}: live {per_live:.2f} batch {per_batch:.2f} live/batch {ratio:.2f}")
        if steady is not None:
            print(
                f"CPU-s per submission in the steady state (the workers never killed, against the batch's CPU-s "
                f"of the same labs): live {steady[0]:.2f} batch {steady[1]:.2f} live/batch {steady[0] / steady[1]:.2f}"
            )
        p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
        print(f"live p95 within the batch's wall time for the same burst: {p95 <= batch_wall_s}")
        print(
            f"submissions: {len(ids)} graded: {len(graded)} lost: {lost} duplicated: {duplicated} "
            f"p50: {p50:.1f} s p95: {p95:.1f} s"
        )
        if args.record and checks_ok:
            import measurements

            steady_figures = (
                f", steady state (workers never killed) live {steady[0]:.2f}, batch {steady[1]:.2f}, "
                f"live/batch {steady[0] / steady[1]:.2f}"
                if steady is not None
                else ""
            )
            figures = (
                f"{' and '.join(labs)}, {args.learners} learners within {args.window:g} s, {args.workers} workers"
                f"{', one killed mid-grade' if not args.no_kill else ''}, CPU counted from {live_cpu.how}: "
                f"CPU-s per submission live {per_live:.2f}, batch {per_batch:.2f}, live/batch {ratio:.2f}"
                f"{steady_figures}; p50 {p50:.1f} s, p95 {p95:.1f} s; the batch grade of the same "
                f"{len(batch)} submissions {batch_wall_s:.1f} s."
            )
            print(f"recorded in {measurements.record('live', figures)}")
        return 0 if checks_ok else 1
    finally:
        for group in (live_cpu, batch_cpu):
            group.close()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def steady_state(groups: dict, originals: list, killed_pid, graded: list, batch_per_lab: dict):
    """(live, batch) CPU-s per submission of the workers never killed: their own CPU (their groups)
    over the attempts they recorded, against the batch's per-lab CPU-s of the same attempts, so that
    a worker's share of labs does not weigh; None without cgroups or without such an attempt."""
    survivors = [pid for pid in originals if pid != killed_pid]
    theirs = [a for a in graded if worker_pid(a) in survivors]
    if not theirs or any(groups[pid].folder is None for pid in survivors):
        return None
    live_s = sum(groups[pid].cpu_s() for pid in survivors)
    batch_s = sum(batch_per_lab[a.lab] for a in theirs)
    return live_s / len(theirs), batch_s / len(theirs)


if __name__ == "__main__":
    sys.exit(main())
