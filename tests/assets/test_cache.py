"""rocmlab.assets.cache: the one way the model and the adapter are written into the cache, on a temporary cache."""

import json
import multiprocessing
import os

import pytest

from rocmlab.assets import cache

MANIFEST = "entry.json"


def builder(calls: list, *, fail: bool = False, payload: bytes = b"weights", hashes: bool = True):
    def build(out):
        calls.append(out)
        out.mkdir(parents=True)
        (out / "sub").mkdir()
        (out / "weights.bin").write_bytes(payload)
        (out / "sub" / "config.json").write_text("{}")
        if fail:
            raise RuntimeError("the build broke halfway")
        cache.write_manifest(out, MANIFEST, {"recipe": 1}, hashes=hashes)

    return build


def ensure(target, build, **kw):
    return cache.build_once(target, build, manifest=MANIFEST, what="test entry", lock_timeout_s=5, log=None, **kw)


def test_an_entry_is_built_once_whole_and_readable_by_everyone(tmp_path):
    target, calls = tmp_path / "models" / "m1", []
    umask = os.umask(0o077)  # a builder whose umask hides its files from everyone else
    try:
        assert ensure(target, builder(calls)) == target
    finally:
        os.umask(umask)
    manifest = json.loads((target / MANIFEST).read_text())
    assert manifest["recipe"] == 1 and set(manifest["files"]) == {"weights.bin", "sub/config.json"}
    assert manifest["files"]["weights.bin"] == {"bytes": 7, "sha256": cache.sha256_file(target / "weights.bin")}
    assert {oct(p.stat().st_mode & 0o777) for p in target.rglob("*") if p.is_file()} == {"0o644"}
    assert target.stat().st_mode & 0o777 == 0o755
    assert ensure(target, builder(calls)) == target and len(calls) == 1
    assert sorted(p.name for p in target.parent.iterdir()) == ["m1", "m1.lock"]  # no staging folder left


def test_a_failed_build_leaves_no_entry_and_the_old_one_is_never_half_replaced(tmp_path):
    target = tmp_path / "m"
    with pytest.raises(RuntimeError, match="broke halfway"):
        ensure(target, builder([], fail=True))
    assert not target.exists() and [p.name for p in tmp_path.iterdir()] == ["m.lock"]


@pytest.mark.parametrize("hashes", [True, False])
def test_an_entry_whose_files_differ_from_its_manifest_is_built_again(tmp_path, hashes):
    """A size check catches a cut file; a hash check also one of the same size (a sizes-only
    manifest is the format lab 03's cached adapters have)."""
    target, calls = tmp_path / "m", []
    ensure(target, builder(calls, hashes=hashes))
    (target / "weights.bin").write_bytes(b"WEIGHTS")  # same size, other bytes
    assert (cache.read_valid_manifest(target, MANIFEST) is None) is hashes
    (target / "weights.bin").write_bytes(b"cut")
    assert cache.read_valid_manifest(target, MANIFEST) is None
    ensure(target, builder(calls, hashes=hashes))
    assert len(calls) == 2 and (target / "weights.bin").read_bytes() == b"weights"
    (target / MANIFEST).unlink()  # an interrupted build: files, no manifest
    assert cache.read_valid_manifest(target, MANIFEST) is None


def _hold_lock(path: str, held, release) -> None:
    from filelock import FileLock

    with FileLock(path):
        held.set()
        release.wait(30)


def test_a_build_waits_for_another_process_and_gives_up_naming_the_lock(tmp_path):
    target, said = tmp_path / "m", []
    context = multiprocessing.get_context("spawn")
    held, release = context.Event(), context.Event()
    holder = context.Process(target=_hold_lock, args=(str(target) + ".lock", held, release))
    holder.start()
    try:
        assert held.wait(60)
        with pytest.raises(cache.CacheError, match=rf"waited 0 s for another process building {target}; .* delete"):
            cache.build_once(
                target, builder([]), manifest=MANIFEST, what="test entry", lock_timeout_s=0.2, log=said.append
            )
    finally:
        release.set()
        holder.join(30)
        if holder.is_alive():
            holder.kill()
    assert said == ["another process is building m; waiting for it (up to 0 s)"]


def test_a_waiter_uses_what_the_other_process_built(tmp_path, monkeypatch):
    """The entry is checked again once the lock is held: a build finished meanwhile is not redone."""
    target, calls = tmp_path / "m", []
    ensure(target, builder(calls))
    real, looks = cache.read_valid_manifest, []

    def first_look_misses(*args):  # as if another process finished while this one waited for the lock
        looks.append(args)
        return None if len(looks) == 1 else real(*args)

    monkeypatch.setattr(cache, "read_valid_manifest", first_look_misses)
    assert ensure(target, builder(calls)) == target and len(calls) == 1


def test_a_cache_that_cannot_be_made_or_written_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(cache.CacheError, match="cannot create the test entry cache .*set ROCMLAB_CACHE"):
        ensure(blocker / "models" / "m", builder([]))

    def read_only(out):
        raise OSError(30, "Read-only file system")

    with pytest.raises(cache.CacheError, match="cannot build the test entry in .*Read-only file system.*ROCMLAB_CACHE"):
        ensure(tmp_path / "m", read_only)

    def missing_input(out):
        raise FileNotFoundError(2, "No such file", "base-model")

    with pytest.raises(FileNotFoundError):  # the build's own failure is not the cache's
        ensure(tmp_path / "m2", missing_input)


def test_the_cache_root_is_the_argument_then_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "env"))
    assert cache.cache_root(tmp_path / "arg") == tmp_path / "arg"
    assert cache.cache_root() == tmp_path / "env"
