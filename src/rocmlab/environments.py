"""Environments from the release matrix: CPU virtual environments, ROCm install recipes.

``rocmlab env create cpu-previous`` builds ``.envs/cpu-previous`` from the entry's exact pins
(reused while the pins and the package metadata are unchanged); ``python_for(name)`` is the
interpreter ``rocmlab run --env NAME`` runs the lab worker with. A ROCm entry cannot be built
on a machine without its GPU: for it the exact install commands are printed, and its
Dockerfile under env/docker/ (generated from the matrix) is the way CI runs it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from . import releases
from .catalog import LabError
from .releases import Entry, MatrixError

ENVS_DIR = ".envs"
INSTALLED_EXTRA = "labs"
STAMP = "rocmlab-env.json"
LOG = "rocmlab-env.log"
CHECKED_PACKAGES = ("torch", "transformers", "peft", "accelerate", "tokenizers")
CONTAINER_VARIABLE = "ROCMLAB_ENV"  # set by the generated Dockerfiles to the entry name
DOCKER_RUN = "docker run --rm -it --device /dev/kfd --device /dev/dri --group-add video --ipc=host --shm-size 8g"


class EnvError(LabError):
    """An environment that cannot be created or used; the message says what to do."""


@dataclass(frozen=True)
class EnvState:
    name: str
    kind: str
    status: str
    state: str  # ready | stale | missing | container
    path: Path | None


# ---------------------------------------------------------------- paths and stamps


def _matrix(root: Path | None) -> releases.Matrix:
    return releases.read_matrix(Path(root) / releases.MATRIX_RELATIVE if root else None)


def env_dir(name: str, root: Path | None = None) -> Path:
    root = Path(root) if root else releases.repo_root()
    return root / ENVS_DIR / name


def env_hash(entry: Entry, root: Path) -> str:
    """What the environment is built from: the pins, Python, index and rocmlab's installed requirements."""
    material = {
        "pins": list(entry.pins),
        "python": entry.python,
        "torch_index": entry.torch_index,
        "rocmlab": _installed_requirements(root),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _installed_requirements(root: Path) -> dict:
    """rocmlab's dependencies and its labs extra: other extras (dev, hub) do not go into the environment."""
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (FileNotFoundError, tomllib.TOMLDecodeError):
        return {}
    return {
        "dependencies": project.get("dependencies", []),
        "requires-python": project.get("requires-python"),
        "labs": project.get("optional-dependencies", {}).get(INSTALLED_EXTRA, []),
    }


def _read_stamp(folder: Path) -> dict | None:
    try:
        return json.loads((folder / STAMP).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _interpreter(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _is_ready(entry: Entry, root: Path) -> bool:
    folder = env_dir(entry.name, root)
    stamp = _read_stamp(folder)
    return bool(stamp) and stamp.get("hash") == env_hash(entry, root) and _interpreter(folder).exists()


# ---------------------------------------------------------------- public API


def python_for(name: str, root: Path | None = None) -> Path:
    """The interpreter that runs labs in environment ``name``.

    Inside an entry's container (``ROCMLAB_ENV`` = name) it is the running interpreter; for a
    CPU entry it is ``.envs/NAME/bin/python``, which must be created and up to date.
    """
    root = Path(root) if root else releases.repo_root()
    entry = _matrix(root).get(name)
    if os.environ.get(CONTAINER_VARIABLE) == name:
        return Path(sys.executable)
    if entry.kind == "rocm":
        raise EnvError(
            f"{name} is a ROCm entry: run inside its container ({entry.dockerfile}); "
            f"`rocmlab env create {name}` prints how"
        )
    folder = env_dir(name, root)
    if not _interpreter(folder).exists():
        raise EnvError(f"environment {name} does not exist at {folder}: run `rocmlab env create {name}`")
    if not _is_ready(entry, root):
        raise EnvError(
            f"environment {name} at {folder} is out of date with env/matrix.toml: run `rocmlab env create {name}`"
        )
    return _interpreter(folder)


def list_environments(root: Path | None = None) -> list[EnvState]:
    root = Path(root) if root else releases.repo_root()
    states = []
    for entry in _matrix(root).entries:
        if entry.kind == "rocm":
            states.append(EnvState(entry.name, entry.kind, entry.status, "container", root / entry.dockerfile))
            continue
        folder = env_dir(entry.name, root)
        state = "ready" if _is_ready(entry, root) else "stale" if folder.exists() else "missing"
        states.append(EnvState(entry.name, entry.kind, entry.status, state, folder))
    return states


def create(name: str, root: Path | None = None, force: bool = False, timeout_s: float = 3600, log=print) -> Path:
    """Build (or reuse) the virtual environment of CPU entry ``name``; returns its folder."""
    root = Path(root) if root else releases.repo_root()
    entry = _matrix(root).get(name)
    if entry.kind != "cpu":
        raise EnvError(f"{name} is a ROCm entry; it is installed on a GPU machine:\n" + install_recipe(entry))
    folder = env_dir(name, root)
    if not force and _is_ready(entry, root):
        log(f"{name}: up to date at {folder} (pins unchanged), reused")
        return folder
    python = find_python(entry.python)
    if folder.exists():
        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    log(f"{name}: creating {folder} with {python} (Python {entry.python})")
    _run([str(python), "-m", "venv", str(folder)], folder.parent / f"{name}.create.log", timeout_s)
    _install(entry, folder, root, timeout_s, log)
    versions = _check_versions(entry, folder, timeout_s)
    _write_stamp(
        folder,
        {
            "name": name,
            "hash": env_hash(entry, root),
            "pins": list(entry.pins),
            "versions": versions,
            "created": dt.datetime.now(dt.UTC).isoformat(),
        },
    )
    (folder.parent / f"{name}.create.log").unlink(missing_ok=True)
    log(f"{name}: ready: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    return folder


def find_python(version: str) -> Path:
    """An interpreter of the wanted major.minor: this one, or pythonX.Y on PATH."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return Path(sys.executable)
    found = shutil.which(f"python{version}")
    if found:
        return Path(found)
    raise EnvError(f"Python {version} is needed for this environment and no python{version} is on PATH")


# ---------------------------------------------------------------- building


def _install(entry: Entry, folder: Path, root: Path, timeout_s: float, log) -> None:
    pip = [str(_interpreter(folder)), "-m", "pip", "install", "--disable-pip-version-check"]
    logfile = folder / LOG
    pins = folder / "pins.txt"
    pins.write_text("\n".join(entry.pins) + "\n", encoding="utf-8")
    torch_pin = next(p for p in entry.pins if p.replace(" ", "").lower().startswith("torch=="))
    log(f"{entry.name}: installing {torch_pin} (local wheels and configured indexes first)")
    if _run(pip + [torch_pin], logfile, timeout_s, check=False) != 0:
        if not entry.torch_index:
            raise EnvError(
                f"{entry.name}: {torch_pin} is not installable here and the entry names no torch_index; see {logfile}"
            )
        log(f"{entry.name}: retrying {torch_pin} from {entry.torch_index}")
        _run(pip + [torch_pin, "--extra-index-url", entry.torch_index], logfile, timeout_s)
    log(f"{entry.name}: installing the pins and rocmlab (editable, with the labs extra)")
    _run(pip + ["-c", str(pins), "-r", str(pins), "-e", f"{root}[{INSTALLED_EXTRA}]"], logfile, timeout_s)


def _check_versions(entry: Entry, folder: Path, timeout_s: float) -> dict:
    """Installed versions of the checked packages; a pin that did not hold is an error."""
    code = (
        "import importlib.metadata as m, json; out = {}\n"
        f"for p in {list(CHECKED_PACKAGES)!r}:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))"
    )
    result = subprocess.run(
        [str(_interpreter(folder)), "-c", code], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if result.returncode != 0:
        raise EnvError(f"{entry.name}: could not read installed versions: {result.stderr.strip()[-500:]}")
    versions = json.loads(result.stdout)
    for package in CHECKED_PACKAGES:
        pinned = entry.pin(package)
        if pinned and (package not in versions or Version(versions[package]) != Version(pinned)):
            raise EnvError(f"{entry.name}: {package} is {versions.get(package)} after install, pinned {pinned}")
    return versions


def _write_stamp(folder: Path, data: dict) -> None:
    tmp = folder / (STAMP + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, folder / STAMP)


def _run(cmd: list[str], logfile: Path, timeout_s: float, check: bool = True) -> int:
    """Run a command with its output appended to ``logfile``; the whole process group ends on timeout."""
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "a", encoding="utf-8") as out:
        out.write(f"$ {shlex.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise EnvError(f"timed out after {timeout_s:.0f}s: {shlex.join(cmd)} (log: {logfile})") from None
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    if code != 0 and check:
        tail = logfile.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise EnvError(f"failed (exit {code}): {shlex.join(cmd)}\n  " + "\n  ".join(tail) + f"\n(log: {logfile})")
    return code


# ---------------------------------------------------------------- ROCm recipes and Dockerfiles


def install_recipe(entry: Entry) -> str:
    """The exact commands that install a ROCm entry by hand, and how to use its container."""
    venv = f".envs/{entry.name}"
    method = entry.install.method
    lines = [
        (
            f"# {entry.name}: ROCm {entry.rocm} ({entry.released}), PyTorch {entry.pytorch}, "
            f"Python {entry.python}, {method}"
        )
    ]
    if method == "image":
        lines += [
            f"docker pull {entry.install.image}",
            (
                f'{DOCKER_RUN} -v "$PWD:/work" -w /work {entry.install.image} '
                "bash -c 'pip install -e \".[labs]\" && bash'"
            ),
        ]
    else:
        requirement = entry.install.requirement_for(entry.runner_gfx)
        lines += [
            f"python{entry.python} -m venv {venv}",
            f'{venv}/bin/pip install "{requirement}" --index-url {entry.install.index_url}',
            f'{venv}/bin/pip install -e ".[labs]"',
        ]
        if method == "multiarch":
            lines.append(
                f"# other GPUs: replace {entry.runner_gfx} by one of {' '.join(entry.gfx)} "
                "(several: torch[device-gfxA,device-gfxB])"
            )
    lines += [
        f"# or the container: docker build -f {entry.dockerfile.as_posix()} -t rocmlab:{entry.name} .",
        f'#   {DOCKER_RUN} -v "$PWD:/work" rocmlab:{entry.name}',
    ]
    return "\n".join(lines)


def render_dockerfile(entry: Entry) -> str:
    method = entry.install.method
    head = [
        "# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.",
        f"# {entry.name}: ROCm {entry.rocm} ({entry.released}), PyTorch {entry.pytorch}, Python {entry.python}",
        f"# GPU targets: {' '.join(entry.gfx)}",
        f"# Build (from the repository root): docker build -f {entry.dockerfile.as_posix()} -t rocmlab:{entry.name} .",
        f'# Run: {DOCKER_RUN} -v "$PWD:/work" rocmlab:{entry.name}',
    ]
    if method == "image":
        body = [f"FROM {entry.install.image}"]
    else:
        body = [f"FROM python:{entry.python}-slim-bookworm"]
        requirement = entry.install.requirement.replace("{gfx}", "${GFX}")
        if method == "multiarch":
            body.append(f"ARG GFX={entry.runner_gfx}")
        body.append(f'RUN pip install --no-cache-dir --index-url {entry.install.index_url} "{requirement}"')
    body += [
        f"ENV {CONTAINER_VARIABLE}={entry.name} PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1",
        "WORKDIR /work",
        "COPY pyproject.toml README.md /work/",
        "COPY src /work/src",
        'RUN pip install --no-cache-dir -e "/work[labs]"',
        'CMD ["bash"]',
    ]
    return "\n".join(head + [""] + body) + "\n"


def write_dockerfiles(root: Path | None = None, check: bool = False) -> list[Path]:
    """Write env/docker/<name>.Dockerfile for every ROCm entry; with check, only list the stale ones."""
    root = Path(root) if root else releases.repo_root()
    changed = []
    for entry in _matrix(root).of_kind("rocm"):
        path = root / entry.dockerfile
        text = render_dockerfile(entry)
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        changed.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return changed


# ---------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`rocmlab env create NAME | list | dockerfiles [--check]`."""
    sub = parser.add_subparsers(dest="env_command", required=True)
    create_p = sub.add_parser("create", help="build the virtual environment of a CPU matrix entry")
    create_p.add_argument("name", help="matrix entry, e.g. cpu-previous")
    create_p.add_argument("--force", action="store_true", help="rebuild even when the pins are unchanged")
    create_p.add_argument("--timeout", type=float, default=3600, help="seconds per install step")
    sub.add_parser("list", help="matrix entries and the state of their environments")
    docker = sub.add_parser("dockerfiles", help="regenerate env/docker/ from env/matrix.toml")
    docker.add_argument("--check", action="store_true", help="only report Dockerfiles that differ")


def run(args: argparse.Namespace) -> int:
    root = Path(args.root).resolve() if getattr(args, "root", None) else None
    try:
        if args.env_command == "create":
            return _create_command(args, root)
        if args.env_command == "list":
            for s in list_environments(root):
                print(f"{s.name:14} {s.kind:5} {s.status:9} {s.state:9} {s.path}")
            return 0
        return _dockerfiles_command(args.check, root)
    except (EnvError, MatrixError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _create_command(args: argparse.Namespace, root: Path | None) -> int:
    entry = _matrix(root).get(args.name)
    if entry.kind == "rocm":
        print(install_recipe(entry))
        return 0
    create(args.name, root=root, force=args.force, timeout_s=args.timeout)
    return 0


def _dockerfiles_command(check: bool, root: Path | None) -> int:
    changed = write_dockerfiles(root, check=check)
    verb = "out of date" if check else "written"
    for path in changed:
        print(f"{verb}: {path}")
    if not changed:
        print("env/docker/ matches env/matrix.toml")
    return 1 if check and changed else 0
