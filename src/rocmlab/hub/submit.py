"""``rocmlab submit NOTEBOOK``: a learner's submit from a JupyterLab terminal of the workshop hub.

It submits the notebook's folder with nbgrader (into the learner's own inbound folder, the hub's
exchange), asks the live service to grade it (with the server's own hub token,
``$JUPYTERHUB_API_TOKEN``; the service collects the submission itself), waits for the grade and
prints the score and each rule not met, in the notebook's language, with the submissions left
under the rate limit.

A restart of the live service costs the learner nothing: every call is retried with backoff while
the service does not answer (until ``--timeout``), and a submit whose answer was lost resumes on
the attempt it made (the service answers the same submission with the same attempt). A notebook
byte-identical to the last attempt is answered with that attempt's result, not graded or counted
again (rocmlab.live.queue).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import CommandFailed, ExitCode, InputError

TEXT = {
    "en": {
        "sent": "submitted {lab} (attempt {id}); {remaining} of {limit} submissions left this hour",
        "again": "this submission of {lab} was already sent (attempt {id}); change the notebook to submit again",
        "wait": "grading...",
        "score": "score: {score:g} / {max_score:g}",
        "failed": "rules not met:",
        "all": "every rule met",
        "error": "could not be graded: {error}",
        "slow": "not graded within {timeout:g} s: see it later with the learner page ({url})",
        "retrying": "the live service does not answer ({error}); retrying, your submission is kept...",
        "not_counted": "this attempt does not count against your submissions (the grading failed, not your notebook)",
        "untouched": "not attempted yet (left as handed out): {ids}",
    },
    "zh": {
        "sent": "已提交 {lab}（第 {id} 次尝试）；本小时还可提交 {remaining} / {limit} 次",
        "again": "{lab} 的这次提交已发送过（尝试 {id}）；修改笔记本后再提交",
        "wait": "评分中……",
        "score": "得分：{score:g} / {max_score:g}",
        "failed": "未通过的规则：",
        "all": "所有规则均已通过",
        "error": "无法评分：{error}",
        "slow": "{timeout:g} 秒内未完成评分：稍后在学员页面查看（{url}）",
        "retrying": "评分服务暂无响应（{error}）；正在重试，你的提交已保存……",
        "not_counted": "这次尝试不计入你的提交次数（评分系统出错，不是你的笔记本）",
        "untouched": "尚未作答（与发放时相同）：{ids}",
    },
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Submit a lab notebook from the workshop hub and have it graded now: nbgrader submit, then the live "
        "service grades it (the hidden checks, sandboxed); prints the score and each rule not met."
    )
    parser.add_argument("notebook", metavar="NOTEBOOK", help="the lab's notebook (its folder is submitted)")
    parser.add_argument("--timeout", type=float, default=600, metavar="S", help="seconds to wait for the grade")
    parser.add_argument("--no-wait", action="store_true", help="submit and return; see the grade later")


def notebook_lab(path: Path) -> tuple[str, str]:
    """(lab id, language) from the notebook's rocmlab metadata."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("rocmlab")
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable notebook: {exc}") from None
    if not isinstance(meta, dict) or not meta.get("id"):
        raise InputError(f"{path}: no rocmlab metadata (id): not a lab notebook of this course")
    return str(meta["id"]), "zh" if meta.get("lang") == "zh" else "en"


def nbgrader_submit(folder: Path, lab: str, course_id: str) -> None:
    """nbgrader's submit of ``folder`` as ``lab``: a fetched ``<course>/<lab>/`` or a delivered ``<lab>/``."""
    if folder.name != lab:
        raise InputError(f"{folder}: the folder of lab {lab} must be named {lab} (nbgrader submits it by that name)")
    in_course = folder.parent.name == course_id
    nbgrader = Path(sys.executable).parent / "nbgrader"
    command = [
        str(nbgrader) if nbgrader.exists() else "nbgrader",
        "submit",
        lab,
        f"--course={course_id}",
        f"--Exchange.assignment_dir={folder.parent.parent if in_course else folder.parent}",
        f"--Exchange.path_includes_course={in_course}",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        raise CommandFailed("nbgrader submit did not finish within 120 s") from None
    if done.returncode != 0:
        raise CommandFailed(f"nbgrader submit failed:\n{(done.stderr or done.stdout)[-2000:]}")


class ServiceDown(CommandFailed):
    """The live service did not answer (restarting, or the proxy has no route to it yet)."""


RETRY_STATUS = (502, 503, 504)  # the proxy's answers while the service is away


class LiveClient:
    """The live service with this server's hub token. ``call`` retries while the service is away,
    doubling the wait from ``first_wait_s`` up to ``max_wait_s``, until ``deadline`` (monotonic);
    ``on_retry(error)`` is told once per outage."""

    def __init__(self, url: str, token: str, *, first_wait_s: float = 0.5, max_wait_s: float = 10.0, on_retry=None):
        if not url or not token:
            raise InputError(
                "rocmlab submit runs in a terminal of the workshop hub's JupyterLab (it needs "
                "ROCMLAB_LIVE_URL and JUPYTERHUB_API_TOKEN, which the hub sets)"
            )
        self.url, self.token = url.rstrip("/") + "/", token
        self.first_wait_s, self.max_wait_s = first_wait_s, max_wait_s
        self.on_retry = on_retry or (lambda error: None)
        self.retried = False  # some call met the service away (then an answer may have been lost)

    def call_once(self, method: str, path: str, body=None) -> tuple[int, dict]:
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            if exc.code in RETRY_STATUS:
                raise ServiceDown(f"HTTP {exc.code}") from None
            try:
                return exc.code, json.loads(text)
            except ValueError:
                return exc.code, {"error": text[:500]}
        except (urllib.error.URLError, OSError) as exc:  # refused, reset mid-answer, timed out
            raise ServiceDown(str(getattr(exc, "reason", exc))) from None
        try:
            return response.status, json.loads(text or "{}")
        except ValueError:
            raise ServiceDown(f"an answer that is not JSON: {text[:200]!r}") from None

    def call(self, method: str, path: str, body=None, *, deadline: float | None = None) -> tuple[int, dict]:
        wait, told = self.first_wait_s, False
        while True:
            try:
                return self.call_once(method, path, body)
            except ServiceDown as exc:
                if deadline is None or time.monotonic() + wait > deadline:
                    raise ServiceDown(f"the live service at {self.url} does not answer: {exc}") from None
                self.retried = True
                if not told:
                    self.on_retry(str(exc))
                    told = True
            time.sleep(wait)
            wait = min(wait * 2, self.max_wait_s)


def request_grading(client: LiveClient, lab: str, deadline: float) -> dict:
    """The service's answer to "grade my newest submission of ``lab``", retried through a restart.
    ``resumed``: the answer names the attempt made for this very submission (an earlier try whose
    answer was lost with the service); ``same_notebook``: one made before for the same bytes."""
    status, answer = client.call("POST", "api/submit", {"lab": lab}, deadline=deadline)
    if status == 429:
        raise CommandFailed(answer.get("error", "too many submissions"))
    if status not in (200, 201):
        raise CommandFailed(f"the live service refused the submission: {answer.get('error', status)}")
    answer["resumed"] = bool(answer.get("duplicate")) and not answer.get("same_notebook")
    return answer


FINISHED = ("graded", "failed")


def wait_for_grade(client: LiveClient, attempt_id: int, deadline: float, poll_s: float = 1.0) -> dict | None:
    """The attempt once graded or failed; None at ``deadline`` (monotonic)."""
    while time.monotonic() < deadline:
        status, attempt = client.call("GET", f"api/attempts/{attempt_id}", deadline=deadline)
        if status != 200:
            raise CommandFailed(f"attempt {attempt_id}: {attempt.get('error', status)}")
        if attempt["state"] in FINISHED:
            return attempt
        time.sleep(poll_s)
    return None


def report(attempt: dict, lang: str) -> list[str]:
    """The lines a learner reads about a finished attempt."""
    text = TEXT[lang]
    if attempt["state"] == "failed":
        lines = [text["error"].format(error=attempt["error"])]
        return lines + ([text["not_counted"]] if attempt.get("counted") is False else [])
    lines = [text["score"].format(score=attempt["score"], max_score=attempt["max_score"])]
    failed = [c for c in attempt["checks"] if not c["passed"] and c.get("attempted", True)]
    untouched = list(dict.fromkeys(c["grade_id"] for c in attempt["checks"] if c.get("attempted", True) is False))
    if failed or not untouched:
        lines.append(text["failed"] if failed else text["all"])
    for check in failed:
        lines.append(f"  - [{check['grade_id']}] {check['message'].get(lang) or check['message'].get('en', '')}")
    if untouched:
        lines.append(text["untouched"].format(ids=", ".join(untouched)))
    lines.extend(f"  ! {note}" for note in attempt.get("notes", []))
    return lines


def needs_course(options: dict) -> bool:
    """Never: a learner submits from her server, where the course's sources are not."""
    return False


def main(*, notebook: str, timeout: float = 600, no_wait: bool = False, course=None) -> int:
    path = Path(notebook).resolve()
    if not path.is_file():
        raise InputError(f"{notebook}: no such notebook")
    lab, lang = notebook_lab(path)
    text = TEXT[lang]
    deadline = time.monotonic() + timeout
    client = LiveClient(
        os.environ.get("ROCMLAB_LIVE_URL", ""),
        os.environ.get("JUPYTERHUB_API_TOKEN", ""),
        on_retry=lambda error: print(text["retrying"].format(error=error), file=sys.stderr, flush=True),
    )
    nbgrader_submit(path.parent, lab, os.environ.get("ROCMLAB_COURSE_ID", "rocmlab"))
    answer = request_grading(client, lab, deadline)
    attempt = answer["attempt"]
    key = "again" if answer.get("same_notebook") else "sent"
    print(text[key].format(lab=lab, id=attempt["id"], remaining=answer["remaining"], limit=answer["limit"]))
    if no_wait:
        return ExitCode.OK
    # an unchanged notebook, or a resumed submit, may be answered with an attempt graded already
    finished = attempt if attempt.get("state") in FINISHED else None
    if finished is None:
        print(text["wait"], flush=True)
        finished = wait_for_grade(client, attempt["id"], deadline)
    if finished is None:
        print(text["slow"].format(timeout=timeout, url=client.url))
        return ExitCode.FAILED
    print("\n".join(report(finished, lang)))
    return ExitCode.OK
