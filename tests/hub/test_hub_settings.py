"""One settings object (rocmlab.hub.settings) for `rocmlab hub`, the JupyterHub config and the live
service: the group variables are honoured by the CLI (issue 49: `rocmlab hub` ignored them and
failed with "Unix group 'instructors' does not exist")."""

from __future__ import annotations

import pytest

from rocmlab.hub import command
from rocmlab.hub.live_handlers import LiveSettings
from rocmlab.hub.settings import HubGroups


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
        command.main(data_dir=str(tmp_path))
    assert (seen["learner_group"], seen["instructor_group"]) == ("class2026", "teachers")


def test_the_service_and_the_cli_read_the_same_groups():
    env = {"ROCMLAB_HUB_INSTRUCTOR_GROUP": "teachers", "ROCMLAB_LIVE_DB": "/q", "ROCMLAB_LIVE_EXCHANGE": "/x"}
    assert LiveSettings.from_environment(env).instructor_group == HubGroups.from_environment(env).instructor
    assert HubGroups.from_environment({}) == HubGroups("rocmlab", "instructors")
    assert HubGroups.from_environment({"ROCMLAB_HUB_LEARNER_GROUP": "  "}).learner == "rocmlab"
    assert HubGroups("a", "b").environment() == {"ROCMLAB_HUB_LEARNER_GROUP": "a", "ROCMLAB_HUB_INSTRUCTOR_GROUP": "b"}
