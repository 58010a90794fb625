"""The ROCm version, one probe for the fingerprint and `rocmlab doctor` (rocmlab.probes.rocm_versions)."""

import pytest

from rocmlab import doctor, probes
from rocmlab.execution.fingerprint import fingerprint


class Box(probes.Machine):
    """A machine made of the few things the ROCm probe reads."""

    def __init__(self, files=None, dirs=None, packages=None, torch=None, commands=None):
        self.files, self.dirs = files or {}, dirs or {}
        self.packages, self.torch, self.commands = packages or {}, torch, commands or {}

    def read_file(self, path):
        return self.files.get(path)

    def list_dir(self, path):
        return self.dirs.get(path)

    def run(self, argv, timeout_s=20):
        out = self.commands.get(" ".join(argv))
        return None if out is None else probes.CommandResult(0, out)

    def env(self):
        return {}

    def torch_info(self):
        return self.torch

    def package_version(self, name):
        return self.packages.get(name)


def test_therock_packages_name_the_exact_release():
    box = Box(packages={"rocm-sdk-core": "7.14.0", "rocm": "7.14.0"}, torch={"version": "2.12.0", "hip": "7.14.25"})
    found = probes.rocm_versions(box)
    assert (found.runtime, found.runtime_source) == ("7.14.0", "rocm-sdk-core package")
    assert found.system is None and found.best == ("7.14.0", "rocm-sdk-core package")


@pytest.mark.parametrize(
    "torch, expected",
    [
        ({"version": "2.10.0+rocm7.2.4", "hip": "7.2.53211"}, ("7.2.4", "torch version label")),
        ({"version": "2.8.0+rocm6.4", "hip": "6.4.43484-123eb5128"}, ("6.4", "torch version label")),
        ({"version": "2.12.0a0+gitabc", "hip": "7.14.60600-1a2b"}, ("7.14", "torch.version.hip")),
        ({"version": "2.13.0+cpu", "hip": None}, (None, "")),
    ],
)
def test_a_wheel_tells_its_rocm_by_its_label_else_by_hip_major_minor(torch, expected):
    found = probes.rocm_versions(Box(torch=torch))
    assert (found.runtime, found.runtime_source) == expected


def test_core_folders_sort_as_versions_so_7_14_is_newer_than_7_2():
    box = Box(dirs={"/opt/rocm": ["bin", "core-7.2", "core-7.14", "core-7.9"]}, files={})
    assert probes.rocm_versions(box).system == "7.14"
    box.files["/opt/rocm/core-7.14/.info/version"] = "7.14.1-42\n"
    assert probes.rocm_versions(box).system == "7.14.1-42"
    assert probes.rocm_versions(Box(files={"/opt/rocm/.info/version": "6.4.4\n"})).system == "6.4.4"


def test_doctor_uses_the_same_probe_and_sees_a_pip_only_therock_install():
    box = Box(packages={"rocm-sdk-core": "10.0.0"}, torch={"version": "2.11.0+rocm10.0.0", "hip": "10.0.1"})
    assert doctor.gather(box).rocm_version == "10.0.0"
    box.files["/opt/rocm/.info/version"] = "7.2.4"
    assert doctor.gather(box).rocm_version == "7.2.4"  # the installed ROCm is what the doctor judges


def test_the_fingerprint_reports_the_rocm_torch_runs_on(monkeypatch):
    monkeypatch.setattr(
        probes.LiveMachine, "package_version", lambda self, name: "7.14.0" if name == "rocm-sdk-core" else None
    )
    info = fingerprint()
    assert (info.rocm, info.rocm_source) == ("7.14.0", "rocm-sdk-core package")
