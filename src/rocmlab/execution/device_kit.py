"""The device kit (``make device-kit``): what ``ci/device_check.sh`` needs on a GPU machine that
reaches no package index and no model hub, gathered here into one ignored folder.

The machine's image has Python 3.12 with torch, triton, transformers, peft, accelerate and the
rest of ``IMAGE_PACKAGES``; the kit brings the rest, within what may travel with the working tree:

- ``wheels/``: rocmlab's own wheel and, for CPython 3.12 on manylinux x86_64, every package that
  ``rocmlab run`` and ``rocmlab doctor`` need (papermill, nbclient, ipykernel, jupytext and their
  dependencies) and the labs' packages the image lacks, less what the image already has;
- ``requirements.txt``: those wheels pinned, installed with ``--no-index --no-deps``;
- ``cache/``: the course model and lab 03's QC adapter, laid out as rocmlab's cache
  (``ROCMLAB_CACHE=<kit>/cache``);
- ``manifest.json``: every file's size, what was left to the image, the limit it was checked against.

``python -m rocmlab.execution.device_kit --out device-kit`` builds it; it fails, naming the biggest
items, when the kit and the working tree that travels with it exceed ``TRAVEL_LIMIT_BYTES``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from ..course.catalog import COURSE_MODEL
from ..errors import CommandFailed, ExitCode, InputError

TRAVEL_LIMIT_BYTES = 64 * 2**20  # the device tool sends at most 64 MiB: working tree and carried paths together
PYTHON_VERSION = "3.12"  # the device image's python3 (3.12.3 when last read)
# pip matches a manylinux tag exactly: the glibc levels wheels of these packages are published for.
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)
# rocmlab's dependencies the device check never imports: nbgrader (with jupyterlab and notebook behind
# it) serves `rocmlab build` and grading; `rocmlab run` and `rocmlab doctor` do not load it.
NOT_ON_DEVICE = frozenset({"nbgrader"})
# What a kernel that papermill runs never loads, left out for space (about 10 MiB): ipykernel imports
# debugpy only for a front end's debugger (ipykernel/debugger.py catches its ImportError), IPython
# imports jedi (and its parser parso) only to complete code (IPython/core/completer.py, _get_jedi).
INTERACTIVE_ONLY = frozenset({"debugpy", "jedi", "parso"})
# Published on PyPI as a source distribution only (jieba 0.42.1, the newest): built here into a
# pure-Python wheel, which installs anywhere.
SOURCE_ONLY = frozenset({"jieba"})
# The device image's Python packages (`pip list` on the image 'cuda', read 2026-11-17 for the
# workplace's notes on its GPU machines); a wheel of one of these stays out of the kit.
IMAGE_PACKAGES = frozenset(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
    jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
    mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
    numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
    nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
    nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
    onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
    propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
    pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
    pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
    scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
    sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
    tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
    torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop
    wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
)
MANIFEST = "manifest.json"
REQUIREMENTS = "requirements.txt"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def kit_requirements(requires: list[str]) -> list[str]:
    """The requirements the kit resolves, from rocmlab's own (``importlib.metadata.requires``):
    every base dependency but ``NOT_ON_DEVICE``, and the ``labs`` extra's packages the image lacks."""
    chosen = []
    for line in requires:
        req = Requirement(line)
        name = canonical(req.name)
        extra = req.marker is not None and "extra" in str(req.marker)
        if extra and not req.marker.evaluate({"extra": "labs"}):
            continue
        if name in NOT_ON_DEVICE or (extra and name in IMAGE_PACKAGES):
            continue
        chosen.append(f"{req.name}{req.specifier}")
    return chosen


def wheel_name(path: Path) -> tuple[str, str]:
    """(canonical project name, version) of a wheel file, from its name (PEP 427)."""
    name, version = path.name.split("-")[:2]
    return canonical(name), version


@dataclass
class Item:
    """One thing in the kit and its size, as the size report lists it."""

    path: str
    bytes: int


def tree_bytes(root: Path) -> int:
    """What travels with the kit: the working tree's tracked files and untracked ones git does not ignore."""
    proc = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        timeout=60,
    )
    if proc.returncode != 0:
        raise CommandFailed(f"git ls-files in {root}: {proc.stderr.decode(errors='replace').strip()}")
    total = 0
    for name in proc.stdout.decode().split("\0"):
        path = root / name
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def items_of(kit: Path) -> list[Item]:
    """Each wheel and each cached asset folder of ``kit``, biggest first."""
    found = [Item(f"wheels/{w.name}", w.stat().st_size) for w in (kit / "wheels").glob("*.whl")]
    for kind in ("models", "adapters"):
        for folder in sorted((kit / "cache" / kind).glob("*")):
            if folder.is_dir():
                size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
                found.append(Item(f"cache/{kind}/{folder.name}", size))
    return sorted(found, key=lambda item: -item.bytes)


def check_size(items: list[Item], limit_bytes: int, tree: int) -> str:
    """The size report; raises CommandFailed naming the biggest items when kit and tree exceed the limit."""
    kit = sum(item.bytes for item in items)
    report = f"kit {mib(kit)} + working tree {mib(tree)} = {mib(kit + tree)} of {mib(limit_bytes)}"
    if kit + tree > limit_bytes:
        biggest = ", ".join(f"{item.path} ({mib(item.bytes)})" for item in items[:5])
        raise CommandFailed(f"the device kit is too big: {report}; the biggest items: {biggest}")
    return report


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def pip_download(requirements: list[str], dest: Path, python: str = sys.executable) -> None:
    """Wheels of ``requirements`` and their dependencies for CPython 3.12 on manylinux x86_64."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    _pip(
        python,
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        *platforms,
        "--dest",
        str(dest),
        *requirements,
    )


def pip_wheel(targets: list[str], dest: Path, python: str = sys.executable) -> None:
    """Wheels built here, without their dependencies (rocmlab itself; the source-only packages)."""
    _pip(python, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dest), *targets)


def _pip(python: str, *args: str) -> None:
    proc = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise CommandFailed(f"pip {args[0]} failed: {(proc.stderr or proc.stdout).strip()[-1500:]}")


def package_source(root: Path, target: Path) -> Path:
    """What rocmlab's wheel is built from, copied to ``target``: setuptools builds in the source
    folder and would leave ``build/`` in the checkout. Links are copied as the files they name
    (``release_matrix.toml`` is env/matrix.toml)."""
    target.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(root / name, target / name)
    shutil.copytree(root / "src", target / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return target


def drop_wheels(wheels: Path, names: frozenset[str]) -> list[str]:
    """Remove the wheels of the projects ``names``; the names of those removed, sorted."""
    dropped = []
    for wheel in sorted(wheels.glob("*.whl")):
        name, _ = wheel_name(wheel)
        if name in names:
            wheel.unlink()
            dropped.append(name)
    return dropped


def check_pure(wheels: Path, names: frozenset[str]) -> None:
    """A wheel built here for one of ``names`` must install on any machine (``py3-none-any``)."""
    for wheel in wheels.glob("*.whl"):
        if wheel_name(wheel)[0] in names and not wheel.name.endswith("-none-any.whl"):
            raise CommandFailed(f"{wheel.name}: built here, but not pure Python: it would not install on the device")


def copy_assets(kit: Path) -> list[str]:
    """The course model and lab 03's adapter from this machine's cache into ``kit/cache``, in its layout."""
    from ..assets import tiny_model
    from ..lab import qc_adapter

    model = tiny_model.model_dir()
    adapter = qc_adapter.adapter_dir(COURSE_MODEL)
    if tiny_model.read_valid_manifest(model) is None:
        raise CommandFailed(f"the course model is not in the cache ({model}): run `make model` first")
    if qc_adapter.read_manifest(adapter) is None:
        raise CommandFailed(
            f"lab 03's QC adapter is not in the cache ({adapter}): run `python -m rocmlab.lab.qc_adapter`"
        )
    copied = []
    for source in (model, adapter):
        target = kit / "cache" / source.parent.name / source.name
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.lock"))
        copied.append(f"cache/{source.parent.name}/{source.name}")
    return copied


def build_kit(
    out: Path, root: Path, *, assets: bool = True, limit_bytes: int = TRAVEL_LIMIT_BYTES, python: str = sys.executable
) -> dict:
    """Build the kit into ``out`` (replacing it; built beside it first, so a failure leaves the old
    one); returns its manifest. Raises CommandFailed when it cannot be built or is too big."""
    from importlib import metadata

    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    # named like .gitignore's `.*.building/`: ignored, so not counted as working tree that travels
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", suffix=".building", dir=out.parent))
    try:
        wheels = work / "wheels"
        wheels.mkdir()
        requirements = kit_requirements(metadata.requires("rocmlab") or [])
        built_here = [r for r in requirements if canonical(Requirement(r).name) in SOURCE_ONLY]
        pip_download([r for r in requirements if r not in built_here], wheels, python)
        if built_here:
            pip_wheel(["--no-binary", ",".join(sorted(SOURCE_ONLY)), *built_here], wheels, python)
            check_pure(wheels, SOURCE_ONLY)
        left_to_image = drop_wheels(wheels, IMAGE_PACKAGES)
        left_out = drop_wheels(wheels, INTERACTIVE_ONLY)
        pinned = sorted(f"{name}=={version}" for name, version in map(wheel_name, wheels.glob("*.whl")))
        (work / REQUIREMENTS).write_text("\n".join(pinned) + "\n", encoding="utf-8")
        pip_wheel([str(package_source(root, work / "source"))], wheels, python)
        shutil.rmtree(work / "source")
        copied = copy_assets(work) if assets else []
        items = items_of(work)
        tree = tree_bytes(root)
        report = check_size(items, limit_bytes, tree)
        manifest = {
            "requirements": requirements,
            "pinned": pinned,
            "left_to_image": left_to_image,
            "left_out": left_out,
            "assets": copied,
            "items": [vars(item) for item in items],
            "kit_bytes": sum(item.bytes for item in items),
            "tree_bytes": tree,
            "limit_bytes": limit_bytes,
            "report": report,
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        work.rename(out)
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    """``python -m rocmlab.execution.device_kit --out DIR``: build the kit and print what is in it."""
    from ..root import find_root

    parser = argparse.ArgumentParser(
        prog="python -m rocmlab.execution.device_kit", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", default="device-kit", help="the kit's folder (default device-kit/, git-ignored)")
    parser.add_argument("--root", default=None, help="the course checkout (default: found from here)")
    parser.add_argument(
        "--no-assets", dest="assets", action="store_false", help="leave the course model and adapter out (tests)"
    )
    args = parser.parse_args(argv)
    try:
        root = find_root(args.root)
        manifest = build_kit(Path(args.out), root, assets=args.assets)
    except (CommandFailed, InputError) as err:
        print(f"device-kit: error: {err}", file=sys.stderr)
        return ExitCode.FAILED
    for item in manifest["items"]:
        print(f"{mib(item['bytes']):>10}  {item['path']}")
    print(f"left to the image: {', '.join(manifest['left_to_image']) or 'nothing'}")
    print(f"left out (interactive only): {', '.join(manifest['left_out']) or 'nothing'}")
    print(f"{args.out}: {manifest['report']}")
    return ExitCode.OK


if __name__ == "__main__":
    raise SystemExit(main())
