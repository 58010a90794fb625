"""Lab 06 (multi-agent pipeline): its solution cells against its graded tests.

The runtime exercises run on the virtual clock, so they execute here straight from the lab
source in about a second: each graded test passes on the solution, fails on the empty student
version, and fails on a plausible wrong answer (a mutation of the solution). The BM25 and schema
exercises run the same way. The whole notebook (LLM reporter, real-clock sweep) is executed by
tests/labs/test_every_lab.py (slow).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from in_process import InProcess
from labsource import LabSource, as_code, student

SOURCE = LabSource("06-multi-agent")
LAB = SOURCE.folder


@pytest.fixture(scope="module")
def notebook():
    return SOURCE.notebook


@pytest.fixture(scope="module")
def code_cells():
    return SOURCE.code_cells


def by_grade_id(cells, grade_id):
    return next(c.source for c in cells if c.metadata.get("grade_id") == grade_id)


def index_of(cells, needle):
    return next(i for i, c in enumerate(cells) if needle in c.source)


@pytest.fixture(scope="module")
def runtime_ns(code_cells):
    """Namespace after every code cell of sections 0-5 (solutions and graded tests run)."""
    stop = index_of(code_cells, "TAXONOMY = lab.qc_taxonomy()")
    return run(code_cells[:stop])


def run(cells, namespace=None):
    """Run cells (or sources) in the lab's folder: the lab reads data/ relative to its working folder."""
    namespace = {"__name__": "__main__"} if namespace is None else namespace
    sources = [cell if isinstance(cell, str) else cell.source for cell in cells]
    return SOURCE.run(*sources, namespace=namespace, cwd=LAB)


def test_every_profile_parameter_is_in_the_parameters_cell():
    assigned = SOURCE.parameter_names
    assert {"PROFILE", "DEVICE", "SEED", "MODEL"} <= assigned
    for name, profile in SOURCE.lab.profiles.items():
        assert not set(profile.params) - assigned, name


def test_grade_ids_are_unique_and_every_solution_has_a_test(code_cells):
    ids = [c.metadata["grade_id"] for c in code_cells if "grade_id" in c.metadata]
    assert len(ids) == len(set(ids)) and all(i.startswith("06-") for i in ids)
    tests = {i for i in ids if "-sol-" not in i}
    graded_by = {"06-runtime-sol-1": {"06-dedupe-1", "06-shutdown-1"}}
    for sol in (i for i in ids if "-sol-" in i):
        assert graded_by.get(sol, {sol.replace("-sol-", "-")}) <= tests, sol
    assert len(tests) >= 8


def test_prose_comes_in_zh_en_pairs(notebook):
    tags = [tuple(c.metadata.get("tags", [])) for c in notebook.cells if c.cell_type == "markdown"]
    assert tags.count(("zh",)) == tags.count(("en",)) >= 10


def test_failure_script_and_queries_are_well_formed():
    script = json.loads((LAB / "data" / "failure_script.json").read_text(encoding="utf-8"))
    assert set(script) == {"detect", "localize", "retrieve", "report"}
    for per_id in script.values():
        for outcomes in per_id.values():
            assert all(o in ("ok", "hang") or o.startswith("error:") for o in outcomes)
    for name in ("retrieval_queries.json", "retrieval_queries_hidden.json"):
        rows = json.loads((LAB / "data" / name).read_text(encoding="utf-8"))
        assert rows and all(set(r) == {"query", "relevant"} for r in rows)


def test_runtime_solutions_pass_their_graded_tests(runtime_ns):
    assert (
        runtime_ns["golden_trace"].first_difference(runtime_ns["Trace"].load_rows(LAB / "data" / "golden_trace.json"))
        is None
    )


RUNTIME_EXERCISES = [
    # (solution grade_id, cells to re-run after it (by a line they contain), test grade_id)
    ("06-pipeline-sol-1", [], "06-pipeline-1"),
    ("06-retry-sol-1", [], "06-retry-1"),
    ("06-runtime-sol-1", ["def golden_run("], "06-dedupe-1"),
    ("06-runtime-sol-1", [], "06-shutdown-1"),
    ("06-stretch-cycle-sol-1", [], "06-stretch-cycle-1"),
    ("06-deadlock-sol-1", [], "06-deadlock-1"),
]


@pytest.mark.parametrize("sol,between,test", RUNTIME_EXERCISES, ids=[t for _, _, t in RUNTIME_EXERCISES])
def test_empty_student_version_fails(runtime_ns, code_cells, sol, between, test):
    ns = dict(runtime_ns)
    cells = [student(by_grade_id(code_cells, sol))]
    cells += [code_cells[index_of(code_cells, needle)].source for needle in between]
    cells.append(by_grade_id(code_cells, test))
    with pytest.raises((NotImplementedError, AssertionError, TypeError)):
        run(cells, ns)


MUTATIONS = [
    # (solution grade_id, text, replacement, cells to re-run, test grade_id): wrong answers to catch
    ("06-pipeline-sol-1", 'InstrumentedQueue(queue_size, f"q-{s.name}")', "asyncio.Queue()", [], "06-pipeline-1"),
    ("06-pipeline-sol-1", "        for w in workers:\n            w.cancel()\n", "", [], "06-pipeline-1"),
    ("06-pipeline-sol-1", "        for q in queues:\n            await q.join()\n", "", [], "06-pipeline-1"),
    (
        "06-retry-sol-1",
        "            await asyncio.sleep(backoff_delay(policy, msg_id, attempt))\n",
        "            pass\n",
        [],
        "06-retry-1",
    ),
    ("06-retry-sol-1", "2 ** (attempt - 1)", "2 ** attempt", [], "06-retry-1"),
    ("06-retry-sol-1", 'reason = "timeout"', 'reason = "timed out"', [], "06-retry-1"),
    ("06-runtime-sol-1", "        if msg_id in self._seen:", "        if False:", ["def golden_run("], "06-dedupe-1"),
    (
        "06-runtime-sol-1",
        "        for q in self._queues:\n            await q.join()\n",
        "        await self._queues[0].join()\n",
        [],
        "06-shutdown-1",
    ),
    ("06-runtime-sol-1", "        for w in self._workers:\n            w.cancel()\n", "", [], "06-shutdown-1"),
    ("06-stretch-cycle-sol-1", "return path[path.index(nxt) :]", "return path", [], "06-stretch-cycle-1"),
    (
        "06-stretch-cycle-sol-1",
        "elif color.get(nxt, WHITE) == GREY:",
        "elif color.get(nxt, WHITE) != WHITE:",
        [],
        "06-stretch-cycle-1",
    ),
]


@pytest.mark.parametrize("sol,old,new,between,test", MUTATIONS, ids=[f"{m[4]}-{i}" for i, m in enumerate(MUTATIONS)])
def test_wrong_answers_fail(runtime_ns, code_cells, sol, old, new, between, test):
    source = by_grade_id(code_cells, sol)
    assert old in source, f"mutation target not found in {sol}: {old!r}"
    ns = dict(runtime_ns)
    cells = [source.replace(old, new)]
    cells += [code_cells[index_of(code_cells, needle)].source for needle in between]
    cells.append(by_grade_id(code_cells, test))
    with pytest.raises((AssertionError, TimeoutError, ValueError, runtime_ns["Deadlock"])):
        run(cells, ns)


def test_golden_traces_are_reproduced_by_the_seeded_runs(runtime_ns):
    _, hidden_trace, _ = runtime_ns["golden_run"](seed=5, n=30, workers=1, queue_size=1)
    golden = runtime_ns["Trace"].load_rows(LAB / "data" / "golden_trace_hidden.json")
    assert hidden_trace.first_difference(golden) is None
    events = {row[3] for row in golden}
    assert {"admit", "start", "end", "fail", "dead", "done", "duplicate"} <= events


@pytest.fixture(scope="module")
def retrieval_ns(runtime_ns, code_cells):
    """The given retrieval code of section 7, stretch S2's solution and its given comparison cell."""
    given = code_cells[index_of(code_cells, "import jieba")]
    sol = by_grade_id(code_cells, "06-stretch-bm25-sol-1")
    compare = code_cells[index_of(code_cells, "BM25_INDEX = BM25(KB_TOKENS)")]
    return run([given, sol, compare], dict(runtime_ns))


def test_bm25_solution_passes_and_wrong_versions_fail(retrieval_ns, code_cells):
    test = by_grade_id(code_cells, "06-stretch-bm25-1")
    run([test], dict(retrieval_ns))
    sol = by_grade_id(code_cells, "06-stretch-bm25-sol-1")
    with pytest.raises((NotImplementedError, AssertionError)):
        run([student(sol), test], dict(retrieval_ns))
    no_length_norm = sol.replace("(1 - self.b + self.b * length / self.avgdl)", "1")
    assert no_length_norm != sol
    with pytest.raises(AssertionError):
        run([no_length_norm, test], dict(retrieval_ns))


def test_the_core_retriever_is_given_and_needs_no_stretch_exercise(code_cells):
    """Section 7 retrieves with the given KeywordIndex: stretch S2 (BM25) comes after everything that runs the agents."""
    given = index_of(code_cells, "import jieba")
    agents = index_of(code_cells, "async def retrieve_agent(")
    stretch = [i for i, c in enumerate(code_cells) if "06-stretch-" in c.metadata.get("grade_id", "")]
    last_core = max(i for i, c in enumerate(code_cells) if c.metadata.get("grade_id", "06-stretch").find("stretch") < 0)
    assert given < agents < min(stretch) and last_core < min(stretch)
    assert "class BM25" not in code_cells[given].source and "KeywordIndex(KB_TOKENS)" in code_cells[given].source


def test_expected_documents_rank_in_the_top_3_with_an_independent_bm25(retrieval_ns):
    """The query files hold for the course's qc_kb (recomputed here, not by the lab's code)."""
    import math
    from collections import Counter

    docs = retrieval_ns["KB_TOKENS"]
    kb = retrieval_ns["KB"]
    avgdl = sum(map(len, docs)) / len(docs)
    df = Counter(t for d in docs for t in set(d))

    def score(d, query):
        tf = Counter(d)
        return sum(
            math.log(1 + (len(docs) - df[q] + 0.5) / (df[q] + 0.5))
            * tf[q]
            * 2.5
            / (tf[q] + 1.5 * (0.25 + 0.75 * len(d) / avgdl))
            for q in query
            if q in tf
        )

    for name in ("retrieval_queries.json", "retrieval_queries_hidden.json"):
        for row in json.loads((LAB / "data" / name).read_text(encoding="utf-8")):
            query = retrieval_ns["tokenize_zh"](row["query"])
            ranked = sorted(range(len(kb)), key=lambda i: -score(docs[i], query))
            assert row["relevant"] in [kb[i]["id"] for i in ranked[:3]], row


def test_schema_validation_solution_passes_and_student_fails(runtime_ns, code_cells):
    ns = dict(runtime_ns)
    from rocmlab import lab

    ns.update(
        TAXONOMY=lab.qc_taxonomy(),
        REPORT_FIELDS=("defect_type", "location", "severity", "disposition", "root_cause", "action"),
    )
    sol, test = by_grade_id(code_cells, "06-schema-sol-1"), by_grade_id(code_cells, "06-schema-1")
    run([sol, test], dict(ns))
    with pytest.raises(NotImplementedError):
        run([student(sol), test], dict(ns))
    lenient = sol.replace("not value.strip()", "False")
    with pytest.raises(AssertionError):
        run([lenient, test], dict(ns))


PORTABLE_RUN = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
src = open(sys.argv[2], encoding="utf-8").read()
cells = src.split("\n# %%")
start = next(i for i, c in enumerate(cells) if "class Stage:" in c)
stop = next(i for i, c in enumerate(cells) if "TAXONOMY = lab.qc_taxonomy()" in c)
prelude = (
    "import asyncio, json, math, random\n"
    "from dataclasses import dataclass\n"
    "from pathlib import Path\n"
    "from rocmlab.lab.agents import Deadlock, InstrumentedQueue, Trace, run_async, wait_for_graph\n"
    "SEED = 0\nDATA = Path('data')\n")
os.chdir(os.path.dirname(sys.argv[2]))
exec(compile(prelude + "\n".join("#" + c for c in cells[start:stop]), "lab06", "exec"), {"__name__": "__main__"})
print("PORTABLE-OK")
"""


def find_python(version):
    """A working interpreter for `version` (PATH, then pyenv's versions folder), or None."""
    import glob
    import shutil
    import subprocess

    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / f"{version}.*" / "bin" / "python")))
    for python in filter(None, candidates):
        try:
            if subprocess.run([python, "-c", "pass"], capture_output=True, timeout=30).returncode == 0:
                return python
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_runtime_sections_and_golden_traces_hold_on_other_pythons(version, tmp_path):
    """The virtual-clock traces must not depend on the asyncio of one Python release."""
    import subprocess

    python = find_python(version)
    if python is None:
        pytest.skip(f"python{version} not installed")
    script = tmp_path / "portable.py"
    script.write_text(PORTABLE_RUN)
    src = Path(__file__).resolve().parents[2] / "src"
    done = subprocess.run(
        [python, str(script), str(src), str(LAB / "lab.py")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "PORTABLE-OK" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.slow
def test_redis_streams_extension_runs_and_leaves_nothing_behind(code_cells, tmp_path, monkeypatch):
    import shutil

    import psutil

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed (Debian package redis-server)")
    pytest.importorskip("redis")
    agent = SOURCE.cell_starting("%%writefile redis_agent.py")
    driver = next(c.source for c in code_cells if "def redis_pipeline(" in c.source)
    (tmp_path / "redis_agent.py").write_text(as_code(agent))
    monkeypatch.chdir(tmp_path)  # the pipeline starts redis_agent.py from here
    before = set(psutil.Process().children(recursive=True))  # other tests' children in this worker are not this one's
    ns = SOURCE.run(driver, namespace={"__name__": "__main__", "json": json})
    assert ns["REDIS_RESULTS"] is not None and len(ns["REDIS_RESULTS"]) == 20
    results = ns["redis_pipeline"](7, timeout_s=30.0)
    assert sorted(results) == [f"r{i:03d}" for i in range(7)]
    assert set(psutil.Process().children(recursive=True)) <= before


def test_exercise_headings_come_in_order_and_every_solution_has_one(notebook):
    import re

    for lang, core, stretch in (
        ("zh", r"^### 练习 (\d)", r"^## 选做 (S\d)"),
        ("en", r"^### Exercise (\d)", r"^## Stretch (S\d)"),
    ):
        heading, seen = None, []
        for cell in notebook.cells:
            tags = cell.metadata.get("tags", [])
            if cell.cell_type == "markdown" and lang in tags:
                for pattern in (core, stretch):
                    found = re.search(pattern, cell.source, re.MULTILINE)
                    if found:
                        heading = found.group(1)
                        seen.append(heading)
            if "solution" in tags:
                stretch_id = "stretch" in cell.metadata["grade_id"]
                assert heading is not None and heading.startswith("S") == stretch_id, (lang, cell.metadata["grade_id"])
        assert seen == ["1", "2", "3", "4", "5", "S1", "S2"], (lang, seen)


def test_solution_cells_hold_only_what_the_learner_writes(code_cells):
    """Given code lives outside solution cells, so a learner replacing a stub cannot delete it."""
    import ast

    for cell in code_cells:
        if "solution" not in cell.metadata.get("tags", []):
            continue
        body = ast.parse(cell.source).body
        kinds = {type(node).__name__ for node in body}
        assert kinds <= {"FunctionDef", "AsyncFunctionDef", "ClassDef"}, (cell.metadata["grade_id"], kinds)
        methods = [m for node in body if isinstance(node, ast.ClassDef) for m in node.body]
        for node in body + methods:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith(
                "_"
            ):
                doc = ast.get_docstring(node) or ""
                assert re.search("[\u4e00-\u9fff]", doc) and re.search("[A-Za-z]{4}", doc), (node.name, doc)


def test_a_golden_trace_mismatch_names_the_rule_it_broke(runtime_ns, code_cells):
    ns = dict(runtime_ns)
    early_admit = by_grade_id(code_cells, "06-runtime-sol-1").replace(
        "        await self._queues[0].put((msg_id, payload))  # may wait: backpressure on the feeder\n"
        '        self.trace.record("admit", msg_id)\n',
        '        self.trace.record("admit", msg_id)\n        await self._queues[0].put((msg_id, payload))\n',
    )
    assert "admit" in early_admit
    cells = [early_admit, code_cells[index_of(code_cells, "def golden_run(")].source]
    cells.append(by_grade_id(code_cells, "06-dedupe-1"))
    with pytest.raises(AssertionError, match=r"rule \d / 规则 \d broken for m\d+"):
        run(cells, ns)


def test_the_fair_benchmark_holds_what_its_prose_states(runtime_ns, code_cells):
    """Section 8 on the virtual clock: equal concurrency, the knee, the admission cap, one shared GPU (asserted)."""
    from rocmlab import lab

    ns = dict(runtime_ns, lab=lab)
    bench = code_cells[index_of(code_cells, "BENCH_MS = (")]
    capped = code_cells[index_of(code_cells, "C_SEED = 9")]
    claims = code_cells[index_of(code_cells, "The prose of this section states these")]
    ns = run([bench, capped, claims], ns)
    assert ns["CAPPED"][4]["in_pipeline_ms"] < ns["CAPPED"][None]["in_pipeline_ms"]
    seed = ns["PIPE"][9]
    assert seed["throughput"] > 3 * ns["MONO"][1]["throughput"] and seed["latency_ms"] > 2 * ns["WORK_MS"]


def test_the_checks_run_on_the_courses_clock_and_trace_not_on_a_learners_redefinition(runtime_ns):
    """A learner whose run_pipeline runs one worker per stage, and who rebinds the course's
    run_async to report no virtual time, made "the workers of one stage work in parallel" hold.
    The checks bind run_async and Trace from the course package in each request: it fails."""
    import dataclasses

    from rocmlab.harness import Learner, hidden_files, load_checks, run_checks

    path = LAB / "checks.py"
    checks = load_checks(path.read_text(encoding="utf-8"), str(path), hidden_files(path))
    checks = [c for c in checks if c.name in ("pipeline_complete", "pipeline_parallel")]
    assert all(r.passed for r in run_checks(checks, Learner(InProcess(dict(runtime_ns))), seed=47))

    real_pipeline, real_async = runtime_ns["run_pipeline"], runtime_ns["run_async"]

    async def one_worker_each(items, stages, queue_size=2, trace=None):
        return await real_pipeline(
            items, [dataclasses.replace(s, workers=1) for s in stages], queue_size=queue_size, trace=trace
        )

    def no_time(main, **options):
        return dataclasses.replace(real_async(main, **options), elapsed_s=0.0)

    forger = {**runtime_ns, "run_pipeline": one_worker_each, "run_async": no_time}
    old_design = [c for c in load_checks(*_with_notebook_scaffolding()) if c.name == "pipeline_parallel"]
    (parallel,) = old_design
    assert run_checks([parallel], Learner(InProcess(forger)), seed=47)[0].passed  # the learner's own clock
    results = {r.name: r for r in run_checks(checks, Learner(InProcess(forger)), seed=47)}
    assert results["pipeline_complete"].passed  # every message still gets through, one at a time
    assert not results["pipeline_parallel"].passed and "virtual time" in results["pipeline_parallel"].detail


def test_a_learner_who_rebinds_the_course_package_shapes_nothing_a_check_reads(runtime_ns, monkeypatch):
    """A learner whose run_pipeline runs one worker per stage and leaves a task behind, and whose
    later cell rebinds the course package's own run_async (``rocmlab.lab.agents`` in sys.modules,
    where the checks once imported it in the kernel) to report no virtual time and no task left,
    made "parallel" and "no task is left" hold. The kernel-side module now compiles the course's
    clock from the source the check sends: only the rule its pipeline keeps passes."""
    import asyncio
    import dataclasses

    from rocmlab.harness import Learner, hidden_files, load_checks, run_checks
    from rocmlab.lab import agents

    path = LAB / "checks.py"
    names = ("pipeline_complete", "pipeline_parallel", "pipeline_no_leftovers")
    checks = [
        c for c in load_checks(path.read_text(encoding="utf-8"), str(path), hidden_files(path)) if c.name in names
    ]
    assert all(r.passed for r in run_checks(checks, Learner(InProcess(dict(runtime_ns))), seed=47))

    real_pipeline, real_async = runtime_ns["run_pipeline"], agents.run_async

    async def serial_and_leaky(items, stages, queue_size=2, trace=None):
        asyncio.create_task(asyncio.sleep(3600), name="left-behind")
        return await real_pipeline(
            items, [dataclasses.replace(s, workers=1) for s in stages], queue_size=queue_size, trace=trace
        )

    def no_time_nothing_left(main, **options):
        return dataclasses.replace(real_async(main, **options), elapsed_s=0.0, leftover_tasks=[])

    monkeypatch.setattr(agents, "run_async", no_time_nothing_left)
    forger = {**runtime_ns, "run_pipeline": serial_and_leaky}
    results = {r.name: r for r in run_checks(checks, Learner(InProcess(forger)), seed=47)}
    assert [n for n, r in results.items() if r.passed] == ["pipeline_complete"], {
        n: r.detail for n, r in results.items()
    }
    assert "left-behind" in results["pipeline_no_leftovers"].detail


QUEUES_OF_NOTHING = """
async def run_pipeline(items, stages, queue_size=2, trace=None):
    queues = [InstrumentedQueue(queue_size, f"q-{s.name}") for s in stages]
    return {}

async def rpc_pipeline_fixed(n, queue_size):
    replies = InstrumentedQueue(queue_size, "replies")
    return {}
"""


def test_queues_that_carry_nothing_keep_the_bounded_rules_only_with_the_answers(runtime_ns):
    """Stubs that make the bounded queues and pass nothing through them held "messages in flight
    never exceed ..." and "InstrumentedQueues of capacity at most queue_size" on empty evidence: the
    rules count together with the rule they qualify, require the queues to carry the messages, and
    the stubs earn nothing."""
    from rocmlab.harness import Learner, hidden_files, load_checks, run_checks

    path = LAB / "checks.py"
    names = ("pipeline_complete", "pipeline_bounded", "rpc_answers", "rpc_bounded")
    checks = [
        c for c in load_checks(path.read_text(encoding="utf-8"), str(path), hidden_files(path)) if c.name in names
    ]
    stub = dict(runtime_ns)
    exec(compile(QUEUES_OF_NOTHING, "<stubs>", "exec"), stub)  # noqa: S102 (the learner's cell, here)
    results = {r.name: r for r in run_checks(checks, Learner(InProcess(stub)), seed=47)}
    assert sum(r.points for r in results.values()) == 0, {n: r.detail for n, r in results.items()}
    by_name = {c.name: c for c in checks}
    for name, qualified in (("pipeline_bounded", "pipeline_complete"), ("rpc_bounded", "rpc_answers")):
        assert by_name[name].counts_with == (qualified,)
        # and on their own: the queues must carry the messages (puts), which these carry none of
        assert results[name].detail.startswith("wrong:") and "puts" in results[name].detail, results[name].detail


def _checks_named(*names, design=None):
    from rocmlab.harness import hidden_files, load_checks

    path = LAB / "checks.py"
    design = design or (path.read_text(encoding="utf-8"), str(path), hidden_files(path))
    return [c for c in load_checks(*design) if c.name in names]


def _scores(checks, names):
    from rocmlab.harness import Learner, run_checks

    return {r.name: r for r in run_checks(checks, Learner(InProcess(names)), seed=47)}


PACKAGE_SUBCLASS = '''
from rocmlab.lab.agents import InstrumentedQueue as _PackageQueue


class LoggedQueue(_PackageQueue):
    """The package's queue under a class of the learner's, made before the checks bind theirs."""
'''

# The solution's pipeline over queues that hold 10,000 (a subclass of the package's queue), beside
# bounded InstrumentedQueues that carry nothing, fed one message at a time: few in flight, and the
# only queues a check saw were the bounded ones
ROOMY = """
async def run_pipeline(items, stages, *, queue_size, trace):
    shown = [InstrumentedQueue(queue_size, f"q-{s.name}") for s in stages]
    queues = [LoggedQueue(10_000, f"roomy-{s.name}") for s in stages]
    results = {}

    async def worker(index):
        stage, inbox = stages[index], queues[index]
        while True:
            msg_id, payload = await inbox.get()
            trace.record("start", msg_id, stage.name)
            payload = await stage.fn(payload)
            trace.record("end", msg_id, stage.name)
            if index + 1 < len(stages):
                await queues[index + 1].put((msg_id, payload))
            else:
                results[msg_id] = payload
                trace.record("done", msg_id)
            inbox.task_done()

    workers = [asyncio.create_task(worker(i)) for i, s in enumerate(stages) for _ in range(s.workers)]
    for msg_id, payload in items:
        await queues[0].put((msg_id, payload))
        trace.record("admit", msg_id)
        while msg_id not in results:
            await asyncio.sleep(0.0001)
    for w in workers:
        w.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    return results
"""


TRAFFIC = '        assert sum(q["puts"] for q in queues) >= n * len(STAGES),'


def _without_the_package_registry():
    """The checks as they were while only the name ``InstrumentedQueue`` was bound to the check's
    queue: the package's class still registered its queues with the package, and the pipeline's
    queues needed not carry the messages."""
    from rocmlab.harness import KernelModule, hidden_files

    path, module = LAB / "checks.py", LAB / "in_kernel.py"
    checks, text = path.read_text(encoding="utf-8"), module.read_text(encoding="utf-8")
    assert text.count('if hasattr(agents, "_local"):') == 1 and checks.count(TRAFFIC) == 1
    text = text.replace('if hasattr(agents, "_local"):', "if False:")
    checks = checks.replace(TRAFFIC, "        assert True or", 1)
    return checks, str(path), hidden_files(path), None, KernelModule(text, str(module))


def test_the_queues_of_a_subclass_of_the_packages_queue_are_the_ones_the_checks_see(runtime_ns, code_cells):
    """A queue class that subclasses the package's ``InstrumentedQueue`` (defined before the checks
    bind the name to theirs) registered its queues with the package, not with the check's run: the
    solution over such queues lost both bounded rules, and a pipeline over queues of 10,000 beside
    bounded ones that carry nothing held "bounded" (the roomy queues unseen). The package's registry
    is the check's while the learner's code runs: the first passes, the second scores 0."""
    names = ("pipeline_complete", "pipeline_bounded", "rpc_answers", "rpc_bounded")
    checks, old = _checks_named(*names), _checks_named(*names, design=_without_the_package_registry())
    subclassed = dict(runtime_ns)
    for grade_id in ("06-pipeline-sol-1", "06-deadlock-sol-1"):
        source = by_grade_id(code_cells, grade_id).replace("InstrumentedQueue(", "LoggedQueue(")
        exec(compile(PACKAGE_SUBCLASS + source, f"<{grade_id} over a subclass>", "exec"), subclassed)  # noqa: S102
    was = _scores(old, subclassed)
    assert not was["pipeline_bounded"].passed and not was["rpc_bounded"].passed, "unseen queues"
    assert all(r.passed for r in _scores(checks, subclassed).values())

    roomy = dict(runtime_ns)
    exec(compile(PACKAGE_SUBCLASS + ROOMY, "<roomy queues>", "exec"), roomy)  # noqa: S102 (the learner's cell, here)
    was = _scores(old, roomy)
    assert was["pipeline_complete"].passed and was["pipeline_bounded"].passed  # the roomy queues unseen
    now = _scores(checks, roomy)
    assert now["pipeline_complete"].passed
    assert now["pipeline_bounded"].points == 0 and "queue" in now["pipeline_bounded"].detail


LEAKY = """
_solution_pipeline = run_pipeline


async def run_pipeline(items, stages, *, queue_size, trace):
    asyncio.create_task(asyncio.sleep(3600), name="left-behind")
    return await _solution_pipeline(items, stages, queue_size=queue_size, trace=trace)
"""


def test_a_task_list_that_says_nothing_is_left_does_not_list_what_the_check_left(runtime_ns, monkeypatch):
    """A leaky pipeline in a kernel whose cell rebinds ``asyncio.all_tasks`` to an empty set: the run
    listed no leftover task, and "no task is left" held (it asked for ``leftover == []``). The run
    now leaves tasks of the check's own behind, named by the check, once the learner's coroutine
    has returned, and the list must name exactly those: this one names none, and scores 0."""
    import asyncio
    import inspect

    from rocmlab.harness import Learner, kernel_module
    from rocmlab.lab import agent_trace, agents

    course = {name: inspect.getsource(m) for name, m in (("agent_trace", agent_trace), ("agents", agents))}
    checks = _checks_named("pipeline_complete", "pipeline_no_leftovers")
    leaky = dict(runtime_ns)
    exec(compile(LEAKY, "<a leaky pipeline>", "exec"), leaky)  # noqa: S102 (the learner's cell, here)
    assert "left-behind" in _scores(checks, leaky)["pipeline_no_leftovers"].detail  # the loop's own list
    assert all(r.passed for r in _scores(checks, dict(runtime_ns)).values())

    monkeypatch.setattr(asyncio, "all_tasks", lambda loop=None: set())
    driver = Learner(InProcess(leaky), kernel_module(LAB / "checks.py"))
    said = driver.run("pipeline_run", course, 5, 2, 1, [1.0, 1.0, 1.0, 1.0], [])
    assert said[3] == []  # what main's rule read: nothing left
    results = _scores(checks, leaky)
    assert results["pipeline_complete"].passed
    assert results["pipeline_no_leftovers"].points == 0 and not results["pipeline_no_leftovers"].error
    assert "not the loop's tasks" in results["pipeline_no_leftovers"].detail


def test_a_clock_that_never_runs_is_no_measure_of_parallel_work(runtime_ns, monkeypatch):
    """A pipeline with one worker per stage, in a kernel whose cell rebinds ``asyncio.sleep`` to
    return at once: no virtual time passed, and "the workers of one stage work in parallel" held
    (it asked only for less than half the serial time). No run is shorter than one message's path
    through the stages' times: it scores 0."""
    import asyncio
    import dataclasses

    checks = _checks_named("pipeline_complete", "pipeline_parallel")
    old = _checks_named("pipeline_complete", "pipeline_parallel", design=_with_notebook_scaffolding())
    assert all(r.passed for r in _scores(checks, dict(runtime_ns)).values())
    solution = runtime_ns["run_pipeline"]

    async def one_worker_each(items, stages, *, queue_size, trace):
        one_each = [dataclasses.replace(s, workers=1) for s in stages]
        return await solution(items, one_each, queue_size=queue_size, trace=trace)

    async def at_once(delay, result=None):
        return result

    serial = {**runtime_ns, "run_pipeline": one_worker_each}
    assert not _scores(checks, serial)["pipeline_parallel"].passed  # with a clock that runs
    monkeypatch.setattr(asyncio, "sleep", at_once)
    assert _scores(old, serial)["pipeline_parallel"].passed
    results = _scores(checks, serial)
    assert results["pipeline_complete"].passed
    assert results["pipeline_parallel"].points == 0 and "under" in results["pipeline_parallel"].detail


# A learner without a Runtime who knows how the checks call golden_run, and forges its result: every
# id admitted once, every redelivery a duplicate, every id reported, with no Runtime run at all.
FORGED_GOLDEN = """
from types import SimpleNamespace

class Runtime:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError

def golden_run(seed, workers, queue_size, schedule):
    trace, seen = Trace(), set()

    async def record():
        for _, msg_id in schedule:
            trace.record("duplicate" if msg_id in seen else "admit", msg_id)
            seen.add(msg_id)

    run_async(record)
    return SimpleNamespace(value=SimpleNamespace(reports={m: {} for m in seen}, dead_letters=[])), trace
"""


def test_the_checks_drive_the_learners_code_with_the_courses_scaffolding_not_the_notebooks(runtime_ns, code_cells):
    """The notebook's given scaffolding (stages, golden_run, FAILURES, RetryPolicy) is bound in each
    request from the checks' own code. Rebinding it passed rules without the answer: stages that
    never wait made a one-worker pipeline "parallel", and a golden_run that forged its result
    passed "every redelivery is a duplicate" with no Runtime. Against the checks' own scaffolding
    neither gains a point over the same learner without the forgery."""
    from rocmlab.harness import Learner, hidden_files, load_checks, run_checks

    path = LAB / "checks.py"
    now, old = (path.read_text(encoding="utf-8"), str(path), hidden_files(path)), _with_notebook_scaffolding()

    def scores(design, names):
        checks = load_checks(*design)
        runtime = [c for c in checks if c.grade_id in ("06-pipeline-1", "06-dedupe-1")]
        return {r.name: r.points for r in run_checks(runtime, Learner(InProcess(dict(names))), seed=47)}

    honest = scores(now, runtime_ns)
    assert all(honest.values()), honest

    def learner(*later_cells):  # the notebook's names, then the learner's later cells over them
        return run([*code_cells[: index_of(code_cells, "TAXONOMY = lab.qc_taxonomy()")], *later_cells])

    serial_cell = (
        "import dataclasses\n"
        "_real_pipeline = run_pipeline\n"
        "async def run_pipeline(items, stages, *, queue_size, trace):\n"
        "    one_each = [dataclasses.replace(s, workers=1) for s in stages]\n"
        "    return await _real_pipeline(items, one_each, queue_size=queue_size, trace=trace)\n"
    )
    no_wait_cell = (
        "_real_stage = toy_stage\ndef toy_stage(name, ms, workers=1):\n    return _real_stage(name, 0.0, workers)\n"
    )
    serial, serial_forged = learner(serial_cell), learner(serial_cell, no_wait_cell)
    assert scores(old, serial_forged)["pipeline_parallel"] > 0  # the learner's stages took no time
    assert scores(now, serial_forged) == scores(now, serial)
    assert scores(now, serial)["pipeline_parallel"] == 0

    no_runtime = learner(
        "class Runtime:\n    def __init__(self, *args, **kwargs):\n        raise NotImplementedError\n"
    )
    forged = learner(FORGED_GOLDEN)
    assert scores(old, forged)["runtime_dedupe"] > 0  # the learner's own golden_run
    assert scores(now, forged) == scores(now, no_runtime)
    assert sum(scores(now, no_runtime)[n] for n in ("runtime_golden", "runtime_dedupe")) == 0


CLOCK_FLOOR = "    assert isinstance(elapsed, float) and elapsed >= floor - 1e-9,"


def _with_notebook_scaffolding():
    """``load_checks``' arguments for the checks as they were while the scaffolding, the clock and
    the trace came from the learner's names: the kernel-side module with its own copies (and the
    course's clock and trace it compiles) replaced by the notebook's, and "parallel" without its
    floor (a run no shorter than one message's path), which a clock that never runs fails as well."""
    from rocmlab.harness import KernelModule, hidden_files

    path, module = LAB / "checks.py", LAB / "in_kernel.py"
    checks = path.read_text(encoding="utf-8")
    assert checks.count(CLOCK_FLOOR) == 1
    checks = checks.replace(CLOCK_FLOOR, "    assert True or", 1)
    text = module.read_text(encoding="utf-8")
    assert "def _course(course):" in text
    text += (
        "\n_toy_stages, _scripted = toy_stages, scripted\n\n\n"
        "def _course(course):\n"
        "    return types.SimpleNamespace(Trace=Trace, run_async=run_async, InstrumentedQueue=InstrumentedQueue)\n\n\n"
        "def golden(course, seed, workers, queue_size, schedule, failures):\n"
        "    result, trace = golden_run(seed, workers, queue_size, schedule)\n"
        "    return _events(trace), sorted(result.value.reports), [d['id'] for d in result.value.dead_letters]\n"
    )
    return checks, str(path), hidden_files(path), None, KernelModule(text, str(module))


def test_the_checks_failure_script_is_the_labs():
    """The checks' FAILURES is data/failure_script.json, as the notebook loads it."""
    from rocmlab.harness import load_checks  # noqa: F401 (the checks module's own names below)

    path = LAB / "checks.py"
    namespace = {"HIDDEN_FILES": {}, "PARAMETERS": {}}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # noqa: S102
    assert namespace["FAILURES"] == json.loads((LAB / "data" / "failure_script.json").read_text(encoding="utf-8"))


def _e2e_run(findings, dead=()):
    """An ``E2E`` as the notebook's end-to-end run leaves it: template reports for ``findings``
    ({id: (anomaly, region, docs)}), a dead letter for each id of ``dead``."""
    from types import SimpleNamespace

    from rocmlab.assets.loaders import qc_taxonomy

    checks = {"HIDDEN_FILES": {}, "PARAMETERS": {}}
    exec(compile((LAB / "checks.py").read_text(encoding="utf-8"), "checks.py", "exec"), checks)  # noqa: S102
    reports = {}
    for i, (anomaly, region, docs) in findings.items():
        p = {"anomaly": anomaly, "region": region, "docs": docs}
        reports[i] = {**p, "report": checks["template_report"](p, qc_taxonomy()), "report_source": "template"}
    dead_letters = [{"id": i, "stage": "report", "reason": "error: x", "attempts": 3} for i in dead]
    return SimpleNamespace(value=SimpleNamespace(reports=reports, dead_letters=dead_letters), leftover_tasks=[])


def test_the_end_to_end_rules_take_the_agents_findings_from_the_reference_run():
    """``E2E`` is the notebook's own run, which a later cell may set to anything: every signal a
    dead letter (nothing to check a report against), or every signal "normal" with its template
    report. Both held every end-to-end rule while the kernel's run was the only evidence; against
    the reference kernel's run of the same signals they hold none, and the run itself holds both."""
    from rocmlab.assets.loaders import qc_signals
    from rocmlab.harness import Learner, Reference, hidden_files, lab_parameters, load_checks, run_checks

    path = LAB / "checks.py"
    parameters = lab_parameters(path)
    checks = load_checks(path.read_text(encoding="utf-8"), str(path), hidden_files(path), parameters)
    checks = [c for c in checks if c.grade_id == "06-e2e-1"]
    ids = [s["id"] for s in qc_signals(parameters["N_SIGNALS"], seed=parameters["SEED"], kind="trace")]
    kinds = ("spike", "step", "drift")
    run = _e2e_run({i: (kinds[k % 3], (k, k + 5), [f"doc-{k}"]) for k, i in enumerate(ids)})
    reference = Reference(InProcess({"E2E": run}))

    def passing(e2e, against=reference):
        results = run_checks(checks, Learner(InProcess({"E2E": e2e})), seed=47, reference=against)
        assert not [r.error for r in results if r.error]
        return [r.name for r in results if r.passed]

    assert passing(run) == ["e2e_balance", "e2e_reports"]
    for forged in (_e2e_run({}, dead=ids), _e2e_run({i: ("normal", None, []) for i in ids})):
        # its own run as the reference: the rules as they were, with nothing to compare against
        assert passing(forged, against=Reference(InProcess({"E2E": forged}))) == ["e2e_balance", "e2e_reports"]
        assert passing(forged) == []
