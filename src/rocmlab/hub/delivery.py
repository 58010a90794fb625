"""Delivering a lab into a learner's home, and a newer version of it mid-course, without ever
overwriting what the learner changed.

The first delivery copies the built lab folder (``<lab>.ipynb`` and its ``data/``) and records in
``<lab>/.rocmlab-delivered.json`` the version and the SHA-256 of every file as delivered. When the
hub later has a newer version of the lab (``rocmlab build`` after a bump; the notebook's
``rocmlab.version`` metadata says which), each file is handled on its own:

- missing in the home (deleted or renamed by the learner): put back where it was;
- unchanged since it was delivered: replaced by the new version in place;
- changed by the learner: kept as it is; the new version goes beside it as
  ``<stem>.v<version><suffix>`` (``01-rocm-setup.v1.2.0.ipynb``).

``UPDATE-<version>.md`` in the lab folder then tells the learner, in Chinese and English, which
files are new or kept and what changed: the lab's CHANGELOG sections newer than the version they
had. The grader accepts a notebook of either version (an older one is flagged ``old_version``).

Why not nbgitpuller's merge: on a conflict it keeps the learner's file and drops the upstream
change, so a learner who edited the notebook (every learner) would never see the new version;
nbgitpuller stays the launch link's way in (``rocmlab.site.launch``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

MANIFEST = ".rocmlab-delivered.json"
DELIVERY_TIMEOUT_S = 120
CANCEL_POLL_S = 0.2  # how often a waiting delivery looks whether its start was cancelled
IGNORED = ("__pycache__", ".ipynb_checkpoints")


@dataclass
class Delivery:
    lab_id: str
    action: str  # new | updated | current
    version: str = ""
    previous: str = ""
    replaced: list[str] = field(default_factory=list)  # unchanged files updated in place (and restored ones)
    beside: list[str] = field(default_factory=list)  # new versions written next to the learner's edits
    note: str = ""  # the UPDATE file, relative to the lab folder


def read_regular(path: Path) -> bytes | None:
    """The bytes of a regular file; None for anything else (a FIFO, a device, a folder, nothing).
    Opened without blocking: a FIFO a learner put where a lab's file goes never stalls a delivery."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return file.read()


def write_regular(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` without blocking: a FIFO there (no reader) fails at once (ENXIO)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        file.write(data)


def sha256(path: Path) -> str:
    """The digest of a regular file ('' for anything else: it matches no delivered file)."""
    data = read_regular(path)
    return "" if data is None else hashlib.sha256(data).hexdigest()


def notebook_version(path: Path) -> str:
    """The ``rocmlab.version`` of a built notebook ('' when unreadable or absent)."""
    return notebook_version_of(read_regular(path) or b"")


def beside_name(relative: str, version: str) -> str:
    path = Path(relative)
    return str(path.with_name(f"{path.stem}.v{version}{path.suffix}"))


def built_files(src: Path) -> list[str]:
    return sorted(
        str(path.relative_to(src))
        for path in src.rglob("*")
        if path.is_file() and not any(part in IGNORED for part in path.relative_to(src).parts)
    )


def newer(version: str, than: str) -> bool:
    try:
        return Version(version) > Version(than)
    except InvalidVersion:
        return version != than


def changelog_text(changelog: Path | str | None) -> str:
    """A CHANGELOG's text, from its path ('' when missing) or as given."""
    if isinstance(changelog, Path):
        return changelog.read_text(encoding="utf-8") if changelog.is_file() else ""
    return changelog or ""


def changelog_since(changelog: Path | str | None, previous: str, version: str) -> str:
    """The CHANGELOG sections (``## X.Y.Z``) newer than ``previous`` up to ``version``, as written."""
    sections = re.split(r"^## ", changelog_text(changelog), flags=re.MULTILINE)[1:]
    kept = []
    for section in sections:
        heading = section.split("\n", 1)[0].strip()
        if newer(heading, previous) and not newer(heading, version):
            kept.append("## " + section.rstrip() + "\n")
    return "\n".join(kept)


def read_manifest(dest: Path) -> dict:
    try:
        data = json.loads(read_regular(dest / MANIFEST) or b"")
    except ValueError:
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("files"), dict) else {}


def read_built(src: Path) -> dict[str, bytes]:
    """A built lab folder's files by relative name ({} when ``src`` is not a built lab)."""
    if not (src / f"{src.name}.ipynb").is_file():
        return {}
    return {name: (src / name).read_bytes() for name in built_files(src)}


def deliver_lab(src: Path, dest: Path, owner: tuple[int, int] | None = None, changelog: Path | str | None = None):
    """Deliver the built lab folder ``src`` to ``dest`` (see the module's doc); None when ``src`` is
    not a built lab. ``owner`` (uid, gid) owns everything written; ``changelog`` is the lab's
    CHANGELOG.md (its path or text), quoted in the update note. Runs as the caller: for a real
    account use ``deliver_as_user``."""
    built = read_built(src)
    return deliver_files(src.name, built, dest, owner, changelog_text(changelog)) if built else None


def deliver_files(lab_id: str, built: dict[str, bytes], dest: Path, owner=None, changelog: str = "") -> Delivery:
    """``deliver_lab`` of files already read (``read_built``)."""
    version = notebook_version_of(built[f"{lab_id}.ipynb"])
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in built.items()}
    if not dest.exists():
        for name, data in built.items():
            _put(data, dest / name, owner)
        _write_manifest(dest, version, digests, owner)
        return Delivery(lab_id, "new", version, replaced=sorted(built))
    manifest = read_manifest(dest)
    previous = manifest.get("version") or notebook_version(dest / f"{lab_id}.ipynb")
    if not newer(version, previous) or _exists(dest / beside_name(f"{lab_id}.ipynb", version)):
        return Delivery(lab_id, "current", version, previous)
    delivery = Delivery(lab_id, "updated", version, previous)
    hashes = dict(manifest["files"]) if manifest else {}
    for name, data in built.items():
        target = dest / name
        if not _exists(target) or sha256(target) == hashes.get(name):
            _put(data, target, owner)
            hashes[name] = digests[name]
            delivery.replaced.append(name)
        elif sha256(target) != digests[name]:
            _put(data, dest / beside_name(name, version), owner)
            delivery.beside.append(beside_name(name, version))
    delivery.note = f"UPDATE-{version}.md"
    _write(dest / delivery.note, update_note(delivery, changelog_since(changelog, previous, version)), owner)
    _write_manifest(dest, version, hashes, owner)
    return delivery


def notebook_version_of(data: bytes) -> str:
    try:
        return str(json.loads(data)["metadata"]["rocmlab"]["version"])
    except (ValueError, KeyError, TypeError):
        return ""


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def update_note(delivery: Delivery, changes: str) -> str:
    lab, version, previous = delivery.lab_id, delivery.version, delivery.previous
    lines = [f"# {lab}: {previous} → {version}", ""]
    if delivery.beside:
        files = ", ".join(f"`{name}`" for name in delivery.beside)
        lines += [
            f"你修改过的文件保持原样，没有被覆盖。新版本放在旁边：{files}。"
            "可以在新版本里继续做，也可以把改动抄过去；两个版本都可以提交，评分程序都接受（旧版本会被标记为 old_version）。",
            "",
            f"Your edited files are kept as they were. The new version is beside them: {files}. Continue in "
            "the new version or copy your work across; either version can be submitted and is graded "
            "(an older one is flagged old_version).",
            "",
        ]
    if delivery.replaced:
        files = ", ".join(f"`{name}`" for name in delivery.replaced)
        lines += [f"未修改的文件已更新为新版本 · Files you had not changed are now the new version: {files}.", ""]
    changes = re.sub(r"^## ", "### ", changes, flags=re.MULTILINE).strip()
    lines += ["## 改动 · What changed", "", changes or "(the lab's CHANGELOG has no entry for this version)", ""]
    return "\n".join(lines).rstrip() + "\n"


def _put(data: bytes, dest: Path, owner) -> Path:
    missing = [folder for folder in [dest.parent, *dest.parent.parents] if not folder.exists()]
    dest.parent.mkdir(parents=True, exist_ok=True)
    for folder in missing:
        _own(folder, owner)
    write_regular(dest, data)
    _own(dest, owner)
    return dest


def _write(path: Path, text: str, owner) -> None:
    write_regular(path, text.encode("utf-8"))
    _own(path, owner)


def _write_manifest(dest: Path, version: str, hashes: dict, owner) -> None:
    _write(dest / MANIFEST, json.dumps({"version": version, "files": hashes}, indent=1, sort_keys=True) + "\n", owner)


def _own(path: Path, owner) -> None:
    if owner:
        os.chown(path, *owner, follow_symlinks=False)


def deliver_as_user(
    owner: tuple[int, int],
    src: Path,
    dest: Path,
    changelog: Path | None = None,
    lang: str = "",
    timeout_s: float = DELIVERY_TIMEOUT_S,
    cancelled=None,
):
    """``deliver_lab`` (and, with ``lang``, JupyterLab's language setting) in a forked child that
    has dropped to ``owner`` (uid, gid) for good (``as_user``): a home is its user's to shape,
    symlinks included, so the hub (root) never writes in it. The CHANGELOG and the built files are
    read here, before the fork (learners may not read solutions/). A child that fails or takes
    longer than ``timeout_s``, or whose ``cancelled`` event is set, is killed: an OSError."""
    from .language import set_lab_language

    text = changelog_text(changelog)
    built = read_built(src)
    if not built:
        return None

    def work():
        if lang:
            set_lab_language(Path("."), lang)
        return asdict(deliver_files(src.name, built, Path(dest.name), changelog=text))

    answer = as_user(owner, dest.parent, work, timeout_s, f"delivering {src.name} to {dest}", cancelled)
    return Delivery(**answer)


def as_user(owner: tuple[int, int], folder: Path, work, timeout_s: float, what: str, cancelled=None):
    """``work()`` in a forked child that has dropped to ``owner`` (uid, gid) for good, in ``folder``
    (opened here with O_NOFOLLOW: its ancestors need not be passable for the user); its result, a
    JSON value. The caller waits at most ``timeout_s``, and no longer than until ``cancelled`` (a
    threading.Event) is set: then the child is killed. A hung file system in a user's home costs
    that, never more. Failures are OSError naming ``what``."""
    import select
    import signal
    import time

    home = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK)
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(home)
        raise
    if pid == 0:  # the child: never returns
        status = 1
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(owner[1])
                os.setuid(owner[0])
            os.fchdir(home)
            answer, status = {"result": work()}, 0
        except BaseException as exc:  # noqa: BLE001 (reported to the parent, which raises)
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            try:
                os.write(write_end, json.dumps(answer).encode())
            finally:
                os._exit(status)
    os.close(write_end)
    os.close(home)
    chunks, deadline = [], time.monotonic() + timeout_s
    try:
        while True:
            wait = max(0.0, min(CANCEL_POLL_S, deadline - time.monotonic()))
            ready, _, _ = select.select([read_end], [], [], wait)
            if cancelled is not None and cancelled.is_set():
                os.kill(pid, signal.SIGKILL)
                raise OSError(f"{what}: cancelled")
            if not ready and time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                raise OSError(f"{what}: no answer within {timeout_s:g} s")
            if not ready:
                continue
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    answer = json.loads(b"".join(chunks) or b'{"error": "the child died"}')
    if "error" in answer:
        raise OSError(f"{what} as uid {owner[0]}: {answer['error']}")
    return answer["result"]


def deliver_all(built: Path, home: Path, course: Path | None = None) -> list[Delivery]:
    """Every built lab folder of ``built`` into ``home`` (CHANGELOGs from ``course``/solutions when
    there); the Helm chart's postStart hook runs this as ``python -m rocmlab.hub.delivery BUILT HOME``."""
    done = []
    for src in sorted(p for p in built.iterdir() if p.is_dir()):
        changelog = course / "solutions" / src.name / "CHANGELOG.md" if course else None
        delivery = deliver_lab(src, home / src.name, changelog=changelog)
        if delivery:
            done.append(delivery)
    return done


def main(argv: list[str]) -> None:
    """``BUILT HOME``: every lab of BUILT into HOME, what the Helm chart's postStart hook runs."""
    root = os.environ.get("ROCMLAB_ROOT")
    for item in deliver_all(Path(argv[0]), Path(argv[1]), Path(root) if root else None):
        if item.action != "current":
            print(f"rocmlab: {item.lab_id} {item.previous or '-'} -> {item.version} ({item.action})")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
