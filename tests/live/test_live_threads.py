"""A live worker shares the machine's cores among the workers on it, for its kernels' thread pools,
as a batch grade shares them among its slots (issue 49: with two workers on two cores each kernel
had both cores, and lab 07's torch kernels cost a third more CPU than the batch's)."""

import pytest

from rocmlab.hub.settings import SettingsError
from rocmlab.live.worker import share_threads
from rocmlab.sandbox.limits import THREAD_VARIABLES, thread_budget


def test_two_workers_on_two_cores_give_each_kernel_one_thread_as_a_two_slot_batch_does(monkeypatch):
    env = {"ROCMLAB_LIVE_WORKERS": "2"}
    assert share_threads(env, cores=2) == "1"
    assert all(env[name] == "1" for name in THREAD_VARIABLES)
    for name, value in env.items():  # what a grader's sandbox then gives each kernel (it keeps what is set)
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert thread_budget(1) == thread_budget(2) == dict.fromkeys(THREAD_VARIABLES, "1")


def test_without_the_setting_the_share_is_the_hubs_default_of_workers():
    env = {}
    assert share_threads(env, cores=16) == "4"  # the hub runs one worker per 4 cores


def test_a_thread_count_the_instructor_set_is_kept():
    env = {"ROCMLAB_LIVE_WORKERS": "8", "OMP_NUM_THREADS": "3"}
    share_threads(env, cores=16)
    assert env["OMP_NUM_THREADS"] == "3" and env["MKL_NUM_THREADS"] == "2"


def test_no_worker_set_means_every_core_and_a_bad_setting_is_refused():
    assert share_threads({"ROCMLAB_LIVE_WORKERS": "0"}, cores=4) == "4"  # workers started by hand: one
    with pytest.raises(SettingsError, match="ROCMLAB_LIVE_WORKERS"):
        share_threads({"ROCMLAB_LIVE_WORKERS": "two"}, cores=4)
