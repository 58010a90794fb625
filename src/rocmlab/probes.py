"""What `rocmlab doctor` reads from a machine, behind one interface.

Every probe goes through a ``Machine``: ``LiveMachine`` reads this computer, ``RecordedMachine``
replays a machine recorded as a folder (``machine.json`` plus command outputs), so the doctor's
judgement is tested on an MI300X node, a Radeon desktop or a CUDA box without owning one.
Also here: parsers for the text that ``rocminfo`` and ``amd-smi static`` print.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError


@dataclass
class CommandResult:
    returncode: int
    stdout: str = ""
    stderr: str = ""


class Machine:
    """The probe interface. Every method returns None when the thing is absent or unreadable."""

    def read_file(self, path: str) -> str | None:
        raise NotImplementedError

    def list_dir(self, path: str) -> list[str] | None:
        raise NotImplementedError

    def run(self, argv: list[str], timeout_s: float = 20) -> CommandResult | None:
        """Run a command; None when the program is not installed."""
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def user(self) -> dict:
        """``{"name": str, "groups": [str], "uid": int}``."""
        raise NotImplementedError

    def can_read_write(self, path: str) -> bool | None:
        """True/False for an existing path, None when it does not exist."""
        raise NotImplementedError

    def disk_free_bytes(self, path: str) -> int | None:
        raise NotImplementedError

    def torch_info(self) -> dict | None:
        """See ``collect_torch_info``; None when torch is not importable."""
        raise NotImplementedError

    def package_version(self, name: str) -> str | None:
        """The version of an installed Python distribution (``rocm-sdk-core``), None when absent."""
        raise NotImplementedError


class LiveMachine(Machine):
    """This computer."""

    def read_file(self, path):
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def list_dir(self, path):
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None

    def run(self, argv, timeout_s=20):
        exe = shutil.which(argv[0]) or _in_rocm_bin(argv[0])
        if exe is None:
            return None
        try:
            done = subprocess.run(
                [exe, *argv[1:]], capture_output=True, text=True, timeout=timeout_s, errors="replace", check=False
            )
        except subprocess.TimeoutExpired:
            return CommandResult(124, "", f"{argv[0]} timed out after {timeout_s} s")
        except OSError as exc:
            return CommandResult(126, "", str(exc))
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def env(self):
        return dict(os.environ)

    def user(self):
        import grp
        import pwd

        uid = os.getuid()
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = str(uid)
        groups = []
        for gid in os.getgroups():
            try:
                groups.append(grp.getgrgid(gid).gr_name)
            except KeyError:
                groups.append(str(gid))
        return {"name": name, "uid": uid, "groups": sorted(set(groups))}

    def can_read_write(self, path):
        if not os.path.exists(path):
            return None
        return os.access(path, os.R_OK | os.W_OK)

    def disk_free_bytes(self, path):
        probe = Path(path)
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        try:
            return shutil.disk_usage(probe).free
        except OSError:
            return None

    def torch_info(self):
        return collect_torch_info()

    def package_version(self, name):
        from importlib import metadata

        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None


def _in_rocm_bin(program: str) -> str | None:
    candidate = Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / "bin" / program
    return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None


def collect_torch_info() -> dict | None:
    """What the doctor needs from torch, as plain data (the shape recorded machines store)."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 (a broken install raises more than ImportError)
        return {"importable": False, "error": f"{type(exc).__name__}: {exc}"}
    info = {
        "importable": True,
        "version": torch.__version__,
        "hip": getattr(torch.version, "hip", None),
        "cuda": getattr(torch.version, "cuda", None),
        "arch_list": [],
        "available": False,
        "devices": [],
    }
    try:
        info["arch_list"] = list(torch.cuda.get_arch_list())
        info["available"] = bool(torch.cuda.is_available())
        for index in range(torch.cuda.device_count() if info["available"] else 0):
            props = torch.cuda.get_device_properties(index)
            info["devices"].append(
                {
                    "name": props.name,
                    "arch": getattr(props, "gcnArchName", "") or "",
                    "capability": list(torch.cuda.get_device_capability(index)),
                    "warp_size": getattr(props, "warp_size", None),
                    "total_memory": props.total_memory,
                }
            )
    except Exception as exc:  # noqa: BLE001 (a driver problem must become a finding, not a crash)
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


class RecordedMachine(Machine):
    """A machine replayed from ``<folder>/machine.json``.

    Keys: ``files`` {path: text, or "@name" for a file in the folder}, ``dirs`` {path: [names]},
    ``commands`` {"argv joined by spaces": {"rc", "stdout" (or "@name"), "stderr"}},
    ``env``, ``user``, ``access`` {path: true/false}, ``disk_free_gb``, ``torch``.
    Anything not recorded is absent.
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        path = self.folder / "machine.json"
        try:
            self.data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: cannot read a recorded machine ({exc})") from None
        self.name = self.data.get("name", self.folder.name)

    def _text(self, value):
        if isinstance(value, str) and value.startswith("@"):
            return (self.folder / value[1:]).read_text(encoding="utf-8")
        return value

    def read_file(self, path):
        value = self.data.get("files", {}).get(path)
        return None if value is None else self._text(value)

    def list_dir(self, path):
        return self.data.get("dirs", {}).get(path)

    def run(self, argv, timeout_s=20):
        record = self.data.get("commands", {}).get(" ".join(argv))
        if record is None:
            return None
        return CommandResult(
            record.get("rc", 0), self._text(record.get("stdout", "")), self._text(record.get("stderr", ""))
        )

    def env(self):
        return dict(self.data.get("env", {}))

    def user(self):
        return dict(self.data.get("user", {"name": "user", "uid": 1000, "groups": []}))

    def can_read_write(self, path):
        return self.data.get("access", {}).get(path)

    def disk_free_bytes(self, path):
        gb = self.data.get("disk_free_gb")
        return None if gb is None else int(gb * 1e9)

    def torch_info(self):
        return self.data.get("torch")

    def package_version(self, name):
        return self.data.get("packages", {}).get(name)


# ---- parsers -------------------------------------------------------------------------------


@dataclass
class Agent:
    """One HSA agent from rocminfo."""

    name: str  # "gfx942" for a GPU, the CPU model for a CPU
    marketing_name: str = ""
    device_type: str = ""  # "GPU" | "CPU"
    compute_units: int | None = None
    wavefront_size: int | None = None
    isa: list[str] = field(default_factory=list)  # full target ids, e.g. "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"

    @property
    def gfx(self) -> str:
        """The target without feature suffixes ("gfx90a")."""
        return base_target(self.name)


_INT = re.compile(r"^\s*(\d+)")


def _int(value: str) -> int | None:
    match = _INT.match(value)
    return int(match.group(1)) if match else None


def parse_rocminfo(text: str) -> list[Agent]:
    """All agents in rocminfo output, CPU and GPU, in order.

    rocminfo prints each agent as a block opened by ``Agent N`` between ``*******`` rules, with
    ``Key: value`` lines; the agent's own ``Name`` comes first, and the ``ISA Info`` section
    nested below repeats ``Name`` for each ISA, so the first ``Name`` wins.
    """
    agents: list[Agent] = []
    current: Agent | None = None
    in_isa = False
    for raw in text.splitlines():
        line = raw.strip()
        if re.fullmatch(r"Agent \d+", line):
            current = Agent(name="")
            agents.append(current)
            in_isa = False
            continue
        if current is None or ":" not in line:
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "ISA Info":
            in_isa = True
        elif key == "Name" and in_isa:
            current.isa.append(value)
        elif key == "Name" and not current.name:
            current.name = value
        elif key == "Marketing Name":
            current.marketing_name = value
        elif key == "Device Type":
            current.device_type = value
        elif key == "Compute Unit":
            current.compute_units = _int(value)
        elif key == "Wavefront Size":
            current.wavefront_size = _int(value)
    return agents


def gpu_agents(text: str) -> list[Agent]:
    return [a for a in parse_rocminfo(text) if a.device_type.upper() == "GPU"]


def parse_amdsmi_static(text: str) -> list[dict]:
    """GPUs from ``amd-smi static --asic`` text: ``GPU: N`` blocks of indented ``KEY: value``."""
    gpus: list[dict] = []
    for raw in text.splitlines():
        line = raw.strip()
        match = re.fullmatch(r"GPU:\s*(\d+)", line)
        if match:
            gpus.append({"gpu": int(match.group(1))})
            continue
        if gpus and ":" in line:
            key, _, value = line.partition(":")
            if value.strip():
                gpus[-1][key.strip().lower()] = value.strip()
    return gpus


def parse_amdsmi_version(text: str) -> dict:
    """``AMDSMI Tool: x | AMDSMI Library version: y | ROCm version: z`` → {"tool", "library", "rocm"}."""
    out = {}
    for part in text.replace("\n", "|").split("|"):
        key, _, value = part.partition(":")
        key = key.strip().lower()
        if "rocm" in key:
            out["rocm"] = value.strip()
        elif "library" in key:
            out["library"] = value.strip()
        elif "tool" in key:
            out["tool"] = value.strip()
    return out


def base_target(target: str) -> str:
    """``"amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"`` or ``"gfx90a:xnack-"`` → ``"gfx90a"``."""
    target = target.strip()
    if "--" in target:
        target = target.rsplit("--", 1)[1]
    return target.split(":", 1)[0]


def target_features(target: str) -> dict[str, str]:
    """``"gfx90a:sramecc+:xnack-"`` → ``{"sramecc": "+", "xnack": "-"}``."""
    if "--" in target:
        target = target.rsplit("--", 1)[1]
    features = {}
    for part in target.split(":")[1:]:
        if part and part[-1] in "+-":
            features[part[:-1]] = part[-1]
    return features


def target_compatible(device: str, built: str) -> bool:
    """Can code built for ``built`` run on ``device``? Same base target, and no feature that
    both name with opposite settings (an unnamed feature means the code runs either way)."""
    if base_target(device) != base_target(built):
        return False
    have, need = target_features(device), target_features(built)
    return all(have.get(name, value) == value for name, value in need.items())


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """Leading dotted digits of a version string: ``"6.2.4-120"`` → (6, 2, 4)."""
    if not text:
        return None
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


# ---- the ROCm version ------------------------------------------------------------------------

# TheRock's Python packages (pip): `rocm` (meta), `rocm-sdk-core`, `rocm-sdk-libraries-<family>`,
# `rocm-sdk-devel`; early nightlies installed `rocm-sdk` instead of `rocm`.
# https://github.com/ROCm/TheRock/blob/main/RELEASES.md
ROCM_SDK_PACKAGES = ("rocm-sdk-core", "rocm", "rocm-sdk")
TORCH_ROCM_LABEL = re.compile(r"\+rocm(?P<version>\d+(?:\.\d+)*)")


@dataclass
class RocmVersions:
    """The ROCm a machine has: the one PyTorch runs on (``runtime``) and the one installed on the
    system (``system``), each with where it was read. Either may be None."""

    runtime: str | None = None
    runtime_source: str = ""
    system: str | None = None
    system_source: str = ""

    @property
    def best(self) -> tuple[str | None, str]:
        """(version, source): the runtime's when known, else the system's."""
        return (self.runtime, self.runtime_source) if self.runtime else (self.system, self.system_source)


def rocm_versions(machine: Machine, torch_info: dict | None = None) -> RocmVersions:
    """Read both ROCm versions. ``torch_info`` is ``machine.torch_info()`` when the caller has it."""
    found = RocmVersions()
    found.runtime, found.runtime_source = _runtime_rocm(machine, torch_info)
    found.system, found.system_source = _system_rocm(machine)
    return found


def _runtime_rocm(machine: Machine, torch_info: dict | None) -> tuple[str | None, str]:
    """TheRock's packages name the exact release; a ROCm torch wheel carries it in its local label
    (``2.12.0+rocm7.14.0``); ``torch.version.hip`` gives only major.minor (its third part is a build number)."""
    for name in ROCM_SDK_PACKAGES:
        version = machine.package_version(name)
        if version:
            return version, f"{name} package"
    info = torch_info if torch_info is not None else (machine.torch_info() or {})
    label = TORCH_ROCM_LABEL.search(info.get("version") or "")
    if label:
        return label["version"], "torch version label"
    hip = parse_version(info.get("hip"))
    if hip and len(hip) >= 2:
        return f"{hip[0]}.{hip[1]}", "torch.version.hip"
    return None, ""


def _system_rocm(machine: Machine) -> tuple[str | None, str]:
    """$ROCM_PATH/.info/version, else the newest ``core-X.Y`` folder (7.14 is newer than 7.2), else amd-smi."""
    root = machine.env().get("ROCM_PATH", "/opt/rocm")
    text = machine.read_file(f"{root}/.info/version")
    if text and text.strip():
        return text.strip(), f"{root}/.info/version"
    cores = [n for n in (machine.list_dir(root) or []) if n.startswith("core-") and parse_version(n[5:])]
    if cores:
        newest = max(cores, key=lambda n: parse_version(n[5:]))
        text = machine.read_file(f"{root}/{newest}/.info/version")
        if text and text.strip():
            return text.strip(), f"{root}/{newest}/.info/version"
        return newest[5:], f"{root}/{newest}"
    result = machine.run(["amd-smi", "version"])
    if result and result.returncode == 0:
        version = parse_amdsmi_version(result.stdout).get("rocm")
        if version:
            return version, "amd-smi version"
    return None, ""
