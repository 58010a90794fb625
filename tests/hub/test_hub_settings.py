"""One settings object (rocmlab.hub.settings) for `rocmlab hub`, the JupyterHub config and the live
service: the group variables are honoured by the CLI (issue 49: `rocmlab hub` ignored them and
failed with "Unix group 'instructors' does not exist")."""

from __future__ import annotations

import pytest
from labsource import REPO

from rocmlab.course.course import Course
from rocmlab.hub import command
from rocmlab.hub.settings import HubGroups
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
    monkeypatch.delenv("ROCMLAB_LIVE_WORKERS")
    assert not [s for s in hub_config(monkeypatch, tmp_path).JupyterHub.services if "worker" in s["name"]]
