"""Run work items on a pool while shared prerequisites are prepared beside them, one after another.

Items that need no prerequisite start at once; an item that needs the first N starts the moment
the Nth is ready, so the total is about max(preparing + dependent items, independent items) rather
than their sum. Each prerequisite holds one of the ``jobs`` slots while it is prepared, and the next
one takes that slot before any item waiting for the first.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def run_by_need(
    function: Callable,
    items: list,
    jobs: int,
    *,
    needs: Callable[[object], int],
    stages: list[Callable[[], None]],
    unmet: Callable[[object, Exception], object],
    stop: Callable[[], None] = lambda: None,
) -> list:
    """``function(item)`` for every item, in item order, up to ``jobs`` at a time.

    ``needs(item)``: how many of ``stages``, in their order, the item needs (0: none). The stages
    run one after another, each in a slot of its own, as far as some item needs them. When one
    raises, the items that need it get ``unmet(item, error)`` instead of ``function(item)``, and
    the later stages do not run. Interrupted, the pending items are cancelled and ``stop()`` is
    called before re-raising.
    """
    depth = [int(needs(item)) for item in items]
    deepest = max(depth, default=0)
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        futures, error = {}, None
        stage = pool.submit(stages[0]) if deepest else None
        for level in range(deepest + 1):
            if level:
                error = error or _failure(stage)
                stage = pool.submit(stages[level]) if level < deepest and not error else None
            for i in (i for i, d in enumerate(depth) if d == level):
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
