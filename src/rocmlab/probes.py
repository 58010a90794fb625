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


def rocm_version(machine: Machine) -> str | None:
    """The ROCm version installed on ``machine``: ``$ROCM_PATH/.info/version`` (default /opt/rocm),
    else the newest ``core-X.Y`` folder there (TheRock's layout, compared as versions: 7.14 is newer
    than 7.2), else what ``amd-smi version`` reports; None when there is no ROCm."""
    root = machine.env().get("ROCM_PATH", "/opt/rocm")
    text = machine.read_file(f"{root}/.info/version")
    if text:
        return text.strip()
    cores = [n for n in (machine.list_dir(root) or []) if n.startswith("core-")]
    for name in sorted(cores, key=lambda n: parse_version(n[5:]) or (), reverse=True):
        text = machine.read_file(f"{root}/{name}/.info/version")
        if text:
            return text.strip()
        if parse_version(name[5:]):
            return name[5:]
    result = machine.run(["amd-smi", "version"])
    if result and result.returncode == 0:
        return parse_amdsmi_version(result.stdout).get("rocm")
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
