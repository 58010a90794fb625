"""The completion certificate of the live workshop: a course-defined set of labs, each passed
with at least a fraction of its points, earns an HTML page and a PDF in zh and en.

The course says which labs in a TOML file (``env/jupyterhub/completion.toml``, or the file named
by ``ROCMLAB_HUB_COMPLETION``)::

    [certificate]
    course = { en = "GPU programming with ROCm", zh = "ROCm GPU 编程" }
    issuer = "rocmlab workshop"          # optional

    [[certificate.labs]]
    lab = "01-rocm-setup"
    pass_fraction = 0.8                  # of the lab's points, in (0, 1]

Why it cannot be forged: the service computes it on each request from the queue's graded
attempts (``live_view.progress``), which only the service and its grading workers write, for
the learner the hub's OAuth names (never from a parameter); the learner's browser sends nothing
that counts. Each certificate carries an id, an HMAC-SHA256 over its content with a key only the
service reads, which ``verify`` recomputes: a page edited after it was printed no longer matches.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import signal
import subprocess
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import CommandFailed, InputError
from ..pages import render_page
from .live_view import progress
from .roster import display_name

PDF_TIMEOUT_S = 60
KEY_FILE = "certificate.key"


@dataclass(frozen=True)
class Requirement:
    lab: str
    pass_fraction: float


@dataclass(frozen=True)
class CompletionRule:
    course: dict  # lang -> title
    issuer: str
    labs: tuple  # of Requirement


@dataclass
class CertifiedLab:
    lab: str
    score: float
    max_score: float
    graded_on: str  # YYYY-MM-DD, UTC


@dataclass
class Certificate:
    learner: str
    course: dict
    issuer: str
    labs: list  # of CertifiedLab
    issued_on: str  # the day the last required lab was passed (so the page is the same on every visit)
    id: str = ""
    names: dict = field(default_factory=dict)  # lang -> the learner's name on the roster (rocmlab.hub.roster)


def load_rule(path: Path) -> CompletionRule:
    """The completion rule in ``path``; InputError naming the file and the field when it is wrong."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: not a readable TOML file ({exc})") from None
    section = data.get("certificate")
    if not isinstance(section, dict):
        raise InputError(f"{path}: expected a [certificate] table")
    course = section.get("course")
    if not isinstance(course, dict) or not all(
        isinstance(course.get(lang), str) and course[lang] for lang in ("en", "zh")
    ):
        raise InputError(f'{path}: field certificate.course: expected {{ en = "...", zh = "..." }}')
    labs = section.get("labs")
    if not isinstance(labs, list) or not labs:
        raise InputError(f"{path}: field certificate.labs: expected at least one [[certificate.labs]] table")
    return CompletionRule(
        course={"en": course["en"], "zh": course["zh"]},
        issuer=str(section.get("issuer", "")),
        labs=tuple(_requirement(path, index, entry) for index, entry in enumerate(labs)),
    )


def _requirement(path: Path, index: int, entry) -> Requirement:
    where = f"{path}: field certificate.labs[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("lab"), str) or not entry["lab"]:
        raise InputError(f"{where}.lab: expected a lab id")
    fraction = entry.get("pass_fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise InputError(f"{where}.pass_fraction: expected a number in (0, 1], got {fraction!r}")
    return Requirement(entry["lab"], float(fraction))


def _day(epoch_s: float | None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch_s or 0))


def earned(rule: CompletionRule, attempts, learner: str) -> Certificate | None:
    """The certificate ``learner`` has earned by the graded attempts, or None."""
    labs = {lab.lab: lab for lab in progress(attempts, learner)}
    certified = []
    for need in rule.labs:
        done = labs.get(need.lab)
        if done is None or done.max_score <= 0 or done.fraction < need.pass_fraction:
            return None
        certified.append(CertifiedLab(need.lab, done.best_score, done.max_score, _day(done.graded_at)))
    return Certificate(
        learner=learner,
        course=dict(rule.course),
        issuer=rule.issuer,
        labs=certified,
        issued_on=max(lab.graded_on for lab in certified),
        names={lang: display_name(learner, lang) for lang in ("en", "zh")},
    )


def missing(rule: CompletionRule, attempts, learner: str) -> list[Requirement]:
    """The requirements ``learner`` has not met yet (the learner's page lists them)."""
    labs = {lab.lab: lab for lab in progress(attempts, learner)}
    return [
        need
        for need in rule.labs
        if need.lab not in labs or labs[need.lab].max_score <= 0 or labs[need.lab].fraction < need.pass_fraction
    ]


# ------------------------------------------------------------------ signing


def signing_key(folder: Path) -> bytes:
    """The service's key, made once (owner-only) in ``folder``."""
    path = Path(folder) / KEY_FILE
    try:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except FileNotFoundError:
        pass
    key = secrets.token_bytes(32)
    temp = path.with_name(f".{KEY_FILE}.{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(key.hex() + "\n")
    try:
        os.link(temp, path)  # never replaces a key another process made first
    except FileExistsError:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    finally:
        os.unlink(temp)
    return key


def sign(certificate: Certificate, key: bytes) -> Certificate:
    content = asdict(certificate) | {"id": ""}
    digest = hmac.new(key, json.dumps(content, sort_keys=True, ensure_ascii=False).encode(), hashlib.sha256)
    certificate.id = digest.hexdigest()[:24]
    return certificate


def verify(rule: CompletionRule, attempts, learner: str, certificate_id: str, key: bytes) -> bool:
    """Whether ``certificate_id`` is the id of the certificate the queue gives ``learner`` now."""
    certificate = earned(rule, attempts, learner)
    return certificate is not None and hmac.compare_digest(sign(certificate, key).id, certificate_id)


# ------------------------------------------------------------------ the page and the PDF


def certificate_page(certificate: Certificate, lang: str, verify_url: str = "") -> str:
    return render_page("certificate.html.j2", cert=certificate, lang=lang, verify_url=verify_url)


def chromium_command() -> str:
    found = os.environ.get("ROCMLAB_CHROMIUM") or "/usr/bin/chromium"
    if not Path(found).is_file():
        raise CommandFailed(f"chromium not found ({found}): apt-get install chromium, or set ROCMLAB_CHROMIUM")
    return found


def html_to_pdf(html: str, timeout_s: float = PDF_TIMEOUT_S) -> bytes:
    """``html`` (self-contained) printed to PDF by headless chromium, offline, in a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="rocmlab-cert-") as scratch:
        page, pdf = Path(scratch) / "certificate.html", Path(scratch) / "certificate.pdf"
        page.write_text(html, encoding="utf-8")
        command = [
            chromium_command(),
            "--headless",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--no-pdf-header-footer",
            f"--user-data-dir={Path(scratch) / 'profile'}",
            f"--print-to-pdf={pdf}",
            *(["--no-sandbox"] if os.geteuid() == 0 else []),
            page.as_uri(),
        ]
        status, errors = _run_in_own_group(command, timeout_s)
        if status != 0 or not pdf.is_file():
            raise CommandFailed(f"chromium could not print the certificate (status {status}): {errors[-500:]}")
        return pdf.read_bytes()


def _run_in_own_group(command: list[str], timeout_s: float) -> tuple[int, str]:
    """Run ``command`` in a session of its own; on timeout end the whole group (chromium's helpers too)."""
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        _, errors = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise CommandFailed(f"chromium did not print the certificate within {timeout_s:g} s") from None
    return process.returncode, errors.decode(errors="replace")
