"""The Kubernetes hub's exchange keeps learners apart: pods rebuilt from the rendered values (root only).

No cluster here. The roles hook of env/jupyterhub/helm/values.yaml renders each user's pod;
this test builds each pod's view of the filesystem from those mounts exactly (bind mounts of the
volume's subPaths, read-only where the mount is, a fresh world-writable folder for an emptyDir)
in a private mount namespace, runs the init container's command, and then real nbgrader, as
uid 1000 like every pod: two learners fetch and submit, one of them forges a submission under
the other's name, peeks at the other's folder and tries to change the released lab. The
instructor's collect, with the classes the values name, then takes each learner's own work.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from test_hub_helm import CUSTOM, SINGLEUSER, VALUES, nbgrader_config, roles_hook, spawn

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]

POD_UID, POD_GID = SINGLEUSER["uid"], SINGLEUSER["fsGid"]
LAB = "lab"
COURSE = CUSTOM["courseId"]

# Runs as root in the namespace: argv[1] is the JSON plan. Binds every pod's mounts under its view
# folder, then runs each step as the pod's user and prints one JSON result per step.
DRIVER = r"""
import json, os, subprocess, sys
plan = json.load(open(sys.argv[1]))
for pod in plan["pods"]:
    for mount in sorted(pod["mounts"], key=lambda m: m["path"].count("/")):  # parents first
        target = pod["view"] + mount["path"]
        os.makedirs(target, exist_ok=True)
        subprocess.run(["mount", "--bind", mount["source"], target], check=True)
        if mount["read_only"]:
            subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)
from pathlib import Path
from rocmlab.sandbox.paths import interpreter_paths
from rocmlab.sandbox.entry import expose_paths
expose_paths(interpreter_paths(), Path(plan["scratch"]))  # a closed /root holding the interpreter
results = []
for step in plan["steps"]:
    proc = subprocess.run([sys.executable, "-c", step["code"], *step["args"]], user=plan["uid"],
                          group=plan["gid"], extra_groups=[], cwd=step["cwd"], capture_output=True,
                          text=True, timeout=120, env={"HOME": step["cwd"], "PATH": "/usr/bin:/bin"})
    results.append({"name": step["name"], "rc": proc.returncode, "out": proc.stdout, "err": proc.stderr[-2000:]})
print(json.dumps(results))
"""

# A step inside a learner's pod: nbgrader as configured by singleuser.extraFiles (the root
# re-pointed into the pod's view). argv: view, exchange root in the pod, student id, action.
NBGRADER_STEP = r"""
import os, sys
from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit
from traitlets.config import Config
view, root, student, action = sys.argv[1:5]
c = Config()
c.CourseDirectory.course_id = "%(course)s"
c.CourseDirectory.assignment_id = "%(lab)s"
c.CourseDirectory.student_id = student
c.Exchange.root = view + root
c.Exchange.path_includes_course = True
coursedir = CourseDirectory(config=c)
auth = Authenticator(config=c)
if action == "fetch":
    ExchangeFetchAssignment(coursedir=coursedir, authenticator=auth, config=c).start()
else:
    notebook = os.path.join("%(course)s", "%(lab)s", "%(lab)s.ipynb")
    text = open(notebook).read().replace("RELEASED", action)
    open(notebook, "w").write(text)
    ExchangeSubmit(coursedir=coursedir, authenticator=auth, config=c).start()
print("ok")
""".replace("%(course)s", COURSE).replace("%(lab)s", LAB)

PEEK = r"""
import os, sys
view, inside, other = sys.argv[1:4]
print(json.dumps({
    "inbound": sorted(os.listdir(view + inside + "/inbound")),
    "other_inbound": os.path.exists(view + inside + "/inbound/" + other),
    "exchange_root": sorted(os.listdir(view + inside)),
}))
try:
    open(view + inside + "/outbound/%(lab)s/%(lab)s.ipynb", "w").write("changed by a learner")
    print("WROTE")
except OSError as exc:
    print("refused", exc.errno)
""".replace("%(lab)s", LAB)


def _skip_unless_root():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("mount"):
        pytest.skip("building the pods' views needs root, unshare and mount")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("unshare --mount does not work here")


def pod_mounts(container, volume: Path, scratch: Path) -> list[dict]:
    """Each mount of the rendered container: its path in the pod, what it binds, read-only."""
    found = []
    for mount in container.volume_mounts:
        if mount.name == CUSTOM["volume"]:
            source = volume / mount.sub_path
        else:  # an emptyDir of singleuser.storage.extraVolumes: a fresh folder, mode 777 as kubelet makes it
            kinds = {v["name"]: v for v in SINGLEUSER["storage"]["extraVolumes"]}
            assert "emptyDir" in kinds[mount.name], mount.name
            source = Path(tempfile.mkdtemp(prefix="empty-", dir=scratch))
            source.chmod(0o777)
        assert source.is_dir(), f"{mount.sub_path}: the pod would get a folder made by root, not the volume's"
        found.append(
            {"path": mount.mount_path, "source": str(source), "read_only": bool(getattr(mount, "read_only", False))}
        )
    return found


def in_view(arg: str, view: str, mounts: list[dict]) -> str:
    """An argument of a container's command, seen from the host: paths under a mount get the view's prefix."""
    under = any(arg == m["path"] or arg.startswith(m["path"] + "/") for m in mounts)
    return view + arg if under else arg


def released_notebook() -> str:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("answer = 'RELEASED'")])
    return nbformat.writes(nb)


def run_in_namespace(plan: dict, workdir: Path) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="rmlk8s-mounts-"))  # root-only: the namespace's bookkeeping
    plan = {**plan, "scratch": str(scratch)}
    (workdir / "plan.json").write_text(json.dumps(plan))
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", DRIVER, str(workdir / "plan.json")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    for keep in scratch.glob("keep*"):  # only bound inside the namespace: empty here
        keep.rmdir()
    scratch.rmdir()
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {step["name"]: step for step in json.loads(proc.stdout.splitlines()[-1])}


def test_learners_pods_cannot_reach_each_others_submissions(monkeypatch):
    _skip_unless_root()
    from rocmlab.hub import exchange

    work = Path(tempfile.mkdtemp(prefix="rmlk8s-"))
    work.chmod(0o755)
    try:
        volume = work / "volume"  # what nbgrader-volume.yaml's Job leaves on the claim
        for folder in ("inbound", "outbound", "feedback"):
            (volume / "exchange" / COURSE / folder).mkdir(parents=True)
        (volume / "course").mkdir()
        released = volume / "exchange" / COURSE / "outbound" / LAB / f"{LAB}.ipynb"
        released.parent.mkdir()
        released.write_text(released_notebook())
        for path in [volume, *volume.rglob("*")]:
            os.chown(path, POD_UID, POD_GID)

        hook = roles_hook(monkeypatch)
        inside = f"{CUSTOM['exchangeMountPath']}/{COURSE}"
        init_pods, learner_pods, init_steps = [], [], []
        for name in ("bob", "ann"):  # bob submits first: ann then looks for his work
            container, _ = spawn(hook, groups=["students"], name=name)
            [init] = container.pod.spec.init_containers
            home = work / "homes" / name
            home.mkdir(parents=True)
            os.chown(home, POD_UID, POD_GID)
            init_view = str(work / "views" / f"{name}-init")
            mounts = pod_mounts(init, volume, work)
            init_pods.append({"view": init_view, "mounts": mounts})
            init_steps.append(
                {
                    "name": f"{name}-init",
                    "code": "import subprocess, sys; subprocess.run(sys.argv[1:], check=True)",
                    "args": [
                        shutil.which(init.command[0]),
                        *(in_view(arg, init_view, mounts) for arg in init.command[1:]),
                    ],
                    "cwd": str(home),
                }
            )
            learner_pods.append({"view": str(work / "views" / name), "home": str(home), "container": container})
        # The init containers run first, in views of their own; the notebooks' mounts come after.
        done = run_in_namespace({"uid": POD_UID, "gid": POD_GID, "pods": init_pods, "steps": init_steps}, work)
        assert all(step["rc"] == 0 for step in done.values()), done
        for name in ("bob", "ann"):
            for folder in ("inbound", "feedback"):
                made = volume / "exchange" / COURSE / folder / name
                assert made.is_dir() and made.stat().st_uid == POD_UID

        for pod in learner_pods:
            pod["mounts"] = pod_mounts(pod.pop("container"), volume, work)
        bob, ann = learner_pods
        root = CUSTOM["exchangeMountPath"]

        def step(name, pod, *args, code=NBGRADER_STEP):
            return {"name": name, "code": code, "args": [pod["view"], *args], "cwd": pod["home"]}

        second = {
            "uid": POD_UID,
            "gid": POD_GID,
            "pods": [{"view": p["view"], "mounts": p["mounts"]} for p in learner_pods],
            "steps": [
                step("bob-fetch", bob, root, "bob", "fetch"),
                step("bob-submit", bob, root, "bob", "work of bob"),
                step("ann-fetch", ann, root, "ann", "fetch"),
                step("ann-submit", ann, root, "ann", "work of ann"),
                step("ann-forges-bob", ann, root, "bob", "forged by ann"),
                step("ann-peeks", ann, inside, "bob", code="import json\n" + PEEK),
            ],
        }
        done = run_in_namespace(second, work)
        for name in ("bob-fetch", "bob-submit", "ann-fetch", "ann-submit"):
            assert done[name]["rc"] == 0 and "ok" in done[name]["out"], done[name]
        peek_lines = done["ann-peeks"]["out"].splitlines()
        seen = json.loads(peek_lines[0])
        assert all(entry.split("+")[0] in ("ann", "bob") for entry in seen["inbound"])
        assert len(seen["inbound"]) == 2 and not seen["other_inbound"], seen  # her two, none of bob's
        assert peek_lines[1].startswith("refused"), peek_lines  # the released lab is read-only
        assert "RELEASED" in released.read_text()
        assert {p.name for p in (volume / "exchange" / COURSE / "inbound").iterdir()} == {"ann", "bob"}

        course = work / "instructor-course"
        course.mkdir()
        monkeypatch.setenv("ROCMLAB_HUB_ROLE", "instructor")
        config, _ = nbgrader_config(monkeypatch, "instructor")
        from nbgrader.coursedir import CourseDirectory
        from traitlets.utils.importstring import import_item

        config.CourseDirectory.root = str(course)
        config.CourseDirectory.assignment_id = LAB
        config.Exchange.root = str(volume / "exchange")  # the instructor's pod mounts exchange/ whole
        monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
        collect = import_item(config.ExchangeFactory.collect)
        collect(coursedir=CourseDirectory(config=config), config=config).start()
        submitted = course / "submitted"
        assert sorted(p.name for p in submitted.iterdir()) == ["ann", "bob"]
        assert "work of ann" in (submitted / "ann" / LAB / f"{LAB}.ipynb").read_text()
        bobs = (submitted / "bob" / LAB / f"{LAB}.ipynb").read_text()
        assert "work of bob" in bobs and "forged by ann" not in bobs
        assert collect is exchange.LearnerFolderCollect
        assert VALUES["custom"]["rocmlab"]["exchangeMountPath"] == root
    finally:
        shutil.rmtree(work, ignore_errors=True)
