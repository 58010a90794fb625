"""End a rank's process group so that gloo's threads end with it.

``torch.distributed.destroy_process_group()`` takes the group out of c10d's registries, but
the group object, and with it gloo's worker threads (``pt_gloo_runloop``) and its TCP loop
(``gloo_tcp_loop``), lives on while anything still refers to it. FSDP2 runs on DTensor, and
DTensor keeps process-wide caches keyed by ``DeviceMesh`` (sharding propagation, mesh
topology, redistribution plans); a DeviceMesh holds its ProcessGroup. After an FSDP2 run
those caches keep the group alive past ``destroy_process_group()``, and threads that outlive
the group can abort the interpreter at exit (see the gloo teardown note in the course's
field notes). ``end_process_group`` clears those caches first, so the group is freed.

A rank script: ``import torch.distributed.nn`` before ``init_process_group``, keep every
model, optimizer and state dict inside a function that has returned, then call
``end_process_group()`` on every rank and check that it returns ``[]``. Lab 05 teaches why.
"""

from __future__ import annotations

import gc
from pathlib import Path

# Thread names of the gloo backend (its work loop and its TCP event loop), as torch names them.
GLOO_THREADS = ("pt_gloo_runloop", "gloo_tcp_loop")


def backend_threads() -> list[str]:
    """Names of this process's live gloo backend threads (Linux ``/proc``; empty elsewhere).

    After ``destroy_process_group()`` the list is empty unless something still holds the group.
    """
    names = []
    for comm in Path("/proc/self/task").glob("*/comm"):
        try:
            name = comm.read_text().strip()
        except OSError:  # the thread ended while we looked
            continue
        if name in GLOO_THREADS:
            names.append(name)
    return sorted(names)


def clear_mesh_caches() -> list[str]:
    """Empty the DTensor caches that hold DeviceMesh objects; returns the names of those cleared.

    These are PyTorch internals; a cache a later PyTorch release renames is skipped, and
    ``end_process_group`` then reports the threads it could not end.
    """
    cleared = []
    for name, clear in _MESH_CACHES:
        try:
            clear()
        except (ImportError, AttributeError):
            continue
        cleared.append(name)
    return cleared


def end_process_group() -> list[str]:
    """Destroy the default process group after freeing what keeps it alive.

    Returns the gloo threads still running afterwards (``backend_threads``): ``[]`` after a clean
    teardown. Safe to call when no group is initialized.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        clear_mesh_caches()
        gc.collect()
        dist.destroy_process_group()
    gc.collect()
    return backend_threads()


def _clear_sharding_propagation():
    from torch.distributed.tensor import DTensor, debug

    debug._clear_sharding_prop_cache()  # python and C++ fast-path caches
    DTensor._op_dispatcher.sharding_propagator._propagate_tensor_meta_cached.cache_clear()


def _clear_mesh_topology():
    from torch.distributed.tensor._collective_utils import MeshTopoInfo

    MeshTopoInfo.build_from_mesh.cache_clear()


def _clear_redistribution_plans():
    from torch.distributed.tensor import _redistribute

    _redistribute.clear_redistribute_planner_cache()
    _redistribute._gen_transform_infos.cache_clear()


_MESH_CACHES = (
    ("sharding propagation", _clear_sharding_propagation),
    ("mesh topology", _clear_mesh_topology),
    ("redistribution plans", _clear_redistribution_plans),
)
