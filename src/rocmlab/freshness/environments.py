"""Environments from the release matrix: CPU and canary virtual environments, ROCm recipes.

``rocmlab env create cpu-previous`` builds ``.envs/cpu-previous`` from the entry's exact pins
(reused while the pins and the package metadata are unchanged); a CPU canary gets the newest
pre-releases of its channel, rebuilt with ``--force``. ``python_for(name)`` is the interpreter
``rocmlab run --env NAME`` runs the lab worker with. A ROCm entry cannot be built on a machine
without its GPU: for it the exact install commands are printed, and its container (``containers``,
run by ``rocmlab env job``, see ``jobs``) is the way CI runs it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet

from .. import processes
from ..course.catalog import GPU, PROFILE_NAMES
from ..course.course import Course
from ..errors import CommandFailed, ExitCode, InputError
from . import containers, jobs
from .containers import CONTAINER_VARIABLE, DOCKER_RUN
from .matrix import MATRIX_RELATIVE, Entry, Matrix, read_matrix

ENVS_DIR = ".envs"
INSTALLED_EXTRA = "labs"
STAMP = "rocmlab-env.json"
LOG = "rocmlab-env.log"
CHECKED_PACKAGES = ("torch", "transformers", "peft", "accelerate", "tokenizers")
PYPI = "https://pypi.org/simple"


class EnvError(InputError):
    """An entry that cannot be used this way, or an environment not created (or out of date) yet;
    the message says what to do."""


class EnvBuildError(CommandFailed):
    """A step of building an environment failed or timed out; the message names the command and its log."""


@dataclass(frozen=True)
class EnvState:
    name: str
    kind: str
    status: str
    state: str  # ready | stale | missing | container
    path: Path | None


# ---------------------------------------------------------------- paths and stamps


def _matrix(root: Path) -> Matrix:
    return read_matrix(root / MATRIX_RELATIVE)


def env_dir(name: str, root: Path) -> Path:
    return root / ENVS_DIR / name


def env_hash(entry: Entry, root: Path) -> str:
    """What the environment is built from: the pins, Python, index and rocmlab's installed requirements."""
    material = {
        "pins": list(entry.pins or entry.requirements),
        "pre": list(entry.pre),
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


def python_for(name: str, root: Path) -> Path:
    """The interpreter that runs labs in environment ``name``.

    Inside an entry's container (``ROCMLAB_ENV`` = name) it is the running interpreter; for a
    CPU entry it is ``.envs/NAME/bin/python``, which must be created and up to date.
    """
    entry = _matrix(root).get(name)
    if os.environ.get(CONTAINER_VARIABLE) == name:
        return Path(sys.executable)
    if entry.on_gpu:
        raise EnvError(
            f"{name} runs on a GPU: run inside its container ({containers.dockerfile_path(entry)}); "
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


def list_environments(root: Path) -> list[EnvState]:
    states = []
    matrix = _matrix(root)
    for entry in matrix.entries + matrix.canaries:
        if entry.on_gpu:
            path = root / containers.dockerfile_path(entry)
            states.append(EnvState(entry.name, entry.kind, entry.status, "container", path))
            continue
        folder = env_dir(entry.name, root)
        state = "ready" if _is_ready(entry, root) else "stale" if folder.exists() else "missing"
        states.append(EnvState(entry.name, entry.kind, entry.status, state, folder))
    return states


def create(name: str, root: Path, force: bool = False, timeout_s: float = 3600, log=print) -> Path:
    """Build (or reuse) the virtual environment of CPU entry ``name``; returns its folder."""
    entry = _matrix(root).get(name)
    if entry.on_gpu:
        raise EnvError(f"{name} runs on a GPU; it is installed on a GPU machine:\n" + install_recipe(entry))
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
            "pins": list(entry.pins or entry.requirements),
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
    raise EnvBuildError(f"Python {version} is needed for this environment and no python{version} is on PATH")


# ---------------------------------------------------------------- building


def _install(entry: Entry, folder: Path, root: Path, timeout_s: float, log) -> None:
    if entry.kind == "canary":
        _install_canary(entry, folder, root, timeout_s, log)
        return
    pip = [str(_interpreter(folder)), "-m", "pip", "install", "--disable-pip-version-check"]
    logfile = folder / LOG
    pins = folder / "pins.txt"
    pins.write_text("\n".join(entry.pins) + "\n", encoding="utf-8")
    torch_pin = next(p for p in entry.pins if p.replace(" ", "").lower().startswith("torch=="))
    log(f"{entry.name}: installing {torch_pin} (local wheels and configured indexes first)")
    if _run(pip + [torch_pin], logfile, timeout_s, check=False) != 0:
        if not entry.torch_index:
            raise EnvBuildError(
                f"{entry.name}: {torch_pin} is not installable here and the entry names no torch_index; see {logfile}"
            )
        log(f"{entry.name}: retrying {torch_pin} from {entry.torch_index}")
        _run(pip + [torch_pin, "--extra-index-url", entry.torch_index], logfile, timeout_s)
    log(f"{entry.name}: installing the pins and rocmlab (editable, with the labs extra)")
    _run(pip + ["-c", str(pins), "-r", str(pins), "-e", f"{root}[{INSTALLED_EXTRA}]"], logfile, timeout_s)


def _install_canary(entry: Entry, folder: Path, root: Path, timeout_s: float, log) -> None:
    """torch first (with --pre from the canary's index when torch is a pre-release there), then the
    other requirements (pre-releases where listed), then rocmlab; torch stays what step one put in."""
    pip = [str(_interpreter(folder)), "-m", "pip", "install", "--disable-pip-version-check"]
    logfile = folder / LOG
    torch = next(r for r in entry.requirements if r.split("=")[0].split("[")[0] == "torch")
    pre_torch = "torch" in entry.pre
    index = ["--index-url", entry.torch_index, "--extra-index-url", PYPI] if entry.torch_index and pre_torch else []
    log(f"{entry.name}: installing {torch}" + (f" (pre-releases from {entry.torch_index})" if pre_torch else ""))
    _run(pip + (["--pre"] if pre_torch else []) + index + [torch], logfile, timeout_s)
    constraint = folder / "torch-constraint.txt"
    constraint.write_text(f"torch=={_installed(folder, 'torch', timeout_s)}\n", encoding="utf-8")
    rest = [r for r in entry.requirements if r != torch]
    pre = [r for r in rest if _name(r) in entry.pre]
    for group, flags in ((pre, ["--pre"]), ([r for r in rest if r not in pre], [])):
        if group:
            log(f"{entry.name}: installing {' '.join(group)}{' (pre-releases)' if flags else ''}")
            _run(pip + flags + ["-c", str(constraint)] + group, logfile, timeout_s)
    _run(pip + ["-c", str(constraint), "-e", f"{root}[{INSTALLED_EXTRA}]"], logfile, timeout_s)


def _name(requirement: str) -> str:
    from packaging.requirements import Requirement

    return Requirement(requirement.replace("{gfx}", "gfx000")).name


def _installed(folder: Path, package: str, timeout_s: float) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    result = subprocess.run(
        [str(_interpreter(folder)), "-c", code], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if result.returncode != 0:
        raise EnvBuildError(f"{package} is not installed in {folder}: {result.stderr.strip()[-300:]}")
    return result.stdout.strip()


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
        raise EnvBuildError(f"{entry.name}: could not read installed versions: {result.stderr.strip()[-500:]}")
    versions = json.loads(result.stdout)
    for package in CHECKED_PACKAGES:
        pinned = entry.pin(package)
        if pinned and not pin_holds(pinned, versions.get(package)):
            raise EnvBuildError(f"{entry.name}: {package} is {versions.get(package)} after install, pinned {pinned}")
    return versions


def pin_holds(pinned: str, installed: str | None) -> bool:
    """``installed`` satisfies ``==pinned``: a pin without a local label accepts any build of it
    (torch==2.14.1 is met by 2.14.1+cpu), a pin with one wants exactly that build."""
    return installed is not None and SpecifierSet(f"=={pinned}").contains(installed, prereleases=True)


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
            processes.stop(proc)
            raise EnvBuildError(f"timed out after {timeout_s:.0f}s: {shlex.join(cmd)} (log: {logfile})") from None
        except BaseException:
            processes.stop(proc)
            raise
    if code != 0 and check:
        tail = logfile.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise EnvBuildError(f"failed (exit {code}): {shlex.join(cmd)}\n  " + "\n  ".join(tail) + f"\n(log: {logfile})")
    return code


# ---------------------------------------------------------------- ROCm recipes and Dockerfiles


def install_recipe(entry: Entry) -> str:
    """The exact commands that install a GPU entry by hand, and how to use its container."""
    dockerfile = containers.dockerfile_path(entry).as_posix()
    tag = f"rocmlab:{entry.name}"
    if entry.kind == "canary":
        lines = [f"# {entry.name}: pre-releases from {entry.torch_index} (weekly canary)"]
    else:
        lines = [
            f"# {entry.name}: ROCm {entry.rocm} ({entry.released}), PyTorch {entry.pytorch}, "
            f"Python {entry.python}, {entry.install.method}"
        ]
    if entry.kind == "rocm" and entry.install.method == "image":
        lines += [
            f"docker pull {entry.install.image}",
            (
                f'{DOCKER_RUN} -v "$PWD:{containers.REPO_MOUNT}" -w {containers.REPO_MOUNT} {entry.install.image} '
                "bash -c 'pip install -e \".[labs]\" && bash'"
            ),
        ]
    elif entry.kind == "rocm":
        venv = f".envs/{entry.name}"
        lines += [
            f"python{entry.python} -m venv {venv}",
            f'{venv}/bin/pip install "{entry.install.requirement_for(entry.runner_gfx)}" --index-url {entry.install.index_url}',
            f'{venv}/bin/pip install -e ".[labs]"',
        ]
        if entry.install.method == "multiarch":
            lines.append(
                f"# other GPUs: replace {entry.runner_gfx} by one of {' '.join(entry.gfx)} "
                "(several: torch[device-gfxA,device-gfxB])"
            )
    build_arg = (
        f" --build-arg GFX={entry.runner_gfx}" if entry.gfx and entry.kind != "rocm" or _multiarch(entry) else ""
    )
    lines += [
        f"# or the container: docker build -f {dockerfile}{build_arg} -t {tag} .",
        f'#   {DOCKER_RUN} --user "$(id -u):$(id -g)" -v "$PWD:{containers.REPO_MOUNT}" {tag}',
    ]
    return "\n".join(lines)


def _multiarch(entry: Entry) -> bool:
    return entry.kind == "rocm" and entry.install.method == "multiarch"


def render_dockerfile(entry: Entry) -> str:
    return containers.render_dockerfile(entry)


def write_dockerfiles(root: Path, check: bool = False) -> list[Path]:
    """Write env/docker/<name>.Dockerfile for every entry with a container; with check, only list the stale ones."""
    matrix = _matrix(root)
    return containers.write_dockerfiles(root, list(matrix.entries + matrix.canaries), check=check)


# ---------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`rocmlab env create NAME | list | dockerfiles [--check] | job NAME | check-entry NAME`."""
    sub = parser.add_subparsers(dest="env_command", required=True)
    create_p = sub.add_parser("create", help="build the virtual environment of a CPU or canary matrix entry")
    create_p.add_argument("name", help="matrix entry, e.g. cpu-previous")
    create_p.add_argument("--force", action="store_true", help="rebuild even when the pins are unchanged")
    create_p.add_argument("--timeout", type=float, default=3600, help="seconds per install step")
    sub.add_parser("list", help="matrix entries and the state of their environments")
    docker = sub.add_parser("dockerfiles", help="regenerate env/docker/ from env/matrix.toml")
    docker.add_argument("--check", action="store_true", help="only report Dockerfiles that differ")
    job = sub.add_parser("job", help="one freshness job: build the entry's container, pre-fetch, check, run the labs")
    job.add_argument("name", help="matrix entry, e.g. rocm-10.1 (a CPU entry runs the same job without a GPU)")
    job.add_argument("--profile", default=GPU, choices=PROFILE_NAMES)
    job.add_argument("--gfx", help="GPU target to build for and expect (default: the entry's runner_gfx)")
    job.add_argument("--labs", nargs="*", default=[], help="only these labs (default: all)")
    job.add_argument("--cache-dir", type=Path, required=True, help="host folder mounted as the model cache volume")
    job.add_argument("--results", type=Path, default=Path("results"), help="host folder for records and artifacts")
    job.add_argument("--image-repo", help="registry repository for the layer cache, e.g. ghcr.io/OWNER/rocmlab")
    job.add_argument("--timeout", type=float, default=9000, help="seconds per docker step")
    job.add_argument("--run-id", default=os.environ.get("GITHUB_RUN_ID", "local"), help="suffix of container names")
    check = sub.add_parser("check-entry", help="inside a container: torch, HIP and gfx arch against the entry")
    check.add_argument("name")
    check.add_argument("--gfx", help="the GPU target the job is for (default: the entry's runner_gfx)")
    check.add_argument("--out", type=Path, help="also write the report (JSON) here")


def main(*, env_command: str, course: Course, **options) -> int:
    """One sub-command of `rocmlab env`, on the course the command line found."""
    handlers = {
        "create": create_command,
        "list": list_command,
        "dockerfiles": dockerfiles_command,
        "job": jobs.job_command,
        "check-entry": jobs.check_entry_command,
    }
    return handlers[env_command](course.root, **options)


def create_command(root: Path, *, name: str, force: bool = False, timeout: float = 3600) -> int:
    """A CPU entry's environment is built; a GPU entry's install commands are printed."""
    entry = _matrix(root).get(name)
    if entry.on_gpu:
        print(install_recipe(entry))
        return ExitCode.OK
    create(name, root=root, force=force, timeout_s=timeout)
    return ExitCode.OK


def list_command(root: Path) -> int:
    for s in list_environments(root):
        print(f"{s.name:24} {s.kind:6} {s.status:9} {s.state:9} {s.path}")
    return ExitCode.OK


def dockerfiles_command(root: Path, *, check: bool = False) -> int:
    """Regenerate env/docker/; with ``check``, list the stale Dockerfiles and return FAILED when there are any."""
    changed = write_dockerfiles(root, check=check)
    verb = "out of date" if check else "written"
    for path in changed:
        print(f"{verb}: {path}")
    if not changed:
        print("env/docker/ matches env/matrix.toml")
    return ExitCode.FAILED if check and changed else ExitCode.OK
