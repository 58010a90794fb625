"""The typed machine fingerprint (rocmlab.execution.fingerprint), its schema and its views."""

import dataclasses
import json

import pytest

from rocmlab.execution import fingerprint as fp
from rocmlab.execution.fingerprint import FACTS, Fingerprint
from rocmlab.execution.results import read_record
from rocmlab.schemas import schema

# The head of one processor's block of /proc/cpuinfo on an x86 host, as Linux's
# arch/x86/kernel/cpu/proc.c (show_cpuinfo) prints it: "key\t: value", tabs padding the key.
CPUINFO = (
    "processor\t: 0\n"
    "vendor_id\t: AuthenticAMD\n"
    "cpu family\t: 25\n"
    "model\t\t: 17\n"
    "model name\t: AMD EPYC 9654 96-Core Processor\n"
    "stepping\t: 1\n"
    "\n"
    "processor\t: 1\n"
    "vendor_id\t: AuthenticAMD\n"
    "model name\t: AMD EPYC 9654 96-Core Processor\n"
)


def test_the_schema_describes_every_fact_and_no_other():
    """A fact added to Fingerprint (or to its schema) alone fails here."""
    fingerprint_schema = schema("fingerprint")
    assert set(fingerprint_schema["properties"]) == {f.name for f in dataclasses.fields(Fingerprint)}
    assert fingerprint_schema["additionalProperties"] is False and "required" not in fingerprint_schema


def test_every_fact_declares_its_label_and_whether_it_is_machine_specific():
    labels = [f.metadata["label"] for f in dataclasses.fields(Fingerprint)]
    assert all(labels) and len(set(labels)) == len(labels)
    assert all(isinstance(f.metadata["machine_specific"], bool) for f in dataclasses.fields(Fingerprint))
    assert {f.name for f in FACTS} >= {"python", "os", "cpu_model", "gpus", "rocm"}


def test_the_cpu_model_is_the_first_model_name_of_proc_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    assert fp.cpu_model(cpuinfo) == "AMD EPYC 9654 96-Core Processor"
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")  # no model name line: not known
    assert fp.cpu_model(cpuinfo) is None
    assert fp.cpu_model(tmp_path / "missing") is None


def test_the_cpu_is_recorded_shown_and_left_out_of_committed_views(monkeypatch):
    monkeypatch.setattr(fp, "cpu_model", lambda: "AMD EPYC 9654 96-Core Processor")
    here = fp.fingerprint()
    assert here.cpu_model == "AMD EPYC 9654 96-Core Processor"
    assert Fingerprint.from_data(json.loads(json.dumps(here.to_data()))) == here
    assert here.facts()["CPU"] == "AMD EPYC 9654 96-Core Processor"
    assert "CPU" not in here.facts(committed=True)


def test_committed_facts_are_those_no_machine_of_the_same_pins_would_change():
    one = Fingerprint(
        python="3.12.3",
        kernel="6.8.0-45-generic",
        cpu_model="AMD EPYC 9654",
        packages={"torch": "2.9.1+rocm7.1", "peft": None},
        gpus=[{"name": "AMD Instinct MI300X", "arch": "gfx942", "memory_gb": 192.0}],
        rocm="7.1.1",
        rocm_system="7.1.0",
    )
    other = dataclasses.replace(one, kernel="6.14.0-1", cpu_model="Intel Xeon", gpus=[], rocm_system=None)
    assert one.facts(committed=True) == other.facts(committed=True)
    assert one.facts(committed=True) == {"Python": "3.12.3", "packages": "torch 2.9.1+rocm7.1", "ROCm": "7.1.1"}
    assert one.facts()["GPUs"] == "AMD Instinct MI300X (gfx942)" and one.facts()["kernel"] == "6.8.0-45-generic"


def test_the_whole_freeze_is_never_listed_as_a_fact():
    here = Fingerprint(freeze=["numpy==2.4.6"], freeze_sha256=fp.freeze_hash(["numpy==2.4.6"]))
    assert here.facts() == {}


def test_fingerprint_names_the_stack_and_holds_the_whole_freeze():
    here = fp.fingerprint()
    assert here.python.count(".") == 2
    assert {"torch", "transformers", "peft", "nbgrader", "papermill"} <= set(here.packages)
    assert here.hip is None or isinstance(here.hip, str)
    assert here.freeze == sorted(here.freeze) and any(line.startswith("papermill==") for line in here.freeze)
    assert here.freeze_sha256 == fp.freeze_hash(here.freeze)


def test_fingerprint_names_the_container_image_ci_ran(monkeypatch):
    monkeypatch.setenv("ROCMLAB_IMAGE", "rocmlab:rocm-10.0")
    monkeypatch.setenv("ROCMLAB_IMAGE_DIGEST", "sha256:" + "ab" * 32)
    here = fp.fingerprint()
    assert here.image == "rocmlab:rocm-10.0" and here.image_digest == "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cpu": "x"}, "unknown field cpu (allowed: cpu_model, cuda,"),
        ({"gpus": "gfx942"}, "field gpus: expected a list of GPUs {name, arch, memory_gb}, got 'gfx942'"),
        ({"gpus": [{"arch": "gfx942", "vram": 1}]}, "unknown field gpus.0.vram"),
        ({"freeze_sha256": "abc"}, "field freeze_sha256: expected a sha256 hex digest or null"),
        ({"packages": {"torch": 2}}, "field packages.torch: expected an object of package → version or null"),
    ],
)
def test_a_fingerprint_that_is_not_one_is_refused_naming_the_field(data, message):
    with pytest.raises(ValueError, match="^where: ") as err:
        Fingerprint.from_data(data, "where")
    assert message in str(err.value)


def test_a_record_whose_fingerprint_has_an_unknown_fact_is_refused_naming_file_and_field(tmp_path):
    path = tmp_path / "r.json"
    record = {
        "schema": 1,
        "lab": "01-demo",
        "lab_version": "1.0.0",
        "profile": "smoke",
        "env": "local",
        "status": "passed",
        "started_at": "2026-11-01T10:00:00+00:00",
        "fingerprint": {"python": "3.11.7", "gpu_arch": "gfx942"},
    }
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError) as err:
        read_record(path)
    assert str(err.value).startswith(f"{path}: unknown field fingerprint.gpu_arch (allowed: cpu_model,")


def test_python_m_fingerprint_prints_this_interpreter_s_fingerprint_as_json(capsys):
    assert fp.main() == 0
    printed = Fingerprint.from_data(json.loads(capsys.readouterr().out))
    assert printed.python == fp.fingerprint().python and printed.freeze_sha256 == fp.freeze_hash(printed.freeze)


def interpreter(tmp_path, output: dict):
    """A stand-in for an environment's python that prints ``output`` for `-m rocmlab.execution.fingerprint`."""
    import stat

    tmp_path.mkdir()
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\ncat <<'JSON'\n{json.dumps(output)}\nJSON\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_an_environment_s_fingerprint_is_read_against_the_schema(tmp_path, monkeypatch):
    """`rocmlab run --env NAME` asks the environment's interpreter (`python -m rocmlab.execution.fingerprint`)."""
    from rocmlab.errors import CommandFailed
    from rocmlab.execution import run
    from rocmlab.freshness import environments

    good = interpreter(tmp_path / "good", {"python": "3.12.3", "cpu_model": "AMD EPYC 9654", "gpus": []})
    monkeypatch.setattr(environments, "python_for", lambda name, root=None: good)
    assert run.env_target("cpu-current").fingerprint == Fingerprint(python="3.12.3", cpu_model="AMD EPYC 9654")
    liar = interpreter(tmp_path / "liar", {"python": "3.12.3", "gpu": "gfx942"})
    monkeypatch.setattr(environments, "python_for", lambda name, root=None: liar)
    with pytest.raises(
        CommandFailed, match=r"environment 'cpu-current': its fingerprint is not one: .*unknown field gpu"
    ):
        run.env_target("cpu-current")
