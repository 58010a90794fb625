"""Labs that need no course asset run while the assets are built; the others start once those they need are ready."""

import json
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmlab.errors import CommandFailed
from rocmlab.execution import run
from rocmlab.execution.course_assets import ADAPTER_KEY, MODEL_KEY, AssetBuild
from rocmlab.execution.fingerprint import Fingerprint
from rocmlab.execution.schedule import run_by_need

WAIT_S = 10  # a wait this long means the scheduler serialised work it should overlap


def test_free_items_run_while_the_prerequisite_is_prepared_and_the_rest_after_it():
    free_started, events = threading.Event(), []

    def prepare():
        assert free_started.wait(WAIT_S), "the free item did not start while the prerequisite was prepared"
        events.append("prepared")

    def work(item):
        if item.startswith("free"):
            free_started.set()
        events.append(item)
        return item.upper()

    items = ["model-a", "free-1", "model-b", "free-2"]
    results = run_by_need(work, items, 2, needs=lambda i: i.startswith("model"), stages=[prepare], unmet=None)
    assert results == ["MODEL-A", "FREE-1", "MODEL-B", "FREE-2"]
    assert events.index("prepared") < events.index("model-a") and events.index("prepared") < events.index("model-b")
    assert events.index("free-1") < events.index("prepared")


def test_a_dependent_item_starts_the_moment_the_prerequisite_is_ready():
    release_free = threading.Event()
    model_ran = threading.Event()

    def work(item):
        if item == "free":  # holds its slot until the dependent item ran in the other one
            assert release_free.wait(WAIT_S)
        else:
            model_ran.set()
            release_free.set()
        return item

    results = run_by_need(work, ["free", "model"], 2, needs=lambda i: i == "model", stages=[lambda: None], unmet=None)
    assert results == ["free", "model"] and model_ran.is_set()


def test_a_failed_prerequisite_fails_only_the_items_that_need_it():
    def prepare():
        raise CommandFailed("no disk space")

    results = run_by_need(
        lambda item: f"ran {item}",
        ["free", "model"],
        2,
        needs=lambda i: i == "model",
        stages=[prepare],
        unmet=lambda item, error: f"unmet {item}: {error}",
    )
    assert results == ["ran free", "unmet model: no disk space"]


def test_no_item_needing_it_never_prepares_it():
    def prepare():
        raise AssertionError("prepared although nothing needs it")

    assert run_by_need(str, [1, 2, 3], 1, needs=lambda i: False, stages=[prepare], unmet=None) == ["1", "2", "3"]


def test_one_job_prepares_first_then_runs_in_the_order_that_allows():
    order = []
    run_by_need(order.append, ["m", "f"], 1, needs=lambda i: i == "m", stages=[lambda: order.append("P")], unmet=None)
    assert order == ["P", "f", "m"]


def test_the_stages_run_in_turn_and_each_item_starts_once_the_last_it_needs_is_ready():
    events = []
    second_may_finish = threading.Event()

    def second():
        assert second_may_finish.wait(WAIT_S), "an item needing only the first stage waited for the second"
        events.append("second ready")

    def work(item):
        events.append(item)
        if item == "needs-first":
            second_may_finish.set()
        return item

    stages = [lambda: events.append("first ready"), second]
    depth = {"free": 0, "needs-first": 1, "needs-both": 2}
    results = run_by_need(work, list(depth), 2, needs=depth.get, stages=stages, unmet=None)
    assert results == list(depth)
    assert events.index("first ready") < events.index("needs-first") < events.index("second ready")
    assert events.index("second ready") < events.index("needs-both")


def test_a_failed_stage_fails_the_items_that_need_it_or_a_later_one_and_the_later_stages_never_run():
    def first():
        raise CommandFailed("no disk space")

    def second():
        raise AssertionError("the second stage ran after the first failed")

    results = run_by_need(
        lambda item: f"ran {item}",
        ["free", "first", "both"],
        2,
        needs={"free": 0, "first": 1, "both": 2}.get,
        stages=[first, second],
        unmet=lambda item, error: f"unmet {item}: {error}",
    )
    assert results == ["ran free", "unmet first: no disk space", "unmet both: no disk space"]


def test_a_stage_that_no_item_needs_is_not_run():
    ran = []
    run_by_need(str, [1], 1, needs=lambda i: 1, stages=[lambda: ran.append(1), lambda: ran.append(2)], unmet=None)
    assert ran == [1]


def test_an_interrupted_run_stops_the_prerequisite_and_reraises():
    stopped = []

    def work(item):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_by_need(work, ["f"], 2, needs=lambda i: False, stages=[], unmet=None, stop=lambda: stopped.append(1))
    assert stopped == [1]


# ---------------------------------------------------------------- run_labs with fake labs


def fake_lab(lab_id, course_model, qc_adapter=False, checks=Path("/nonexistent/checks.py")):
    from rocmlab.course.catalog import Profile, Requires

    smoke = Profile("smoke", {}, 60, 60, Requires(course_model=course_model, qc_adapter=qc_adapter))
    return SimpleNamespace(id=lab_id, version="1.0.0", profiles={"smoke": smoke}, checks=checks)


class FakeBuild:
    def __init__(self, error=None, wait_for=None):
        self.error, self.wait_for, self.ran, self.done = error, wait_for, threading.Event(), threading.Event()

    def run(self):
        self.ran.set()
        if self.wait_for:
            assert self.wait_for.wait(WAIT_S), "the build held back a lab that does not need it"
        if self.error:
            raise CommandFailed(self.error)
        self.done.set()

    def stop(self):
        pass


def test_run_labs_builds_the_model_once_before_the_labs_that_declare_it(monkeypatch, tmp_path, capsys):
    build, seen = FakeBuild(), {}

    def fake_run_lab(root, lab, profile, target, out, **_):
        seen[lab.id] = build.ran.is_set()
        return SimpleNamespace(lab=lab.id, status="skipped"), None

    monkeypatch.setattr(run, "run_lab", fake_run_lab)
    checks = tmp_path / "checks.py"
    checks.write_text("", encoding="utf-8")
    labs = [fake_lab("01-free", False, checks=checks), fake_lab("02-model", True)]
    target = run.Target("local", sys.executable, Fingerprint())
    records = run.run_labs(
        tmp_path, labs, "smoke", target, tmp_path, jobs=2, builds={MODEL_KEY: build}, stream=sys.stderr
    )
    assert [r.lab for r in records] == ["01-free", "02-model"]
    assert seen["02-model"] is True
    err = capsys.readouterr().err
    assert "start   model tiny-qwen-zh" in err and "ready   model tiny-qwen-zh" in err
    assert err.count(f"checks: the labs' hidden checks run {run.CHECKS_SANDBOX}") == 1  # said once, not per lab


def test_run_labs_builds_the_adapter_after_the_model_and_holds_only_the_labs_that_declare_it(monkeypatch, tmp_path):
    model_lab_ran, seen = threading.Event(), {}
    model, adapter = FakeBuild(), FakeBuild(wait_for=model_lab_ran)

    def fake_run_lab(root, lab, profile, target, out, **_):
        seen[lab.id] = (model.ran.is_set(), adapter.done.is_set())
        if lab.id == "02-model":
            model_lab_ran.set()
        return SimpleNamespace(lab=lab.id, status="passed"), None

    monkeypatch.setattr(run, "run_lab", fake_run_lab)
    labs = [fake_lab("02-model", True), fake_lab("03-adapter", True, qc_adapter=True)]
    target = run.Target("local", sys.executable, Fingerprint())
    run.run_labs(tmp_path, labs, "smoke", target, tmp_path, jobs=2, builds={MODEL_KEY: model, ADAPTER_KEY: adapter})
    assert seen == {"02-model": (True, False), "03-adapter": (True, True)}


def test_with_only_the_adapter_missing_a_lab_needing_the_model_alone_waits_for_nothing(tmp_path):
    target = run.Target("local", sys.executable, Fingerprint())
    builds = {ADAPTER_KEY: FakeBuild()}
    assert run.stages_needed(fake_lab("02-model", True), "smoke", target, builds) == 0
    assert run.stages_needed(fake_lab("03-adapter", True, qc_adapter=True), "smoke", target, builds) == 1
    both = {MODEL_KEY: FakeBuild(), ADAPTER_KEY: FakeBuild()}
    assert run.stages_needed(fake_lab("02-model", True), "smoke", target, both) == 1
    assert run.stages_needed(fake_lab("01-free", False), "smoke", target, both) == 0


def test_run_labs_records_a_failed_build_on_each_lab_that_needed_it(monkeypatch, tmp_path):
    monkeypatch.setattr(run, "run_lab", lambda *a, **k: (SimpleNamespace(lab=a[1].id, status="passed"), None))
    labs = [fake_lab("01-free", False), fake_lab("02-model", True)]
    target = run.Target("local", sys.executable, Fingerprint())
    records = run.run_labs(
        tmp_path, labs, "smoke", target, tmp_path, jobs=2, builds={MODEL_KEY: FakeBuild("disk full")}
    )
    assert records[0].status == "passed"
    assert records[1].status == "failed" and "could not be built: disk full" in records[1].reason
    saved = json.loads((tmp_path / "local" / "02-model.json").read_text(encoding="utf-8"))
    assert saved["status"] == "failed"


# ---------------------------------------------------------------- the build's child process


def test_the_build_passes_each_line_on_and_fails_with_the_last_ones():
    lines = []
    script = "import sys; print('step 1/2'); print('step 2/2'); sys.exit(3)"
    build = AssetBuild([sys.executable, "-c", script], lines.append)
    with pytest.raises(CommandFailed, match=r"exit code 3\): step 1/2 \| step 2/2"):
        build.run()
    assert lines == ["step 1/2", "step 2/2"]


def test_a_build_past_its_limit_is_killed():
    script = "import time; print('started', flush=True); time.sleep(60)"
    build = AssetBuild([sys.executable, "-c", script], lambda _: None, timeout_s=1)
    with pytest.raises(CommandFailed, match="ran past its limit"):
        build.run()


def test_a_stopped_build_does_not_start():
    build = AssetBuild([sys.executable, "-c", "print(1)"], lambda _: None)
    build.stop()
    with pytest.raises(CommandFailed, match="stopped before it started"):
        build.run()


# ---------------------------------------------------------------- for real: notebooks and a model build

MODEL_LAB_PY = """\
# %% [markdown] tags=["zh"]
# 需要课程模型

# %% [markdown] tags=["en"]
# Needs the course model

# %% tags=["parameters"]
PROFILE = "smoke"
SEED = 0

# %%
from rocmlab.assets import tiny_model
assert tiny_model.read_valid_manifest(tiny_model.model_dir(steps=2)), "the course model is not built yet"
"""


@pytest.mark.slow
def test_for_real_the_free_lab_runs_during_the_build_and_the_model_lab_after_it(make_course, tmp_path, monkeypatch):
    import io

    from conftest import GOOD_TOML

    from rocmlab.course.catalog import discover

    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "cache"))
    needing = GOOD_TOML.format(id="02-model").replace("params = { SCALE = 2 }\n", "") + (
        "requires = { course_model = true }\n"
    )
    root = make_course({"01-free": (None, None), "02-model": (needing, MODEL_LAB_PY)})
    stream = io.StringIO()
    command = [sys.executable, "-m", "rocmlab", "assets", "build-model", "--steps", "2"]
    build = AssetBuild(command, lambda line: stream.write(f"model line: {line}\n"))
    target = run.local_target()
    records = run.run_labs(
        root, discover(root), "smoke", target, tmp_path / "out", jobs=2, builds={MODEL_KEY: build}, stream=stream
    )
    text = stream.getvalue()
    assert [(r.lab, r.status) for r in records] == [("01-free", "passed"), ("02-model", "passed")], text
    assert text.index("start   01-free") < text.index("ready   model tiny-qwen-zh") < text.index("start   02-model")
    assert "model line: building tiny-qwen-zh" in text and ", ETA " in text


def test_labs_start_longest_first_by_their_last_record_and_unknown_ones_before_all(tmp_path):
    from rocmlab.execution.results import Record, write_record

    labs = [SimpleNamespace(id=f"0{n}-lab") for n in range(1, 6)]
    last = {"01-lab": ("smoke", 17.0), "02-lab": ("smoke", 161.0), "03-lab": ("gpu", 900.0), "05-lab": ("smoke", 84.0)}
    for lab, (profile, seconds) in last.items():
        write_record(
            Record(lab, "1.0.0", profile, "local", "passed", "2026-12-02T18:33:20+00:00", duration_s=seconds),
            tmp_path / f"{lab}.json",
        )
    (tmp_path / "04-lab.json").write_text("{not json")  # unreadable: its time is unknown
    order = run.longest_first(labs, "smoke", tmp_path)
    # 03's record is of another profile and 04's is unreadable: both unknown, first, in lab order
    assert [lab.id for lab in order] == ["03-lab", "04-lab", "02-lab", "05-lab", "01-lab"]
    assert [lab.id for lab in run.longest_first(labs, "smoke", tmp_path / "none")] == [lab.id for lab in labs]


def test_with_the_model_ready_the_labs_that_need_it_are_not_held_behind_the_others(monkeypatch, tmp_path):
    from rocmlab.execution.results import Record, write_record

    started = []
    monkeypatch.setattr(run, "asset_builds", lambda *_: {})
    monkeypatch.setattr(
        run,
        "run_lab",
        lambda *a, **k: (started.append(a[1].id), (SimpleNamespace(lab=a[1].id, status="passed"), None))[1],
    )
    for lab, seconds in (("01-free", 10.0), ("02-model", 120.0)):
        record = Record(lab, "1.0.0", "smoke", "local", "passed", "2026-12-02T18:33:20+00:00", duration_s=seconds)
        write_record(record, tmp_path / "local" / f"{lab}.json")
    labs = [fake_lab("01-free", False), fake_lab("02-model", True)]
    records = run.run_labs(
        tmp_path, labs, "smoke", run.Target("local", sys.executable, Fingerprint()), tmp_path, jobs=1
    )
    assert started == ["02-model", "01-free"]
    assert [r.lab for r in records] == ["01-free", "02-model"]
