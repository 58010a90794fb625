"""The Kubernetes objects of the hub, validated against Kubernetes' own schemas (kubernetes-validate).

The roles hook of values.yaml runs with kubernetes_asyncio's real models on a pod shaped as
KubeSpawner makes one (the volumes of singleuser.storage); the pods it returns, the nbgrader
volume's manifests and the accounts Secret are checked in strict mode (an unknown field fails).
"""

from __future__ import annotations

import asyncio
import sys
import types

import pytest
import yaml
from lazy_imports import skip_unless_installed
from test_hub_helm import CUSTOM, HELM, SINGLEUSER, VALUES
from traitlets.config import Config

kubernetes_validate = pytest.importorskip("kubernetes_validate")
skip_unless_installed("kubernetes_asyncio")
KUBERNETES = "1.30"  # oldest minor still maintained upstream when this was written


def valid(document: dict) -> None:
    kubernetes_validate.validate(document, KUBERNETES, strict=True)


def serialized(obj) -> dict:
    from kubernetes_asyncio.client import ApiClient

    async def convert():
        async with ApiClient() as client:
            return client.sanitize_for_serialization(obj)

    return asyncio.run(convert())


def real_hook(monkeypatch):
    def get_config(key, default=None):
        node = VALUES
        for part in key.split("."):
            node = node.get(part, default) if isinstance(node, dict) else default
        return node

    monkeypatch.setitem(sys.modules, "z2jh", types.SimpleNamespace(get_config=get_config))
    config = Config()
    exec(compile(VALUES["hub"]["extraConfig"]["rocmlab-roles.py"], "rocmlab-roles.py", "exec"), {"c": config})  # noqa: S102
    return config.KubeSpawner.modify_pod_hook


def kubespawner_pod(name: str):
    """A user pod as KubeSpawner builds it from singleuser (image, uid, storage's volumes)."""
    from kubernetes_asyncio.client import models

    image = f"{SINGLEUSER['image']['name']}:{SINGLEUSER['image']['tag']}"
    volumes = [
        models.V1Volume(
            name="volume-" + name,
            persistent_volume_claim=models.V1PersistentVolumeClaimVolumeSource(claim_name="claim-" + name),
        )
    ]
    for volume in SINGLEUSER["storage"]["extraVolumes"]:
        if "persistentVolumeClaim" in volume:
            source = {
                "persistent_volume_claim": models.V1PersistentVolumeClaimVolumeSource(
                    claim_name=volume["persistentVolumeClaim"]["claimName"]
                )
            }
        else:
            source = {
                "empty_dir": models.V1EmptyDirVolumeSource(
                    **{"medium": volume["emptyDir"].get("medium"), "size_limit": volume["emptyDir"].get("sizeLimit")}
                )
            }
        volumes.append(models.V1Volume(name=volume["name"], **source))
    mounts = [models.V1VolumeMount(name="volume-" + name, mount_path=SINGLEUSER["storage"]["homeMountPath"])]
    mounts += [
        models.V1VolumeMount(name=m["name"], mount_path=m["mountPath"])
        for m in SINGLEUSER["storage"]["extraVolumeMounts"]
    ]
    container = models.V1Container(
        name="notebook",
        image=image,
        env=[models.V1EnvVar(name="JUPYTERHUB_USER", value=name)],
        volume_mounts=mounts,
        security_context=models.V1SecurityContext(run_as_user=SINGLEUSER["uid"]),
    )
    spec = models.V1PodSpec(containers=[container], volumes=volumes)
    return models.V1Pod(api_version="v1", kind="Pod", metadata=models.V1ObjectMeta(name=f"jupyter-{name}"), spec=spec)


@pytest.mark.parametrize("groups", [["students"], [CUSTOM["instructorGroup"]]])
def test_the_pods_the_roles_hook_makes_are_valid(monkeypatch, groups):
    hook = real_hook(monkeypatch)
    user = types.SimpleNamespace(name="ann", groups=[types.SimpleNamespace(name=g) for g in groups])
    pod = serialized(hook(types.SimpleNamespace(user=user), kubespawner_pod("ann")))
    valid(pod)
    names = {volume["name"] for volume in pod["spec"]["volumes"]}
    for container in [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])]:
        for mount in container["volumeMounts"]:
            assert mount["name"] in names, mount
        paths = [mount["mountPath"] for mount in container["volumeMounts"]]
        assert len(paths) == len(set(paths)), paths


def test_the_nbgrader_volume_manifests_are_valid():
    for document in yaml.safe_load_all((HELM / "nbgrader-volume.yaml").read_text(encoding="utf-8")):
        valid(document)


def test_the_accounts_secret_is_valid():
    from rocmlab.hub import accounts

    _, content = accounts.make_accounts(["instructor", "ann"], rounds=1000)
    valid(yaml.safe_load(accounts.secret_manifest(content)))


def test_the_validation_catches_a_misspelt_field():
    with pytest.raises(kubernetes_validate.ValidationError):
        valid({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "stringdata": {}})
