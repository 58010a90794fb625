"""What `rocmlab doctor` reads from a machine, behind one interface.

Every probe goes through a ``Machine``: ``LiveMachine`` reads this computer, ``RecordedMachine``
replays a machine recorded as a folder (``machine.json`` plus command outputs), so the doctor's
judgement is tested on an MI300X node, a Radeon desktop or a CUDA box without owning one.
Also here: the GPUs of the ROCm kernel driver's topology (``kfd_gpus``) and parsers for what
``amd-smi`` prints. Nothing here parses ``rocminfo``: lab 01 asks the learner to, and this package
is importable in the learner's kernel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
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

    def python_version(self) -> str | None:
        """The version of the Python the labs run on ("3.12.3")."""
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

    def python_version(self):
        import platform

        return platform.python_version()


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
                    "multi_processor_count": getattr(props, "multi_processor_count", None),
                }
            )
    except Exception as exc:  # noqa: BLE001 (a driver problem must become a finding, not a crash)
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


class RecordedMachine(Machine):
    """A machine replayed from ``<folder>/machine.json``.

    Keys: ``files`` {path: text, or "@name" for a file in the folder}, ``dirs`` {path: [names]},
    ``commands`` {"argv joined by spaces": {"rc", "stdout" (or "@name"), "stderr"}},
    ``env``, ``user``, ``access`` {path: true/false}, ``disk_free_gb``, ``torch``, ``packages``,
    ``python`` (the version the labs run on).
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

    def python_version(self):
        return self.data.get("python")


# ---- parsers -------------------------------------------------------------------------------


def _int(value: str) -> int | None:
    match = re.match(r"^\s*(\d+)", value)
    return int(match.group(1)) if match else None


def amdsmi_json(text: str, command: str) -> list[dict]:
    """The devices of an ``amd-smi ... --json`` output: a JSON list of one object per device (a
    single object is one device); bad JSON is an InputError naming ``command``."""
    try:
        devices = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{command}: not JSON ({exc})") from None
    if isinstance(devices, dict):
        devices = [devices]
    return [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []


AMDSMI_ASIC = ["amd-smi", "static", "--asic", "--json"]


def parse_amdsmi_asic(text: str) -> list[dict]:
    """``amd-smi static --asic --json``: one ``{"gpu", "market_name", "device_id",
    "num_compute_units", "target_graphics_version"}`` per device amd-smi lists. amd-smi writes a
    list of ``{"gpu": N, "asic": {...}}`` (amdsmi_cli/amdsmi_commands.py, ``static --asic``), where
    ``device_id`` is a hex string ("0x74a1") and a value it could not read is "N/A"
    (py-interface/amdsmi_interface.py, ``amdsmi_get_gpu_asic_info``); those become None here."""
    found = []
    for device in amdsmi_json(text, " ".join(AMDSMI_ASIC)):
        asic = device.get("asic")
        if not isinstance(asic, dict):
            continue
        device_id = str(asic.get("device_id", ""))
        units = asic.get("num_compute_units")
        name, target = asic.get("market_name"), asic.get("target_graphics_version")
        found.append(
            {
                "gpu": device.get("gpu"),
                "market_name": name if isinstance(name, str) and name not in ("", "N/A") else None,
                "device_id": int(device_id, 16) if re.fullmatch(r"0[xX][0-9a-fA-F]+", device_id) else None,
                "num_compute_units": units if isinstance(units, int) else None,
                "target_graphics_version": target if isinstance(target, str) and target.startswith("gfx") else None,
            }
        )
    return found


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


# ---- the KFD topology and amd-smi's partitions ------------------------------------------------

# The ROCm kernel driver (KFD) lists every agent under /sys/class/kfd/kfd/topology/nodes/<N>/: a
# ``properties`` file of "name value" lines (simd_count, simd_per_cu, max_engine_clk_fcompute,
# gfx_target_version, drm_render_minor, unique_id, ...), ``gpu_id`` (0 for a CPU) and
# ``mem_banks/<M>/properties`` (size_in_bytes). A compute partition (an MI300X in CPX mode) is a
# node of its own with its own render node; the partitions of one GPU share its ``unique_id``.
# Format: the Linux driver (drivers/gpu/drm/amd/amdkfd/kfd_topology.c) and captures of real
# machines in ROCm/k8s-device-plugin's testdata/ (topo-mi300-cpx, topology-parsing-mi308).
KFD_TOPOLOGY = "/sys/class/kfd/kfd/topology/nodes"


def parse_kfd_properties(text: str) -> dict[str, int]:
    """``"simd_count 152\nsimd_per_cu 4"`` → ``{"simd_count": 152, "simd_per_cu": 4}`` (lines that
    are not a name and an integer are skipped)."""
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            found[parts[0]] = int(parts[1])
    return found


def gfx_of_version(version: int) -> str:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) as an LLVM target:
    90402 → gfx942, 90010 → gfx90a, 110501 → gfx1151, 120001 → gfx1201."""
    major, minor, step = version // 10000, version // 100 % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"


@dataclass(frozen=True)
class KfdGpu:
    """One GPU device of the KFD topology: a whole GPU, or one partition of it."""

    node: int
    gpu_id: int
    gfx: str
    cus: int
    clock_mhz: int
    memory_bytes: int
    render_minor: int
    unique_id: int  # the physical GPU: the same for all partitions of one GPU
    location_id: int
    device_id: int
    wavefront: int
    xccs: int
    capability: int | None = None  # the node's HSA_CAP_* bits; None where the properties lack the line

    @property
    def render_node(self) -> str:
        return f"/dev/dri/renderD{self.render_minor}"


def kfd_gpus(machine: Machine) -> list[KfdGpu]:
    """The GPU nodes of the KFD topology in node order (CPU nodes, with no SIMDs, left out)."""
    found = []
    names = machine.list_dir(KFD_TOPOLOGY) or []
    for name in sorted((n for n in names if n.isdigit()), key=int):
        base = f"{KFD_TOPOLOGY}/{name}"
        props = parse_kfd_properties(machine.read_file(f"{base}/properties") or "")
        if not props.get("simd_count") or not props.get("simd_per_cu"):
            continue
        bank = parse_kfd_properties(machine.read_file(f"{base}/mem_banks/0/properties") or "")
        found.append(
            KfdGpu(
                node=int(name),
                gpu_id=_int((machine.read_file(f"{base}/gpu_id") or "0").strip()) or 0,
                gfx=gfx_of_version(props.get("gfx_target_version", 0)),
                cus=props["simd_count"] // props["simd_per_cu"],
                clock_mhz=props.get("max_engine_clk_fcompute", 0),
                memory_bytes=bank.get("size_in_bytes") or props.get("local_mem_size", 0),
                render_minor=props.get("drm_render_minor", 0),
                unique_id=props.get("unique_id", 0),
                location_id=props.get("location_id", 0),
                device_id=props.get("device_id", 0),
                wavefront=props.get("wave_front_size", 0),
                xccs=props.get("num_xcc", 1),
                capability=props.get("capability"),
            )
        )
    return found


def parse_amdsmi_partitions(text: str) -> list[dict]:
    """``amd-smi static --partition --json``: one ``{"gpu", "compute", "memory", "partition_id"}``
    per device amd-smi lists ("N/A" where the GPU has no partitions, as on Radeon). The JSON is a
    list of ``{"gpu": N, "partition": {"compute_partition", "memory_partition", "partition_id"}}``
    (amd-smi's ``static`` command, amdsmi_cli/amdsmi_commands.py); bad JSON is an InputError."""
    found = []
    for device in amdsmi_json(text, "amd-smi static --partition --json"):
        part = device.get("partition")
        if not isinstance(part, dict):
            continue
        found.append(
            {
                "gpu": device.get("gpu"),
                "compute": str(part.get("compute_partition", "N/A")),
                "memory": str(part.get("memory_partition", "N/A")),
                "partition_id": part.get("partition_id"),
            }
        )
    return found


def partition_modes(machine: Machine) -> tuple[str, str] | None:
    """(compute mode, memory mode) of this machine's GPUs as amd-smi reports them, e.g.
    ("CPX", "NPS4"); None where amd-smi is missing, fails or reports none (a Radeon: "N/A")."""
    result = machine.run(["amd-smi", "static", "--partition", "--json"])
    if result is None or result.returncode != 0:
        return None
    modes = {(p["compute"], p["memory"]) for p in parse_amdsmi_partitions(result.stdout)}
    modes = {m for m in modes if "N/A" not in m}
    return sorted(modes)[0] if len(modes) == 1 else None


# ---- an agent's ISA: its target features ------------------------------------------------------

# How the ROCr runtime names a GPU agent's ISA ("gfx90a:sramecc+:xnack-"):
# - which targets have the sramecc and the xnack feature at all: the ISA registry,
#   ``IsaRegistry::GetSupportedIsas`` in ROCm/rocm-systems projects/rocr-runtime/runtime/hsa-runtime/
#   core/runtime/isa.cpp (commit aa4a8618ab2c9146a56bbf1f2307d920f11c53bf): a target whose entry says
#   ``unsupported`` never carries the feature in its name (every gfx10.3, gfx11 and gfx12 target);
# - sramecc: the ``GpuAgent`` constructor in ROCm/ROCR-Runtime runtime/hsa-runtime/core/runtime/
#   amd_gpu_agent.cpp (commit c7785a6da1c10c25bc8d527c00b1fe79bfbd84c9; the same lines are in
#   rocm-systems): on when HSA_ENABLE_SRAMECC is "1", off when "0" (core/util/flag.h), else the KFD
#   node's ``SRAM_EDCSupport`` capability bit (libhsakmt's ``HSA_CAPABILITY``, hsakmttypes.h), which
#   is bit 26 of the ``capability`` line of /sys/class/kfd/kfd/topology/nodes/N/properties:
#   ``HSA_CAP_SRAM_EDCSUPPORTED 0x04000000`` in torvalds/linux include/uapi/linux/kfd_sysfs.h
#   (commit 550d14e3942c7d93ed3a3f38d6de94673e24988f);
# - xnack is the process's mode, not the GPU's: the same constructor takes ``xnack_mode``, which
#   amd_topology.cpp's ``BindXnackMode`` gets from KFD after asking for the mode HSA_XNACK requests
#   (the driver may refuse). No file of the topology says what a process gets: "unknown".
SRAMECC_TARGETS = frozenset({"gfx906", "gfx908", "gfx90a", "gfx942", "gfx950"})
XNACK_TARGETS = frozenset(
    {"gfx801", "gfx810", "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx942", "gfx950"}
    | {"gfx1010", "gfx1011", "gfx1012", "gfx1013"}
)
FEATURELESS_TARGETS = frozenset(
    {"gfx700", "gfx701", "gfx702", "gfx802", "gfx803", "gfx805", "gfx90c"}
    | {f"gfx103{n}" for n in range(7)}
    | {"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"}
    | {"gfx1200", "gfx1201", "gfx1250", "gfx1251"}
)
HSA_CAP_SRAM_EDCSUPPORTED = 0x04000000
UNKNOWN = "unknown"


def agent_features(gfx: str, capability: int | None, env: dict) -> dict[str, str]:
    """The target features ROCr names for an agent of target ``gfx`` whose KFD node has the
    ``capability`` bits, in a process with the environment ``env``: {"sramecc": "+"/"-",
    "xnack": "unknown"} for the features the target has ("unknown" where the topology does not
    decide it); {} for a target without features; both unknown for a target the runtime's table
    above does not list."""
    if gfx not in SRAMECC_TARGETS | XNACK_TARGETS | FEATURELESS_TARGETS:
        return {"sramecc": UNKNOWN, "xnack": UNKNOWN}
    features = {}
    if gfx in SRAMECC_TARGETS:
        forced = {"1": "+", "0": "-"}.get(env.get("HSA_ENABLE_SRAMECC", ""))
        on = None if capability is None else bool(capability & HSA_CAP_SRAM_EDCSUPPORTED)
        features["sramecc"] = forced or (UNKNOWN if on is None else "+" if on else "-")
    if gfx in XNACK_TARGETS:
        features["xnack"] = UNKNOWN
    return features


def isa_name(gfx: str, features: dict[str, str]) -> str:
    """The agent's ISA as far as it is known: ``gfx942`` with each decided feature
    (``gfx942:sramecc+``); a feature reported unknown is left out of the name."""
    return gfx + "".join(f":{name}{value}" for name, value in sorted(features.items()) if value in ("+", "-"))


# ---- marketing names: libdrm's amdgpu.ids ----------------------------------------------------

# libdrm ships the table AMD's user-mode drivers name GPUs from (Debian: libdrm-common):
# "device_id,<tab>revision_id,<tab>product_name" lines in hex, '#' comments and a version line
# (mesa/drm data/amdgpu.ids). libdrm names a device only where both its PCI device id and its PCI
# revision match a line, the first that does (``parse_one_line`` in amdgpu/amdgpu_asic_id.c, mesa/drm
# at 369990d9660a387f618d0eedc341eb285016243b, read through the X11Libre/mirror.fdo.drm mirror).
# The KFD topology gives the device id; the revision is the PCI device's ``revision`` attribute
# (Linux Documentation/ABI/testing/sysfs-bus-pci), reached from the node's render minor.
AMDGPU_IDS = "/usr/share/libdrm/amdgpu.ids"


def parse_amdgpu_ids(text: str) -> dict[int, dict[int, str]]:
    """libdrm's amdgpu.ids → {device id: {revision: name}} (the first line of a pair wins, as in libdrm)."""
    found: dict[int, dict[int, str]] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split(",")
        if len(parts) < 3 or not parts[2].strip():
            continue
        try:
            device, revision = int(parts[0], 16), int(parts[1], 16)
        except ValueError:
            continue
        found.setdefault(device, {}).setdefault(revision, parts[2].strip())
    return found


def pci_revision(machine: Machine, render_minor: int) -> int | None:
    """The PCI revision of the device behind ``/dev/dri/renderD<minor>`` ("0xc0" in sysfs); None when unreadable."""
    text = (machine.read_file(f"/sys/class/drm/renderD{render_minor}/device/revision") or "").strip()
    return int(text, 16) if re.fullmatch(r"0[xX][0-9a-fA-F]+", text) else None


def marketing_name(ids: dict[int, dict[int, str]], device_id: int, revision: int | None) -> str | None:
    """The GPU's name in amdgpu.ids: the line of its device id and revision, as libdrm matches it;
    where the revision is unknown, the name only when every line of the device id gives the same one."""
    names = ids.get(device_id, {})
    if revision is not None:
        return names.get(revision)
    distinct = set(names.values())
    return distinct.pop() if len(distinct) == 1 else None
