"""The completion certificate of the live workshop: the course's completion rule
(``rocmlab.hub.completion``: a set of labs, each passed with at least a fraction of its points),
once met, earns an HTML page and a PDF in zh and en.

Issued once. The certificate is what held when the learner first met the rule (``first_earned``:
the graded attempts replayed in the order they were graded), stored signed in
``CertificateStore`` the first time it is asked for, and from then on read from there: it stays
valid, and the same, when the learner improves or regresses, or the rule changes.

Why it cannot be forged: it is computed from the queue's graded attempts (``live.view.progress``),
which only the service and its grading workers write, for the learner the hub's OAuth names
(never from a parameter). Its id is an HMAC-SHA256 over its content with a key only the service
reads. Anyone (an employer, without a hub login) opens ``certificate/verify?id=...``: the page shows
the stored name, course, date and result, and, given the fields printed on a copy, names any that
was edited.

The PDF is drawn by a PDF library (fpdf2) with the Noto CJK font of fonts-noto-cjk: no browser
runs in the service (issue 48: the root chromium's profile in /tmp was a way to overwrite a
root-only file). A learner's PDFs are cached by certificate and language (they never change).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sqlite3
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..errors import CommandFailed
from ..hub.completion import CompletionRule, Requirement
from ..hub.roster import display_name
from ..hub.secret_file import persistent_secret
from ..pages import render_page
from .view import progress

KEY_FILE = "certificate.key"
STORE_FILE = "certificates.sqlite"
CJK_FONT = ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", 2)  # fonts-noto-cjk; face 2: SC


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
    issued_on: str  # the day the rule was first met (the last required lab passed)
    id: str = ""
    name: str = ""  # the learner's account's full name, else empty
    names: dict = field(default_factory=dict)  # lang -> the learner's name on the roster (rocmlab.hub.roster)

    def name_in(self, lang: str) -> str:
        """The name a copy in ``lang`` shows: the roster's, else the account's full name, else the login."""
        return self.names.get(lang) or self.name or self.learner

    @property
    def shown_names(self) -> set[str]:
        return {self.name_in(lang) for lang in ("en", "zh")}

    @property
    def result(self) -> str:
        """The points of the certified labs, together: what the verify page shows."""
        score = sum(lab.score for lab in self.labs)
        return f"{score:g} / {sum(lab.max_score for lab in self.labs):g}"

    @classmethod
    def from_dict(cls, data: dict) -> Certificate:
        return cls(**{**data, "labs": [CertifiedLab(**lab) for lab in data["labs"]]})


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
        names={lang: name for lang in ("en", "zh") if (name := display_name(learner, lang)) != learner},
    )


def first_earned(rule: CompletionRule, attempts, learner: str) -> Certificate | None:
    """The certificate as it stood when ``learner`` first met the rule: the graded attempts
    replayed in the order they were graded, the first point at which ``earned`` holds."""
    graded = sorted(
        (a for a in attempts if a.learner == learner and a.state == "graded" and a.finished_at is not None),
        key=lambda a: (a.finished_at, a.id),
    )
    for count in range(1, len(graded) + 1):
        certificate = earned(rule, graded[:count], learner)
        if certificate is not None:
            return certificate
    return None


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
    return persistent_secret(Path(folder) / KEY_FILE)


def sign(certificate: Certificate, key: bytes) -> Certificate:
    content = asdict(certificate) | {"id": ""}
    digest = hmac.new(key, json.dumps(content, sort_keys=True, ensure_ascii=False).encode(), hashlib.sha256)
    certificate.id = digest.hexdigest()[:24]
    return certificate


def is_signed(certificate: Certificate, key: bytes) -> bool:
    """Whether the certificate's id is the HMAC of its content (nothing in it edited)."""
    again = sign(replace(certificate, labs=[replace(lab) for lab in certificate.labs]), key)
    return bool(certificate.id) and hmac.compare_digest(again.id, certificate.id)


class CertificateStore:
    """The certificates issued, one per learner, never changed once issued: an SQLite file beside
    the queue, which only the service writes. A row whose id is not the HMAC of its content
    (edited in the file) is not a certificate."""

    def __init__(self, path: Path, key: bytes):
        self.path, self.key = Path(path), key
        db = self._connect()
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS certificates (id TEXT PRIMARY KEY, learner TEXT NOT NULL UNIQUE, "
                "record TEXT NOT NULL, issued_at REAL NOT NULL)"
            )
        finally:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def issue(self, certificate: Certificate) -> Certificate:
        """Store ``certificate`` signed unless the learner has one already; the learner's certificate."""
        sign(certificate, self.key)
        db = self._connect()
        try:
            db.execute(
                "INSERT OR IGNORE INTO certificates (id, learner, record, issued_at) VALUES (?, ?, ?, ?)",
                (certificate.id, certificate.learner, json.dumps(asdict(certificate), ensure_ascii=False), time.time()),
            )
        finally:
            db.close()
        return self.of(certificate.learner)

    def _one(self, column: str, value: str) -> Certificate | None:
        db = self._connect()
        try:
            row = db.execute(f"SELECT record FROM certificates WHERE {column} = ?", (value,)).fetchone()
        finally:
            db.close()
        if row is None:
            return None
        certificate = Certificate.from_dict(json.loads(row[0]))
        return certificate if is_signed(certificate, self.key) else None

    def of(self, learner: str) -> Certificate | None:
        return self._one("learner", learner)

    def get(self, certificate_id: str) -> Certificate | None:
        return self._one("id", certificate_id)


def issued(store: CertificateStore, rule: CompletionRule, attempts, learner: str, name: str = "") -> Certificate | None:
    """The learner's certificate: the one stored, else issued now (under ``name``, the roster's)
    if they ever met the rule."""
    found = store.of(learner)
    if found is not None:
        return found
    first = first_earned(rule, attempts, learner)
    if first is None:
        return None
    first.name = name
    return store.issue(first)


CLAIMS = ("learner", "name", "issued_on", "result")  # the fields a printed copy shows, checked by ``verify``


def verify(store: CertificateStore, certificate_id: str, claimed: dict) -> tuple[Certificate | None, list[str]]:
    """(the stored certificate with this id, or None; the fields of ``claimed`` that differ from it:
    ``learner``, ``name``, ``issued_on``, ``result``, ``course``, any language's title)."""
    certificate = store.get(certificate_id) if certificate_id else None
    if certificate is None:
        return None, []
    held = {
        "learner": {certificate.learner},
        "name": certificate.shown_names,  # a copy in either language
        "issued_on": {certificate.issued_on},
        "result": {certificate.result},
    }
    edited = [name for name in CLAIMS if name in claimed and str(claimed[name]).strip() not in held[name]]
    if "course" in claimed and str(claimed["course"]).strip() not in certificate.course.values():
        edited.append("course")
    return certificate, edited


# ------------------------------------------------------------------ the page and the PDF


def certificate_page(certificate: Certificate, lang: str, verify_url: str = "") -> str:
    return render_page("certificate.html.j2", cert=certificate, lang=lang, verify_url=verify_url)


PDF_TEXT = {
    "en": {
        "title": "Certificate of Completion",
        "certifies": "This certifies that",
        "completed": "has completed the course",
        "head": ("Lab", "Score", "Graded on"),
        "issued": "Issued {day}",
        "id": "Certificate id {id}",
        "verify": "Verify: {url}",
    },
    "zh": {
        "title": "结业证书",
        "certifies": "兹证明",
        "completed": "已完成课程",
        "head": ("实验", "得分", "评分日期"),
        "issued": "颁发日期 {day}",
        "id": "证书编号 {id}",
        "verify": "验证：{url}",
    },
}


def cjk_font() -> tuple[Path, int]:
    """The font the PDF is drawn with (Chinese and Latin): ``ROCMLAB_CJK_FONT`` (a .ttf/.otf, or a
    .ttc: its first face), else fonts-noto-cjk's Noto Sans CJK SC."""
    given = os.environ.get("ROCMLAB_CJK_FONT")
    path, face = (Path(given), 0) if given else (Path(CJK_FONT[0]), CJK_FONT[1])
    if not path.is_file():
        raise CommandFailed(
            f"no font for the certificate's PDF ({path}): apt-get install fonts-noto-cjk, or set ROCMLAB_CJK_FONT"
        )
    return path, face


def certificate_pdf(certificate: Certificate, lang: str, verify_url: str = "") -> bytes:
    """The certificate as one A4 landscape PDF page, drawn by fpdf2 (no browser)."""
    from fpdf import FPDF

    text, (font, face) = PDF_TEXT[lang], cjk_font()
    pdf = FPDF(orientation="L", unit="mm", format="A4")
    pdf.set_auto_page_break(False)
    pdf.set_creator("rocmlab")
    pdf.set_title(f"{certificate.course[lang]}: {certificate.name_in(lang)}")
    pdf.add_font("cjk", fname=str(font), collection_font_number=face)
    pdf.add_page()
    pdf.set_draw_color(30, 58, 138)
    pdf.set_line_width(6)
    pdf.rect(3, 3, 291, 204)
    width = 297 - 2 * 24
    pdf.set_xy(24, 22)
    for size, line, gap in (
        (30, text["title"], 16),
        (13, text["certifies"], 9),
        (26, certificate.name_in(lang), 14),
        (13, text["completed"], 9),
        (18, certificate.course[lang], 14),
    ):
        pdf.set_font("cjk", size=size)
        pdf.set_x(24)
        pdf.cell(width, gap, line, align="C", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("cjk", size=12)
    columns = (70, 40, 45)
    left = (297 - sum(columns)) / 2
    for row in (
        text["head"],
        *((lab.lab, f"{lab.score:g} / {lab.max_score:g}", lab.graded_on) for lab in certificate.labs),
    ):
        pdf.set_x(left)
        for column, value in zip(columns, row, strict=True):
            pdf.cell(column, 8, value, border="B", align="C")
        pdf.ln(8)
    pdf.ln(8)
    pdf.set_font("cjk", size=10)
    foot = [
        text["issued"].format(day=certificate.issued_on) + (f" · {certificate.issuer}" if certificate.issuer else "")
    ]
    foot.append(text["id"].format(id=certificate.id))
    if verify_url:
        foot.append(text["verify"].format(url=verify_url))
    for line in foot:
        pdf.set_x(24)
        pdf.cell(width, 6, line, align="C", new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())
