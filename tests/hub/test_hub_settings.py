"""One settings object (rocmlab.hub.settings) for `rocmlab hub`, the JupyterHub config and the live
service: the group variables are honoured by the CLI (issue 49: `rocmlab hub` ignored them and
failed with "Unix group 'instructors' does not exist")."""

from __future__ import annotations

import pytest
from labsource import REPO

from rocmlab.course.course import Course
from rocmlab.hub import command
from rocmlab.hub.settings import CORES_PER_WORKER, HubGroups, LiveWorkers, SettingsError
from rocmlab.live.handlers import LiveSettings


class Stop(Exception):
    pass


def test_rocmlab_hub_takes_the_groups_from_the_environment(monkeypatch, tmp_path):
    seen = {}

    def local_hub(workdir, **options):
        seen.update(options)
        raise Stop

    monkeypatch.setattr(command, "LocalHub", local_hub)
    monkeypatch.setenv("ROCMLAB_HUB_LEARNER_GROUP", "class2026")
    monkeypatch.setenv("ROCMLAB_HUB_INSTRUCTOR_GROUP", "teachers")
    with pytest.raises(Stop):
        command.main(data_dir=str(tmp_path), course=Course(REPO))
    assert (seen["learner_group"], seen["instructor_group"]) == ("class2026", "teachers")


def test_the_service_and_the_cli_read_the_same_groups():
    env = {"ROCMLAB_HUB_INSTRUCTOR_GROUP": "teachers", "ROCMLAB_LIVE_DB": "/q", "ROCMLAB_LIVE_EXCHANGE": "/x"}
    assert LiveSettings.from_environment(env).instructor_group == HubGroups.from_environment(env).instructor
    assert HubGroups.from_environment({}) == HubGroups("rocmlab", "instructors")
    assert HubGroups.from_environment({"ROCMLAB_HUB_LEARNER_GROUP": "  "}).learner == "rocmlab"
    assert HubGroups("a", "b").environment() == {"ROCMLAB_HUB_LEARNER_GROUP": "a", "ROCMLAB_HUB_INSTRUCTOR_GROUP": "b"}


def test_the_hub_runs_grading_workers_with_the_courses_environment(monkeypatch, tmp_path):
    """Workers are part of the hub when asked: managed services (JupyterHub restarts one that
    exits), given the model cache that `sudo rocmlab live worker` dropped (issue 49)."""
    from test_hub import hub_config

    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "cache"))
    c = hub_config(monkeypatch, tmp_path, ROCMLAB_LIVE_WORKERS="2", ROCMLAB_HUB_LABS="01-rocm-setup,07-triton-kernels")
    workers = [s for s in c.JupyterHub.services if s["name"].startswith("rocmlab-live-worker-")]
    assert [w["name"] for w in workers] == ["rocmlab-live-worker-1", "rocmlab-live-worker-2"]
    command = workers[0]["command"]
    assert command[command.index("--labs") + 1] == "01-rocm-setup,07-triton-kernels"
    assert command[command.index("--queue") + 1] == str(tmp_path / "data" / "live" / "queue.sqlite")
    assert workers[0]["environment"]["ROCMLAB_CACHE"] == str(tmp_path / "cache") and "url" not in workers[0]
    assert command[command.index("--profile") + 1] == "smoke"
    service = next(s for s in c.JupyterHub.services if s["name"] == "rocmlab-live")
    assert service["environment"]["ROCMLAB_LIVE_WORKERS"] == "2"  # the instructor's page warns at 0


def test_the_hubs_workers_grade_with_the_profile_of_the_delivered_notebooks(monkeypatch, tmp_path):
    """`rocmlab hub --profile gpu` delivers the gpu profile's notebooks: its workers grade them with
    that profile's parameters and limits, not the smoke profile's (rocmlab live worker's default)."""
    from test_hub import hub_config

    from rocmlab.hub.launch import hub_environment

    env = hub_environment(tmp_path, tmp_path, demo=True, port=8000, proxy=tmp_path / "proxy", profile="gpu")
    assert env["ROCMLAB_HUB_LABS_PROFILE"] == "gpu"
    c = hub_config(monkeypatch, tmp_path, ROCMLAB_LIVE_WORKERS="1", ROCMLAB_HUB_LABS_PROFILE="gpu")
    (worker,) = [s for s in c.JupyterHub.services if s["name"] == "rocmlab-live-worker-1"]
    assert worker["command"][worker["command"].index("--profile") + 1] == "gpu"


def workers_in(c) -> list[str]:
    return [s["name"] for s in c.JupyterHub.services if s["name"].startswith("rocmlab-live-worker-")]


def test_unset_the_hub_runs_one_worker_per_four_cores_and_says_so(monkeypatch, tmp_path, capsys):
    """Issue 49: workers are part of the hub by default (they were 0 unless asked for)."""
    from test_hub import hub_config

    from rocmlab.hub import settings

    monkeypatch.delenv("ROCMLAB_LIVE_WORKERS", raising=False)  # tests/conftest.py sets 0 for test hubs
    monkeypatch.setattr(settings, "usable_cores", lambda: 16)
    c = hub_config(monkeypatch, tmp_path)
    assert workers_in(c) == [f"rocmlab-live-worker-{n}" for n in range(1, 16 // CORES_PER_WORKER + 1)]
    assert "live grading: 4 worker(s) run by the hub (one per 4 cores, ROCMLAB_LIVE_WORKERS unset)" in (
        capsys.readouterr().err
    )
    monkeypatch.setattr(settings, "usable_cores", lambda: 2)  # the smallest machine still grades
    assert workers_in(hub_config(monkeypatch, tmp_path)) == ["rocmlab-live-worker-1"]


def test_zero_workers_is_no_workers_with_a_warning_at_start(monkeypatch, tmp_path, capsys):
    from test_hub import hub_config

    c = hub_config(monkeypatch, tmp_path, ROCMLAB_LIVE_WORKERS="0")
    assert workers_in(c) == []
    service = next(s for s in c.JupyterHub.services if s["name"] == "rocmlab-live")
    assert service["environment"]["ROCMLAB_LIVE_WORKERS"] == "0"
    assert "ROCMLAB_LIVE_WORKERS=0: the hub runs no grading workers" in capsys.readouterr().err  # the hub's log


def test_the_worker_count_is_read_once_and_refused_when_it_is_not_a_count():
    assert LiveWorkers.from_environment({}, cores=1) == LiveWorkers(1, chosen_by_default=True)
    assert LiveWorkers.from_environment({}, cores=7).count == 1
    assert LiveWorkers.from_environment({}, cores=8).count == 2
    assert LiveWorkers.from_environment({"ROCMLAB_LIVE_WORKERS": " 3 "}, cores=64) == LiveWorkers(3, False)
    assert LiveWorkers(3, False).warning() == ""
    assert "unset ROCMLAB_LIVE_WORKERS" in LiveWorkers.from_environment({"ROCMLAB_LIVE_WORKERS": "0"}).warning()
    for bad in ("-1", "two", "1.5"):
        with pytest.raises(SettingsError, match=f"ROCMLAB_LIVE_WORKERS='{bad}': expected a whole number"):
            LiveWorkers.from_environment({"ROCMLAB_LIVE_WORKERS": bad})


def test_rocmlab_hub_refuses_a_bad_worker_count_before_anything_starts(monkeypatch, tmp_path):
    monkeypatch.setattr(command, "LocalHub", lambda *a, **k: pytest.fail("started"))
    monkeypatch.setenv("ROCMLAB_LIVE_WORKERS", "many")
    with pytest.raises(SettingsError, match="ROCMLAB_LIVE_WORKERS='many'"):
        command.main(data_dir=str(tmp_path), course=Course(REPO))


@pytest.mark.parametrize(("value", "said"), [("0", "the hub runs no grading workers"), ("3", "3 worker(s)")])
def test_rocmlab_hub_says_at_start_how_many_workers_it_runs(monkeypatch, tmp_path, capsys, value, said):
    from types import SimpleNamespace

    def stop(*_):
        raise Stop

    monkeypatch.setattr(command, "LocalHub", lambda *a, **k: SimpleNamespace(root=tmp_path, labs=(), url=""))
    monkeypatch.setattr(command, "rule_warning", stop)  # the next thing `rocmlab hub` says, before it starts
    monkeypatch.setenv("ROCMLAB_LIVE_WORKERS", value)
    with pytest.raises(Stop):
        command.main(data_dir=str(tmp_path), course=Course(REPO))
    assert said in capsys.readouterr().err
