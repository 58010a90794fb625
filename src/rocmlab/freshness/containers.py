"""Containers of the release matrix: the Dockerfiles, and the docker command lines that use them.

One Dockerfile per ROCm entry, GPU canary and CPU entry (``env/docker/NAME.Dockerfile``),
generated from env/matrix.toml. A multi-arch entry is built per GPU target with
``--build-arg GFX=gfxNNN``. Every image has rocmlab with the labs extra and redis-server
(lab 06), keeps no state of its own, and expects to run as the caller's user with the
repository mounted at ``/rocmlab`` and the model cache at ``/rocmlab-cache``.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from .matrix import Entry

CONTAINER_VARIABLE = "ROCMLAB_ENV"
REPO_MOUNT = "/rocmlab"  # the checkout, inside the container
CACHE_MOUNT = "/rocmlab-cache"  # the model cache volume: ROCMLAB_CACHE, HF_HOME below it
ISOLATION_ENV_FILE = Path("/etc/podinfo/gha-gpu-isolation-settings")  # GPU isolation of a shared runner
DEVICE_GROUPS = ("video", "render")  # /dev/kfd and /dev/dri/renderD* belong to them on the host
GPU_FLAGS = ("--device", "/dev/kfd", "--device", "/dev/dri", "--ipc=host", "--shm-size", "8g")
GPU_FLAGS += ("--security-opt", "seccomp=unconfined")
DOCKER_RUN = "docker run --rm -it " + " ".join(GPU_FLAGS) + " --group-add video --group-add render"
SYSTEM_PACKAGES = "redis-server"


def dockerfile_entries(entries: list[Entry]) -> list[Entry]:
    """The entries with a Dockerfile: ROCm entries, GPU canaries and pinned CPU entries."""
    return [e for e in entries if e.kind in ("rocm", "cpu") or (e.kind == "canary" and e.target == "gpu")]


def dockerfile_path(entry: Entry) -> Path:
    return Path("env") / "docker" / f"{entry.name}.Dockerfile"


def render_dockerfile(entry: Entry) -> str:
    path = dockerfile_path(entry).as_posix()
    gfx = entry.runner_gfx
    build = (
        f"docker build -f {path}"
        + (f" --build-arg GFX={gfx}" if _per_gfx(entry) else "")
        + f" -t rocmlab:{entry.name} ."
    )
    head = [
        "# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.",
        f"# {entry.name}: {_summary(entry)}",
        f"# Build (repository root; .dockerignore keeps the context to pyproject.toml, README.md, src/): {build}",
        f'# Run as yourself: {DOCKER_RUN if entry.on_gpu else "docker run --rm -it"} --user "$(id -u):$(id -g)" '
        f'-v "$PWD:{REPO_MOUNT}" rocmlab:{entry.name}',
        "# CI runs it through `rocmlab env job` (ci/freshness_job.sh).",
    ]
    if entry.gfx:
        head.insert(2, f"# GPU targets: {' '.join(entry.gfx)}")
    body = [*_base(entry), *_system_packages(), *_torch(entry), *_rocmlab(entry)]
    return "\n".join(head + [""] + body) + "\n"


def _per_gfx(entry: Entry) -> bool:
    return (entry.kind == "rocm" and entry.install.method == "multiarch") or entry.kind == "canary"


def _summary(entry: Entry) -> str:
    if entry.kind == "rocm":
        return f"ROCm {entry.rocm} ({entry.released}), PyTorch {entry.pytorch}, Python {entry.python}"
    if entry.kind == "canary":
        return (
            f"canary: {', '.join(entry.requirements)} (pre-releases of {', '.join(entry.pre)}), Python {entry.python}"
        )
    return f"CPU, {', '.join(entry.pins)}, Python {entry.python}"


def _base(entry: Entry) -> list[str]:
    if entry.kind == "rocm" and entry.install.method == "image":
        image = entry.install.image + (f"@{entry.install.digest}" if entry.install.digest else "")
        return [f"FROM {image}"]
    return [f"FROM python:{entry.python}-slim-bookworm"]


def _system_packages() -> list[str]:
    return [
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        f"{SYSTEM_PACKAGES} && rm -rf /var/lib/apt/lists/*"
    ]


def _torch(entry: Entry) -> list[str]:
    pip = "RUN pip install --no-cache-dir"
    if entry.kind == "rocm":
        if entry.install.method == "image":
            return []
        requirement = entry.install.requirement.replace("{gfx}", "${GFX}")
        lines = [f"ARG GFX={entry.runner_gfx}"] if entry.install.method == "multiarch" else []
        return lines + [f'{pip} --index-url {entry.install.index_url} "{requirement}"']
    if entry.kind == "canary":
        torch = next(r for r in entry.requirements if r.startswith("torch"))
        rest = " ".join(f'"{r}"' for r in entry.requirements if r != torch)
        return [
            f"ARG GFX={entry.runner_gfx}",
            f'{pip} --pre --index-url {entry.torch_index} "{torch.replace("{gfx}", "${GFX}")}"',
            f"{pip} {rest}",
        ]
    extra = f" --extra-index-url {entry.torch_index}" if entry.torch_index else ""
    return [f"{pip}{extra} " + " ".join(f'"{p}"' for p in entry.pins)]


def _rocmlab(entry: Entry) -> list[str]:
    return [
        f"ENV {CONTAINER_VARIABLE}={entry.name} PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HOME=/tmp/home",
        f"ENV ROCMLAB_CACHE={CACHE_MOUNT} HF_HOME={CACHE_MOUNT}/huggingface",
        "RUN mkdir -p -m 1777 /tmp/home",
        f"WORKDIR {REPO_MOUNT}",
        f"COPY pyproject.toml README.md {REPO_MOUNT}/",
        f"COPY src {REPO_MOUNT}/src",
        f'RUN pip install --no-cache-dir -e "{REPO_MOUNT}[labs]"',
        'CMD ["bash"]',
    ]


def write_dockerfiles(root: Path, entries: list[Entry], check: bool = False) -> list[Path]:
    """Write env/docker/<name>.Dockerfile for every entry that has one; with check, only list the stale ones.

    A Dockerfile of an entry that left the matrix counts as stale and is removed.
    """
    changed, wanted = [], set()
    for entry in dockerfile_entries(entries):
        path = root / dockerfile_path(entry)
        wanted.add(path)
        text = render_dockerfile(entry)
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        changed.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for orphan in sorted((root / "env" / "docker").glob("*.Dockerfile")):
        if orphan not in wanted:
            changed.append(orphan)
            if not check:
                orphan.unlink()
    return changed


# ---------------------------------------------------------------- docker command lines


@dataclass(frozen=True)
class RunSpec:
    """How one container of a job runs: who, with which devices, mounts and environment."""

    repo: Path
    cache: Path
    user: str  # "uid:gid" of the runner's user: files it writes stay the runner's
    groups: tuple[str, ...] = ()  # numeric host GIDs of video and render
    gpu: bool = True
    env_file: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    network: bool = True


def image_tag(entry: Entry, gfx: str | None) -> str:
    return f"rocmlab/{entry.name}:{gfx or 'cpu'}"


def build_command(entry: Entry, gfx: str | None, tag: str, cache_from: str | None = None) -> list[str]:
    command = ["docker", "build", "-f", dockerfile_path(entry).as_posix(), "-t", tag]
    if gfx and _per_gfx(entry):
        command += ["--build-arg", f"GFX={gfx}"]
    if cache_from:
        command += ["--cache-from", cache_from, "--build-arg", "BUILDKIT_INLINE_CACHE=1"]
    return command + ["--label", f"org.rocmlab.entry={entry.name}", "."]


def run_command(entry: Entry, image: str, name: str, spec: RunSpec, command: list[str]) -> list[str]:
    """The `docker run` of one step of a job, ``command`` run inside the container."""
    argv = ["docker", "run", "--rm", "--name", name, "--user", spec.user]
    if spec.gpu:
        argv += list(GPU_FLAGS)
        for group in spec.groups:
            argv += ["--group-add", group]
        if spec.env_file:
            argv += ["--env-file", str(spec.env_file)]
    if not spec.network:
        argv += ["--network", "none"]
    argv += ["-v", f"{spec.repo}:{REPO_MOUNT}", "-v", f"{spec.cache}:{CACHE_MOUNT}", "-w", REPO_MOUNT]
    variables = {CONTAINER_VARIABLE: entry.name, "ROCMLAB_CACHE": CACHE_MOUNT, "HF_HOME": f"{CACHE_MOUNT}/huggingface"}
    for key, value in (variables | spec.env).items():
        argv += ["-e", f"{key}={value}"]
    return argv + [image] + command


def device_groups(lookup=None) -> tuple[str, ...]:
    """Numeric GIDs of the host's video and render groups (names may not exist inside the image)."""
    import grp

    lookup = lookup or grp.getgrnam
    found = []
    for name in DEVICE_GROUPS:
        try:
            found.append(str(lookup(name).gr_gid))
        except KeyError:
            continue
    return tuple(found)


def isolation_env_file(path: Path = ISOLATION_ENV_FILE) -> Path | None:
    return path if path.is_file() else None


def runner_user() -> str:
    return f"{os.getuid()}:{os.getgid()}"


def shell(argv: list[str]) -> str:
    return shlex.join(argv)
