"""One freshness job: build an entry's container, pre-fetch the profile's models, check the
container is what the entry says, then run every lab in it.

Steps, each a `docker` command (``containers``) run as the runner's user:

1. build ``env/docker/NAME.Dockerfile`` (per GPU target), from a registry cache when one is
   given (the image is then pushed and run by digest);
2. ``rocmlab assets fetch MODEL`` for every model the profile's labs name, into the cache volume
   (the only step with the network on and ``HF_HUB_OFFLINE`` unset);
3. ``rocmlab doctor --json`` (kept as ``results/NAME/doctor.json``) and
   ``rocmlab env check-entry NAME``: torch, HIP and the gfx arch against the entry; a mismatch
   stops the job before any lab runs;
4. ``rocmlab run --profile P --env NAME`` with ``HF_HUB_OFFLINE=1``.

Every step after the pre-fetch runs with ``--network none`` (loopback only: torchrun's ranks
still reach each other).

Containers are removed whatever happens. ``docker`` is looked up on PATH (``$ROCMLAB_DOCKER``
overrides it), so ci/standin/docker can stand in for the engine on a machine without one.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..course.catalog import GPU, PROFILE_NAMES, SMOKE, discover
from ..errors import CommandFailed
from . import containers
from .containers import REPO_MOUNT, RunSpec
from .matrix import Entry, MatrixError, read_matrix

DEVICES = (Path("/dev/kfd"), Path("/dev/dri"))  # a ROCm host has both
TINY_MODEL = "tiny-qwen-zh"


class JobError(MatrixError):
    """The job asked for cannot be planned (entry, profile, gfx, Dockerfile); the message says why."""


class JobFailed(CommandFailed):
    """The job cannot run on this runner, or a docker step failed or timed out; the message says which."""


@dataclass(frozen=True)
class Job:
    root: Path
    entry: Entry
    profile: str
    gfx: str | None
    cache: Path
    results: Path
    image_repo: str | None = None
    labs: tuple[str, ...] = ()
    timeout_s: float = 9000
    run_id: str = "local"

    @property
    def gpu(self) -> bool:
        return self.entry.on_gpu and self.profile != SMOKE


def models_for(root: Path, profile: str, labs: tuple[str, ...] = ()) -> list[str]:
    """Every model a profile's labs load (their ``MODEL`` parameter), tiny-qwen-zh first."""
    names = set()
    for lab in discover(root):
        if labs and lab.id not in labs:
            continue
        params = lab.profiles[profile].params if profile in lab.profiles else {}
        for key, value in params.items():
            if key == "MODEL" or key.endswith("_MODEL"):
                names.add(str(value))
    return sorted(names, key=lambda n: (n != TINY_MODEL, n))


def plan(root: Path, name: str, profile: str, gfx: str | None, **options) -> Job:
    if profile not in PROFILE_NAMES:
        raise JobError(f"--profile: expected one of {', '.join(PROFILE_NAMES)}, got {profile!r}")
    entry = read_matrix(root / "env" / "matrix.toml").get(name)
    if entry.kind == "canary" and entry.target != "gpu":
        raise JobError(f"{name} is a CPU canary: it runs in a virtual environment (`rocmlab env create {name}`)")
    if entry.on_gpu:
        gfx = gfx or entry.runner_gfx
        if gfx not in entry.gfx:
            raise JobError(f"--gfx {gfx}: {name} carries kernels for {', '.join(entry.gfx)} only")
    elif gfx:
        raise JobError(f"--gfx: {name} is a CPU entry")
    stale = containers.write_dockerfiles(root, [entry], check=True)
    if root / containers.dockerfile_path(entry) in stale:
        raise JobError(
            f"{containers.dockerfile_path(entry)} differs from env/matrix.toml: run `rocmlab env dockerfiles`"
        )
    return Job(root=root, entry=entry, profile=profile, gfx=gfx, **options)


class _Docker:
    """Runs docker commands with the job's timeout; remembers containers to remove."""

    def __init__(self, job: Job, log):
        self.job, self.log = job, log
        self.binary = os.environ.get("ROCMLAB_DOCKER", "docker")
        self.names: list[str] = []

    def __call__(self, argv: list[str], capture: bool = False, check: bool = True) -> subprocess.CompletedProcess:
        argv = [self.binary, *argv[1:]]
        self.log(f"$ {containers.shell(argv)}")
        try:
            result = subprocess.run(
                argv, cwd=self.job.root, text=True, timeout=self.job.timeout_s, check=False, capture_output=capture
            )
        except subprocess.TimeoutExpired:
            self.cleanup()
            raise JobFailed(f"timed out after {self.job.timeout_s:.0f}s: {containers.shell(argv)}") from None
        if check and result.returncode != 0:
            detail = (result.stderr or "").strip()[-800:] if capture else ""
            raise JobFailed(f"exit {result.returncode}: {containers.shell(argv)}{chr(10) + detail if detail else ''}")
        return result

    def run(self, step: str, image: str, spec: RunSpec, command: list[str], **kw) -> subprocess.CompletedProcess:
        name = f"rocmlab-{self.job.entry.name}-{step}-{self.job.run_id}"
        self.names.append(name)
        return self(containers.run_command(self.job.entry, image, name, spec, command), **kw)

    def cleanup(self) -> None:
        for name in self.names:
            subprocess.run([self.binary, "rm", "-f", name], capture_output=True, timeout=120, check=False)


def job_command(
    root: Path,
    *,
    name: str,
    cache_dir,
    profile: str = GPU,
    gfx: str | None = None,
    labs=(),
    results=Path("results"),
    image_repo: str | None = None,
    timeout: float = 9000,
    run_id: str = "local",
) -> int:
    """`rocmlab env job`: plan the job (``results`` relative to ``root``) and run it."""
    results = Path(results)
    job = plan(
        root,
        name,
        profile,
        gfx,
        cache=Path(cache_dir).resolve(),
        results=results if results.is_absolute() else (root / results).resolve(),
        image_repo=image_repo,
        labs=tuple(labs),
        timeout_s=timeout,
        run_id=run_id,
    )
    return run_job(job)


def run_job(job: Job, log=print) -> int:
    """Build, pre-fetch, check, run; returns the exit status of `rocmlab run` (labs)."""
    if job.gpu and not all(device.exists() for device in DEVICES):
        raise JobFailed("this runner has no /dev/kfd or /dev/dri: not a ROCm host (the gpu profiles need one)")
    docker = _Docker(job, log)
    out = job.results / job.entry.name
    out.mkdir(parents=True, exist_ok=True)
    job.cache.mkdir(parents=True, exist_ok=True)
    try:
        image = _build(job, docker)
        spec = RunSpec(
            repo=job.root,
            cache=job.cache,
            user=containers.runner_user(),
            groups=containers.device_groups() if job.gpu else (),
            gpu=job.gpu,
            env_file=containers.isolation_env_file() if job.gpu else None,
        )
        for model in models_for(job.root, job.profile, job.labs):
            docker.run("fetch", image, spec, ["rocmlab", "assets", "fetch", model])
        # no network at all after the pre-fetch: a lab that reaches out fails here as in a classroom
        offline_env = {"HF_HUB_OFFLINE": "1"} | _canary_env(job.entry)
        offline = RunSpec(**{**spec.__dict__, "env": offline_env, "network": False})
        doctor = docker.run("doctor", image, offline, ["rocmlab", "doctor", "--json"], capture=True, check=False)
        (out / "doctor.json").write_text(doctor.stdout or "{}\n", encoding="utf-8")
        check = [
            "rocmlab",
            "env",
            "check-entry",
            job.entry.name,
            "--out",
            f"{REPO_MOUNT}/{_inside(job, out)}/entry.json",
        ]
        check += ["--gfx", job.gfx] if job.gfx and job.gpu else []
        docker.run("check", image, offline, check)
        run = ["rocmlab", "run", *job.labs, "--profile", job.profile, "--env", job.entry.name]
        run += ["--out", f"{REPO_MOUNT}/{_inside(job, job.results)}"]
        return docker.run("labs", image, offline, run, check=False).returncode
    finally:
        docker.cleanup()


def _canary_env(entry: Entry) -> dict:
    """A canary turns FutureWarning into an error: breakage shows there before a release."""
    return {"PYTHONWARNINGS": "error::FutureWarning"} if entry.kind == "canary" else {}


def _inside(job: Job, path: Path) -> str:
    return Path(path).resolve().relative_to(job.root.resolve()).as_posix()


def _build(job: Job, docker: _Docker) -> str:
    """Build the image; with a registry, from its cache, pushed, and returned by digest."""
    tag = containers.image_tag(job.entry, job.gfx)
    cache_ref = f"{job.image_repo}:{job.entry.name}-{job.gfx or 'cpu'}" if job.image_repo else None
    if cache_ref:
        docker(["docker", "pull", cache_ref], check=False)
    docker(containers.build_command(job.entry, job.gfx, tag, cache_from=cache_ref))
    if not cache_ref:
        return tag
    docker(["docker", "tag", tag, cache_ref])
    docker(["docker", "push", cache_ref])
    digests = docker(["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", cache_ref], capture=True)
    pushed = [d for d in json.loads(digests.stdout or "[]") if d.startswith(job.image_repo + "@")]
    if not pushed:
        raise JobFailed(f"{cache_ref}: no digest after the push")
    return pushed[0]


# ---------------------------------------------------------------- inside the container


def check_entry(entry: Entry, gfx: str | None = None) -> dict:
    """Compare the running torch (version, HIP, GPU arch) with what the entry says; problems listed."""
    import torch

    found = {"torch": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda, "gfx": None}
    if torch.cuda.is_available() and torch.cuda.device_count():
        found["gfx"] = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "").split(":")[0] or None
        found["gpus"] = torch.cuda.device_count()
    expected, problems = _expectations(entry, gfx), []
    version = Version(found["torch"])
    if "torch" in expected and version not in SpecifierSet(expected["torch"], prereleases=True):
        problems.append(f"torch {found['torch']}, the entry says {expected['torch']}")
    if expected.get("local") and version.local != expected["local"]:
        problems.append(f"torch build +{version.local}, the entry says +{expected['local']}")
    if expected.get("hip") and not found["hip"]:
        problems.append("torch is not a ROCm build (torch.version.hip is None)")
    if expected.get("gfx") and found["gfx"] != expected["gfx"]:
        problems.append(f"GPU arch {found['gfx']}, the job is for {expected['gfx']}")
    for package, pinned in expected.get("pins", {}).items():
        found[package] = _version_of(package)
        if found[package] is None or Version(found[package]) not in SpecifierSet(pinned, prereleases=True):
            problems.append(f"{package} {found[package]}, the entry says {pinned}")
    return {"entry": entry.name, "expected": expected, "found": found, "problems": problems}


def _version_of(package: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _expectations(entry: Entry, gfx: str | None) -> dict:
    if entry.kind == "cpu":
        others = {
            line.split("==")[0]: "==" + line.split("==")[1] for line in entry.pins if not line.startswith("torch==")
        }
        return {"torch": f"=={entry.pin('torch')}", "pins": others}
    if entry.kind == "canary":
        return {"hip": True, "gfx": gfx or entry.runner_gfx}
    expected = {"torch": f"=={entry.pytorch}", "hip": True, "gfx": gfx or entry.runner_gfx}
    if entry.install.method == "multiarch":
        expected["local"] = f"rocm{entry.rocm}"
    elif entry.install.method == "wheel":
        expected["local"] = entry.install.requirement.split("+", 1)[1]
    return expected


def check_entry_command(root: Path, *, name: str, gfx: str | None = None, out=None) -> int:
    """`rocmlab env check-entry`: the report as JSON (also to ``out``); a problem fails the command."""
    entry = read_matrix(root / "env" / "matrix.toml").get(name)
    report = check_entry(entry, gfx)
    text = json.dumps(report, indent=2)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n", encoding="utf-8")
    print(text)
    if report["problems"]:
        raise CommandFailed(f"{name}: " + "; ".join(report["problems"]))
    return 0
