"""A JupyterLab notification when the instructor has sent the learner a hint.

JupyterLab 4 has no way for a server to push a notification to an open page without a frontend
extension of its own. What it does offer is its announcements plugin: each time JupyterLab loads,
it asks its server's ``lab/api/update`` for an update message and shows the answer as a
notification (with a link button), once per distinct message until the learner dismisses it.
The server side of that is a class named by ``LabApp.check_for_updates_class``
(jupyterlab/handlers/announcements.py: ``CheckForUpdateABC``, called per request, returning
``None`` or ``(message, (label, url))``). The servers' config
(env/jupyterhub/jupyter_server_config.py) names ``HintNotice``: instead of asking PyPI for a newer
JupyterLab, it reads the learner's newest ``HINT-<lab>.md`` (written by rocmlab.live.hints
beside the notebook they work on) and answers with its latest hint and a link that opens the file.

It runs in the learner's own server, as the learner: it reads only their home, no network, no
token. A hint that arrives while JupyterLab is open shows on its next load; meanwhile the file
appears in the file browser beside the notebook, and the learner's live page lists it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

from jupyterlab.handlers.announcements import CheckForUpdateABC

from ..hub.labs import COURSE_ID

MESSAGE_CHARS = 140  # JupyterLab's toast shows a short line; the file holds the whole hint
READ_BYTES = 64 * 1024
HINT_FILE = re.compile(r"HINT-([A-Za-z0-9][A-Za-z0-9._-]{0,127})\.md")
TEXT = {
    "en": ("Hint from your instructor for {lab} ({exercise}): {text}", "Open the hint"),
    "zh": ("老师发来 {lab} 的提示（{exercise}）：{text}", "打开提示"),
}


def hint_files(home: Path) -> list[Path]:
    """The learner's HINT files (the fetched and the practice copies of each lab), not links."""
    found = []
    for folder in (home / COURSE_ID, home):
        try:
            labs = [entry for entry in os.scandir(folder) if entry.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for lab in labs:
            path = Path(lab.path) / f"HINT-{lab.name}.md"
            if HINT_FILE.fullmatch(path.name) and path.is_file() and not path.is_symlink():
                found.append(path)
    return found


def newest_hint(path: Path) -> tuple[str, str]:
    """(exercise, text) of the last hint in a HINT file (``hints.hint_markdown``'s layout:
    a ``## <grade_id> (<time>)`` heading per hint, its text in Chinese and English below)."""
    with open(path, "rb") as fh:
        text = fh.read(READ_BYTES).decode("utf-8", errors="replace")
    sections = text.split("\n## ")
    if len(sections) < 2:
        return "", ""
    heading, _, body = sections[-1].partition("\n")
    return heading.split(" (")[0].strip(), " ".join(body.split())


def hint_notice(home: Path, prefix: str, lang: str) -> tuple[str, tuple[str, str]] | None:
    """The notification of the newest HINT file in ``home``: (message, (label, url)), or None."""
    files = hint_files(home)
    if not files:
        return None
    newest = max(files, key=lambda p: p.stat().st_mtime)
    exercise, text = newest_hint(newest)
    if not text:
        return None
    lab = HINT_FILE.fullmatch(newest.name).group(1)
    message, label = TEXT[lang if lang in TEXT else "en"]
    line = message.format(lab=lab, exercise=exercise, text=text)
    if len(line) > MESSAGE_CHARS:
        line = line[: MESSAGE_CHARS - 1] + "…"
    url = f"{prefix.rstrip('/')}/lab/tree/{quote(newest.relative_to(home).as_posix())}"
    return line, (label, url)


class HintNotice(CheckForUpdateABC):
    """``LabApp.check_for_updates_class``: the newest hint, shown by JupyterLab when it loads."""

    async def __call__(self):
        home = Path(os.environ.get("HOME") or os.getcwd())
        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
        return hint_notice(home, prefix, os.environ.get("ROCMLAB_UI_LANG", "en"))
