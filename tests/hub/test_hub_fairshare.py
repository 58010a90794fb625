"""Fair share on a workshop server: the GPU policy of the hub's spawners."""

from __future__ import annotations

import pytest
from test_hub import demo_spawner, hub_config

from rocmlab.hub import spawner as rocmlab_spawner


def test_spread_gives_each_new_server_the_least_used_gpu():
    assigned = {}
    picks = [rocmlab_spawner.spread_gpu(assigned, name, 3) for name in ("a", "b", "c", "d", "e")]
    assert picks == [0, 1, 2, 0, 1]
    assert rocmlab_spawner.spread_gpu(assigned, "b", 3) == 1  # a running server keeps its GPU
    del assigned["a"], assigned["d"]  # both servers on GPU 0 stopped
    assert rocmlab_spawner.spread_gpu(assigned, "f", 3) == 0


def test_the_driver_topology_counts_gpus_not_cpus(tmp_path):
    for node, gpu_id in (("0", "0"), ("1", "48213"), ("2", "12345")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "gpu_id").write_text(gpu_id + "\n")
    assert rocmlab_spawner.kfd_gpu_count(tmp_path) == 2
    assert rocmlab_spawner.kfd_gpu_count(tmp_path / "missing") == 0


def test_the_spread_policy_sets_one_visible_gpu_per_server(tmp_path, monkeypatch):
    monkeypatch.setattr(rocmlab_spawner.CourseSpawner, "_gpu_of", {})
    envs = [
        demo_spawner(tmp_path, name, gpu_policy="spread", gpu_count=2).course_env() for name in ("ann", "bob", "cy")
    ]
    assert [env["ROCR_VISIBLE_DEVICES"] for env in envs] == ["0", "1", "0"]
    assert "ROCR_VISIBLE_DEVICES" not in demo_spawner(tmp_path, "dee").course_env()  # shared: all GPUs


def test_the_config_reads_the_gpu_policy(monkeypatch, tmp_path):
    c = hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_GPU_POLICY="spread", ROCMLAB_HUB_GPUS=4)
    assert (c.CourseSpawner.gpu_policy, c.CourseSpawner.gpu_count) == ("spread", 4)
    assert hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_GPU_POLICY="shared").CourseSpawner.gpu_policy == "shared"
    with pytest.raises(ValueError, match="expected shared, spread or slices"):
        hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_GPU_POLICY="round-robin")
