"""One sandboxed execution: the limits it runs under, the policy file its entry points read
(``rocmlab.sandbox.entry``, ``rocmlab.sandbox.forkserver``), and its folders, worker and
notebook run. ``rocmlab.sandbox.limits`` plans runs and makes them; a run knows nothing of the
backend that confines it beyond what its policy and kernelspec say.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import processes
from .cgroups import KERNELS, procs_files
from .mounts import unmount

if TYPE_CHECKING:
    from ..execution.worker import Worker

KERNEL_NAME = "rocmlab-sandbox"


@dataclass
class Limits:
    """Per-kernel limits; wall times come from the lab's profile (lab.toml)."""

    memory_mb: int = 4096  # RLIMIT_AS of the kernel and each process it starts; 0: none
    max_processes: int = 256  # RLIMIT_NPROC for the grader user (threads count too)
    max_file_mb: int = 256  # RLIMIT_FSIZE: largest file the kernel may write
    # What the kernel may write in all (work folder, temp folders, /dev/shm): as root one tmpfs of
    # this size per run, whose pages are memory besides RLIMIT_AS's; elsewhere each temp folder's size
    disk_mb: int = 2048
    max_cell_output_kb: int = 1024  # stream/display output kept per cell
    max_output_kb: int = 8192  # output kept per notebook

    def engine_options(self) -> dict:
        """How the worker's papermill engine enforces the output caps and cell time limits."""
        return {
            "cell_output_limit": self.max_cell_output_kb * 1024,
            "notebook_output_limit": self.max_output_kb * 1024,
            "interrupt_on_timeout": True,
            "store_widget_state": False,
            # the run's sandbox is torn down after it: no need to wait (about 0.5 s) for a polite exit
            "shutdown_kernel": "immediate",
        }


@dataclass
class Policy:
    """What the worker and kernel entry points apply; written as JSON beside each run."""

    limits: dict
    uid: int | None = None
    gid: int | None = None
    home: str = ""
    isolate: bool = False  # inside fresh namespaces: bring lo up, hide paths
    hide: list = field(default_factory=list)
    cell_timeout_s: int = 0
    scratch: str = ""  # root-only folder for mount bookkeeping
    bwrap: list = field(default_factory=list)  # bubblewrap: its command line around the kernel
    expose: list = field(default_factory=list)  # paths the kernel needs below closed or private temp folders
    preimport: list = field(default_factory=list)  # modules the kernel imports before ipykernel starts
    forked: dict = field(default_factory=dict)  # a forked kernel's private view: folders to "cover" and "keep"
    landlock: dict = field(default_factory=dict)  # landlock: the kernel's "read", "write" and "devices" paths
    environment: list | None = None  # the variables the kernel keeps (``kernel_variables``); None: all
    temp: dict = field(default_factory=dict)  # each private temp folder -> its folder in the run's own space
    cgroup: list = field(default_factory=list)  # the kernel's own cgroup: the ``cgroup.procs`` files it joins


# What a kernel keeps of the environment it is started with, besides what its run sets
# (``kernel_variables``): the system's (search path, locale, libraries), the course's Python
# environment, and which GPUs and model caches this machine's kernels use.
SYSTEM_VARIABLES = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_NUMERIC",
    "LC_MESSAGES",
    "TZ",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "ROCM_PATH",
    "HIP_PATH",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "HSA_OVERRIDE_GFX_VERSION",
    "HF_HOME",
    "HF_HUB_CACHE",
)


def kernel_variables(run_env: dict) -> list[str]:
    """The allow-list of a run's kernel environment: ``SYSTEM_VARIABLES``, what the run sets
    (``run_env``: its HOME, TMPDIR, thread pools, the lab's variables) and what the worker sets
    for every kernel (``execution.worker.KERNEL_VARIABLES``)."""
    from ..execution.worker import KERNEL_VARIABLES

    return sorted({*SYSTEM_VARIABLES, *run_env, *KERNEL_VARIABLES})


@dataclass
class Run:
    """The folders of one sandboxed execution: ``private`` is root-only, ``work`` is the kernel's."""

    folder: Path
    private: Path
    work: Path
    worker: Worker
    env: dict
    uid: int | None
    engine_options: dict
    cell_timeout_s: int = 0
    upcoming: Run | None = None  # the slot's next run, whose kernel the worker starts during this one
    space: Path | None = None  # the run's own size-limited tmpfs (as root), unmounted after it
    cgroup: str = ""  # the kernel's own cgroup (``cgroups.KERNELS``), killed and removed after it

    def kernel_spec(self):
        """What the worker needs to start this run's kernel ahead of its notebook."""
        from ..execution.worker import Spec

        return Spec(
            input="",
            output="",
            cwd=str(self.work),
            parameters={},
            cell_timeout_s=self.cell_timeout_s,
            timeout_s=0,
            python=self.worker.python,
            kernel_name=KERNEL_NAME,
            extra_env=self.env,
            engine_options=self.engine_options,
        )

    def execute(self, source: Path, output: Path, parameters: dict, cell_timeout_s: int, timeout_s: int, harness=None):
        """Run the notebook at ``source`` here, every cell even after errors, then the lab's checks
        when ``harness`` says which (``rocmlab.harness``); ``(executed or None, outcome)``."""
        import nbformat

        from ..execution.worker import Spec

        outcome = self.worker.run(
            Spec(
                input=str(source),
                output=str(output),
                cwd=str(self.work),
                parameters=parameters,
                cell_timeout_s=cell_timeout_s,
                timeout_s=timeout_s,
                allow_errors=True,
                python=self.worker.python,
                kernel_name=KERNEL_NAME,
                extra_env=self.env,
                engine_options={**self.engine_options, **({"harness": self.swept(harness)} if harness else {})},
            ),
            prestart=self.upcoming.kernel_spec() if self.upcoming else None,
        )
        try:
            return nbformat.read(output, as_version=4), outcome
        except (OSError, ValueError):
            return None, outcome

    def swept(self, harness: dict) -> dict:
        """The harness's options with what ends every process of this run before its fresh kernel
        starts (``execution.worker.end_learner_run``): the run's grader user and its kernel's cgroup."""
        cgroup = procs_files(KERNELS.folders(self.cgroup)) if self.cgroup else []
        return {**harness, "sweep": {"uid": self.uid, "cgroup": cgroup}}

    def cleanup(self) -> None:
        self.release()
        shutil.rmtree(self.folder, ignore_errors=True)

    def release(self) -> None:
        """End what the run's kernel left running, then give back its cgroup and its own space."""
        if self.cgroup:
            KERNELS.kill(self.cgroup)
        if self.uid is not None:
            processes.kill_user(self.uid)
        if self.space is not None:
            unmount(self.space)
