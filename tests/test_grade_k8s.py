"""The Kubernetes manifests that grade a class in shards (env/jupyterhub/helm/grade-shards.yaml, an
Indexed Job, and grade-merge.yaml) validate offline against Kubernetes' own schemas
(kubernetes-validate, strict: an unknown field fails), agree with the Helm values and the volume,
and their shell commands give `rocmlab grade` the arguments of N disjoint shards and their merge
(run by sh here with a stand-in `rocmlab` that records its arguments)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rocmlab.cli import make_parser

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (.venv/bin/pip install kubernetes-validate)"
)

ROOT = Path(__file__).resolve().parent.parent
HELM = ROOT / "env" / "jupyterhub" / "helm"
KUBERNETES = "1.33.0"  # backoffLimitPerIndex is GA from 1.33; appArmorProfile from 1.30
VALUES = yaml.safe_load((HELM / "values.yaml").read_text(encoding="utf-8"))
COURSE = VALUES["custom"]["rocmlab"]["courseMountPath"]


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((HELM / name).read_text(encoding="utf-8")) if d]


def job(name: str) -> dict:
    return next(d for d in documents(name) if d["kind"] == "Job")


def container(manifest: dict) -> dict:
    (only,) = manifest["spec"]["template"]["spec"]["containers"]
    return only


def env(manifest: dict) -> dict:
    return {var["name"]: var["value"] for var in container(manifest)["env"]}


def validation_errors(resource: dict) -> list[str]:
    try:
        kubernetes_validate.validate(resource, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(map(str, exc.path))}: {exc.message}"]
    return []


SHARDS, MERGE = job("grade-shards.yaml"), job("grade-merge.yaml")


@pytest.mark.parametrize("name", ["grade-shards.yaml", "grade-merge.yaml", "live.yaml"])
def test_every_resource_validates_against_the_kubernetes_schema(name):
    for resource in documents(name):
        assert validation_errors(resource) == [], f"{name}: {resource['kind']} {resource['metadata']['name']}"


@pytest.mark.parametrize(
    "path, key",
    [(("spec",), "completion_mode"), (("spec", "template", "spec"), "restart_policy"), ((), "metdata")],
)
def test_the_strict_check_catches_a_misspelt_field(path, key):
    broken = copy.deepcopy(SHARDS)
    node = broken
    for step in path:
        node = node[step]
    node[key] = "x"
    assert validation_errors(broken), key


def test_the_check_catches_a_wrong_type():
    broken = copy.deepcopy(SHARDS)
    broken["spec"]["completions"] = "four"
    assert validation_errors(broken)


def test_an_indexed_job_of_one_pod_per_shard():
    spec = SHARDS["spec"]
    shards = int(env(SHARDS)["SHARDS"])
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == shards > 1
    assert env(MERGE)["SHARDS"] == env(SHARDS)["SHARDS"] and env(MERGE)["LAB"] == env(SHARDS)["LAB"]
    assert (ROOT / "solutions" / env(SHARDS)["LAB"] / "lab.toml").is_file()
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] > 0


def cpus(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if str(quantity).endswith("m") else float(quantity)


@pytest.mark.parametrize("manifest", [SHARDS, MERGE], ids=["shards", "merge"])
def test_resource_limits_and_the_course_image_and_volume(manifest):
    resources = container(manifest)["resources"]
    assert {"cpu", "memory"} <= set(resources["limits"]) and {"cpu", "memory"} <= set(resources["requests"])
    assert cpus(resources["requests"]["cpu"]) <= cpus(resources["limits"]["cpu"])
    image = VALUES["singleuser"]["image"]
    assert container(manifest)["image"] == f"{image['name']}:{image['tag']}-instructor"  # holds solutions/
    claim = next(d for d in documents("nbgrader-volume.yaml") if d["kind"] == "PersistentVolumeClaim")
    volumes = {v["name"]: v for v in manifest["spec"]["template"]["spec"]["volumes"]}
    mount = next(m for m in container(manifest)["volumeMounts"] if m.get("subPath") == "course")
    assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert mount["mountPath"] == COURSE
    assert manifest["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_each_shard_executes_no_more_at_once_than_its_cpus():
    assert int(env(SHARDS)["JOBS"]) <= cpus(container(SHARDS)["resources"]["limits"]["cpu"])


def test_the_grader_pods_are_offline():
    policy = next(d for d in documents("grade-shards.yaml") if d["kind"] == "NetworkPolicy")
    labels = SHARDS["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in policy["spec"] and "egress" not in policy["spec"]


def run_command(manifest: dict, tmp_path: Path, extra_env: dict) -> list[str]:
    """Run the container's `sh -c` script with the course folder in tmp and a stand-in rocmlab;
    returns the arguments rocmlab got."""
    command = container(manifest)["command"]
    assert command[:2] == ["sh", "-c"]
    course = tmp_path / "course"
    script = command[2].replace(COURSE, str(course))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    record = tmp_path / "argv.json"
    stand_in = bin_dir / "rocmlab"
    stand_in.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"json.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
        "args = sys.argv[1:]\n"
        "if '--out' in args and 'merge' not in args:\n"
        "    import pathlib; pathlib.Path(args[args.index('--out') + 1]).mkdir(parents=True)\n",
        encoding="utf-8",
    )
    stand_in.chmod(0o755)
    (bin_dir / "chown").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")  # the pod runs as root
    (bin_dir / "chown").chmod(0o755)
    variables = {**env(manifest), **extra_env, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["sh", "-c", script], env=variables, check=True, timeout=30)
    return json.loads(record.read_text(encoding="utf-8"))


def test_the_shards_and_the_merge_get_matching_arguments(tmp_path):
    shards, outs = int(env(SHARDS)["SHARDS"]), []
    for index in range(shards):
        argv = run_command(SHARDS, tmp_path, {"JOB_COMPLETION_INDEX": str(index)})
        options = vars(make_parser(argv).parse_args(argv))
        assert options["command"] == "grade" and options["lab"] == env(SHARDS)["LAB"]
        assert options["shard"] == f"{index + 1}/{shards}"
        assert options["submissions"] == str(tmp_path / "course")
        assert options["jobs"] == int(env(SHARDS)["JOBS"])
        assert options["gradebook"].startswith("sqlite:////scratch/")  # scratch, on the pod's own disk
        assert Path(options["out"]).is_dir()  # made anew by the stand-in after the script's rm -rf
        outs.append(options["out"])
    assert len(set(outs)) == shards
    argv = run_command(MERGE, tmp_path, {})
    options = vars(make_parser(argv).parse_args(argv))
    assert options["command"] == "grade" and options["lab"] == "merge"
    assert options["shard_outputs"] == outs
    assert options["out"] == str(tmp_path / "course" / "grades" / env(MERGE)["LAB"])
    assert options["out"] not in outs
    assert options["feedback_to"] == str(tmp_path / "course")  # staged for nbgrader release_feedback


# ------------------------------------------------------------------ the live workshop (live.yaml)


def live(kind: str, name: str) -> dict:
    return next(d for d in documents("live.yaml") if d["kind"] == kind and d["metadata"]["name"] == name)


def test_the_live_service_is_the_queues_one_writer_on_a_volume_of_its_own():
    service = live("Deployment", "rocmlab-live")
    assert service["spec"]["replicas"] == 1 and service["spec"]["strategy"]["type"] == "Recreate"
    variables = {v["name"]: v for v in container(service)["env"]}
    queue_folder = variables["ROCMLAB_LIVE_DB"]["value"].rsplit("/", 1)[0]
    mounts = {m["mountPath"]: m for m in container(service)["volumeMounts"]}
    volumes = {v["name"]: v for v in service["spec"]["template"]["spec"]["volumes"]}
    claim = volumes[mounts[queue_folder]["name"]]["persistentVolumeClaim"]["claimName"]
    assert live("PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadWriteOnce"]
    exchange = mounts[variables["ROCMLAB_LIVE_EXCHANGE"]["value"]]
    assert exchange["readOnly"] is True and exchange["subPath"] == "exchange"
    token = variables["JUPYTERHUB_API_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token == {"name": "hub", "key": "hub.services.rocmlab-live.apiToken"}  # the chart's generated token
    assert VALUES["hub"]["services"]["rocmlab-live"]["url"] == "http://rocmlab-live:10101"
    port = live("Service", "rocmlab-live")["spec"]["ports"][0]["port"]
    assert VALUES["singleuser"]["extraEnv"]["ROCMLAB_LIVE_URL"] == f"http://rocmlab-live:{port}/services/rocmlab-live/"


def test_live_workers_scale_by_replicas_and_use_the_services_api_with_the_worker_token():
    workers = live("Deployment", "rocmlab-live-worker")
    assert workers["spec"]["replicas"] >= 1
    command = container(workers)["command"]
    assert command[0] == "rocmlab"
    options = vars(make_parser(command[1:]).parse_args(command[1:]))
    assert options["command"] == "live" and options["action"] == "worker" and options["queue"] is None
    assert options["service"].startswith("http://rocmlab-live:10101/services/rocmlab-live/")
    token = next(v for v in container(workers)["env"] if v["name"] == "ROCMLAB_LIVE_WORKER_TOKEN")
    service_token = next(v for v in container(live("Deployment", "rocmlab-live"))["env"] if v["name"] == token["name"])
    assert token["valueFrom"] == service_token["valueFrom"]  # the same Secret on both sides
    assert workers["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert workers["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 30


def test_live_workers_reach_only_the_live_service_and_dns():
    policy = live("NetworkPolicy", "rocmlab-live-worker")["spec"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"} and "ingress" not in policy
    targets = [rule.get("to") for rule in policy["egress"]]
    assert targets[0] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "rocmlab-live"}}}]
    assert targets[1] is None and {p["port"] for p in policy["egress"][1]["ports"]} == {53}
