"""Run work items on a pool while a shared prerequisite is prepared beside them.

Items that do not need the prerequisite start at once; those that need it start the moment it
is ready, so the total is about max(prepare + dependent items, independent items) rather than
their sum. The prerequisite holds one of the ``jobs`` slots while it is prepared.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def run_by_need(
    function: Callable,
    items: list,
    jobs: int,
    *,
    needs: Callable[[object], bool],
    prepare: Callable[[], None],
    unmet: Callable[[object, Exception], object],
    stop: Callable[[], None] = lambda: None,
) -> list:
    """``function(item)`` for every item, in item order, up to ``jobs`` at a time.

    ``prepare()`` runs first, in a slot of its own, and only when some item ``needs`` it. When it
    raises, each item that needs it gets ``unmet(item, error)`` instead of ``function(item)``.
    Interrupted, the pending items are cancelled and ``stop()`` is called before re-raising.
    """
    waiting = [i for i, item in enumerate(items) if needs(item)]
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        ready = pool.submit(prepare) if waiting else None
        futures = {i: pool.submit(function, item) for i, item in enumerate(items) if i not in waiting}
        error = _failure(ready) if ready else None
        for i in waiting:
            futures[i] = pool.submit(unmet, items[i], error) if error else pool.submit(function, items[i])
        return [futures[i].result() for i in range(len(items))]
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        stop()
        raise
    finally:
        pool.shutdown(wait=True)


def _failure(future) -> Exception | None:
    try:
        future.result()
    except Exception as exc:  # noqa: BLE001 (reported on each item that needed it)
        return exc
    return None
