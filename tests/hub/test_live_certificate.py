"""The completion certificate: the rule, who earned it, its id, the page and the PDF (issue 34)."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace

import pytest
from live_fakes import attempt, check

from rocmlab.errors import InputError
from rocmlab.hub import certificate as cert

RULE_TOML = """
[certificate]
course = { en = "GPU programming with ROCm", zh = "ROCm GPU 编程" }
issuer = "rocmlab workshop"

[[certificate.labs]]
lab = "01-rocm-setup"
pass_fraction = 1.0

[[certificate.labs]]
lab = "02-hip-kernels"
pass_fraction = 0.5
"""
DAY1, DAY2 = 1_780_000_000, 1_780_090_000  # 2026-05-28, 2026-05-29 (UTC)


def rule(tmp_path, text=RULE_TOML):
    path = tmp_path / "completion.toml"
    path.write_text(text, encoding="utf-8")
    return cert.load_rule(path)


def passing(learner="ada"):
    return [
        attempt(learner, "01-rocm-setup", DAY1, checks=[check("a", True), check("b", True)]),
        attempt(learner, "02-hip-kernels", DAY1, checks=[check("grid", False), check("reduce", False)]),
        attempt(learner, "02-hip-kernels", DAY2, checks=[check("grid", True), check("reduce", False)]),
    ]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("x = 1", "expected a [certificate] table"),
        ("[certificate]\ncourse = 'x'", "field certificate.course"),
        ("[certificate]\ncourse = {en='a', zh='b'}", "field certificate.labs"),
        ("[certificate]\ncourse = {en='a', zh='b'}\n[[certificate.labs]]\npass_fraction = 1", "labs[0].lab"),
        (
            "[certificate]\ncourse = {en='a', zh='b'}\n[[certificate.labs]]\nlab='01'\npass_fraction = 80",
            "labs[0].pass_fraction",
        ),
        ("[certificate\n", "not a readable TOML file"),
    ],
)
def test_a_wrong_rule_names_the_file_and_the_field(tmp_path, text, field):
    with pytest.raises(InputError, match=re.escape(field)) as error:
        rule(tmp_path, text)
    assert "completion.toml" in str(error.value)


def test_the_certificate_needs_every_lab_at_its_share_of_the_points(tmp_path):
    course = rule(tmp_path)
    earned = cert.earned(course, passing(), "ada")
    assert [(lab.lab, lab.score, lab.max_score, lab.graded_on) for lab in earned.labs] == [
        ("01-rocm-setup", 2, 2, "2026-05-28"),
        ("02-hip-kernels", 1, 2, "2026-05-29"),
    ]
    assert earned.issued_on == "2026-05-29" and earned.learner == "ada"
    short = passing()[:2]  # 02 at 0 of 2
    assert cert.earned(course, short, "ada") is None
    assert [need.lab for need in cert.missing(course, short, "ada")] == ["02-hip-kernels"]
    assert cert.earned(course, passing("bo"), "ada") is None  # someone else's attempts count for nothing
    ungraded = [replace(a, state="failed") if a.lab == "01-rocm-setup" else a for a in passing()]
    assert cert.earned(course, ungraded, "ada") is None


def test_the_id_changes_with_any_field_and_verifies_against_the_queue(tmp_path):
    course, key = rule(tmp_path), cert.signing_key(tmp_path)
    assert cert.signing_key(tmp_path) == key and (tmp_path / "certificate.key").stat().st_mode & 0o777 == 0o600
    signed = cert.sign(cert.earned(course, passing(), "ada"), key)
    assert cert.verify(course, passing(), "ada", signed.id, key)
    assert not cert.verify(course, passing(), "bo", signed.id, key)
    assert not cert.verify(course, passing(), "ada", signed.id, b"another key" * 3)
    forged = cert.earned(course, passing(), "ada")
    forged.labs[1].score = 2.0
    assert cert.sign(forged, key).id != signed.id


@pytest.mark.parametrize(
    ("lang", "words"),
    [("en", ["Certificate of Completion", "GPU programming with ROCm"]), ("zh", ["结业证书", "ROCm GPU 编程"])],
)
def test_the_page_names_the_learner_the_labs_the_scores_and_the_date(tmp_path, lang, words):
    signed = cert.sign(cert.earned(rule(tmp_path), passing("<ada>"), "<ada>"), b"k" * 32)
    html = cert.certificate_page(signed, lang)
    for word in [*words, "&lt;ada&gt;", "01-rocm-setup", "02-hip-kernels", "1 / 2", "2026-05-29", signed.id]:
        assert word in html
    assert "<ada>" not in html


@pytest.mark.slow
def test_the_pdf_is_printed_by_chromium(tmp_path):
    if not (os.environ.get("ROCMLAB_CHROMIUM") or shutil.which("chromium") or os.path.isfile("/usr/bin/chromium")):
        pytest.skip("chromium is not installed")
    signed = cert.sign(cert.earned(rule(tmp_path), passing(), "ada"), b"k" * 32)
    pdf = cert.html_to_pdf(cert.certificate_page(signed, "zh"))
    assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF")
    assert pdf.count(b"/Type /Page") - pdf.count(b"/Type /Pages") == 1  # one A4 sheet, landscape
    assert b"/MediaBox [0 0 841" in pdf or b"/MediaBox [0 0 842" in pdf


def test_the_courses_own_rule_loads_and_names_labs_of_the_course():
    from labsource import REPO

    course = cert.load_rule(REPO / "env" / "jupyterhub" / "completion.toml")
    assert course.labs and all((REPO / "solutions" / need.lab / "lab.toml").is_file() for need in course.labs)
