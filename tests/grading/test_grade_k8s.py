"""The Kubernetes manifests that grade a class in shards (env/jupyterhub/helm/grade-shards.yaml, an
Indexed Job, and grade-merge.yaml) validate offline against Kubernetes' own schemas
(kubernetes-validate, strict: an unknown field fails), agree with the Helm values and the volume,
and their shell commands give `rocmlab grade` the arguments of N disjoint shards and their merge
(run by sh here with a stand-in `rocmlab` that records its arguments)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rocmlab.cli import make_parser

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (.venv/bin/pip install kubernetes-validate)"
)

ROOT = Path(__file__).resolve().parents[2]
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
    return {var["name"]: var["value"] for var in container(manifest)["env"] if "value" in var}


def pod_containers(manifest: dict) -> list[dict]:
    spec = manifest["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


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


def subpath(mount: dict, variables: dict) -> str:
    """The folder of the volume a mount shows: subPath, or subPathExpr with its $(VAR) expanded."""
    if "subPathExpr" in mount:
        return re.sub(r"\$\((\w+)\)", lambda m: variables[m.group(1)], mount["subPathExpr"])
    return mount.get("subPath", "")


def run_container(manifest: dict, box: dict, tmp_path: Path, extra_env: dict) -> None:
    """Run a container's `sh -c` script with each mount (every volume a folder of tmp_path) and a
    stand-in rocmlab that records its arguments in tmp_path/argv.json."""
    command = box["command"]
    assert command[:2] == ["sh", "-c"]
    variables = {**{v["name"]: v["value"] for v in box["env"] if "value" in v}, **extra_env}
    folders = {
        m["mountPath"]: str(tmp_path / "volumes" / m["name"] / subpath(m, variables)) for m in box["volumeMounts"]
    }
    longest_first = sorted(folders, key=len, reverse=True)
    mounted = re.compile(r"(?<![\w/])(" + "|".join(map(re.escape, longest_first)) + r")(?![\w-])")

    def on_disk(text: str) -> str:  # one pass: a folder made for one mount is not read as another
        return mounted.sub(lambda m: folders[m.group(1)], text)

    script = on_disk(command[2])
    variables = {name: on_disk(value) for name, value in variables.items()}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stand_in = bin_dir / "rocmlab"
    stand_in.write_text(
        f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(tmp_path / 'argv.json')!r}, 'w'))\n",
        encoding="utf-8",
    )
    stand_in.chmod(0o755)
    subprocess.run(["sh", "-c", script], env={**variables, "PATH": f"{bin_dir}:/usr/bin:/bin"}, check=True, timeout=30)


def run_pod(manifest: dict, tmp_path: Path, extra_env: dict) -> list[str]:
    """Every container of the pod in order, the init containers first; the arguments rocmlab got."""
    for box in pod_containers(manifest):
        run_container(manifest, box, tmp_path, extra_env)
    return json.loads((tmp_path / "argv.json").read_text(encoding="utf-8"))


def test_the_shards_and_the_merge_get_matching_arguments(tmp_path):
    shards, outs = int(env(SHARDS)["SHARDS"]), []
    volume = tmp_path / "volumes" / "nbgrader"
    grades = volume / "course" / "grades" / env(SHARDS)["LAB"]
    (grades / "shards" / "1").mkdir(parents=True)
    (grades / "shards" / "1" / "from-an-earlier-run").write_text("x")
    for index in range(shards):
        argv = run_pod(SHARDS, tmp_path, {"SHARD_INDEX": str(index)})
        options = vars(make_parser(argv).parse_args(argv))
        assert options["command"] == "grade" and options["lab"] == env(SHARDS)["LAB"]
        assert options["shard"] == f"{index + 1}/{shards}"
        assert options["submissions"] == str(volume / "course")
        assert options["jobs"] == int(env(SHARDS)["JOBS"])
        assert options["gradebook"].startswith("sqlite:////scratch/")  # scratch, on the pod's own disk
        assert options["out"] == str(grades / "shards" / str(index))  # the shard's own mount
        assert Path(options["out"]).is_dir() and not list(
            Path(options["out"]).iterdir()
        )  # emptied by the init container
        outs.append(options["out"])
    assert len(set(outs)) == shards
    argv = run_pod(MERGE, tmp_path, {})
    options = vars(make_parser(argv).parse_args(argv))
    assert options["command"] == "grade" and options["lab"] == "merge"
    assert options["shard_outputs"] == outs
    assert options["out"] == str(grades)
    assert options["out"] not in outs
    assert options["feedback_to"] == str(volume / "course")  # staged for nbgrader release_feedback


@pytest.mark.parametrize("manifest", [SHARDS, MERGE], ids=["shards", "merge"])
def test_the_grading_pods_run_without_root_capabilities_or_a_writable_image(manifest):
    pod = manifest["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["appArmorProfile"] == {"type": "RuntimeDefault"}
    assert "hostUsers" not in pod or pod["hostUsers"] is False
    for box in pod_containers(manifest):
        context = box["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False, box["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, box["name"]
        assert context["readOnlyRootFilesystem"] is True, box["name"]
        assert not {"runAsUser", "seccompProfile", "appArmorProfile"} & set(context), box["name"]  # the pod's hold


def test_learner_code_can_write_only_its_shards_own_output_of_the_course_volume():
    """The grade container, where learner code runs, mounts the course read-only and, writable,
    only course/grades/<LAB>/shards/<its index>; the index is the Job's own annotation."""
    grade = container(SHARDS)
    writable = [m for m in grade["volumeMounts"] if m["name"] == "nbgrader" and not m.get("readOnly")]
    assert [m["subPathExpr"] for m in writable] == ["course/grades/$(LAB)/shards/$(SHARD_INDEX)"]
    (index,) = [v for v in grade["env"] if v["name"] == "SHARD_INDEX"]
    annotation = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert index["valueFrom"]["fieldRef"]["fieldPath"] == annotation
    assert any(m.get("subPath") == "course" and m["readOnly"] is True for m in grade["volumeMounts"])
    assert "--out /srv/shard" in grade["command"][2] and writable[0]["mountPath"] == "/srv/shard"
    for init in SHARDS["spec"]["template"]["spec"]["initContainers"]:  # writes the volume: no learner code
        assert "rocmlab" not in init["command"][2]


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
