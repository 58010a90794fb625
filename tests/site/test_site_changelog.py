"""Each lab's changelog in both languages (issue 53: the zh page showed English developer text)."""

from __future__ import annotations

import re

import pytest

from rocmlab.course.catalog import discover
from rocmlab.errors import InputError
from rocmlab.root import find_root
from rocmlab.site.build import CHANGELOG, changelog_html

LABS = discover(find_root())
VERSION = re.compile(r"^## (\d+\.\d+\.\d+)", re.MULTILINE)
CJK = re.compile(r"[\u4e00-\u9fff]")


def entries(text: str) -> dict[str, str]:
    """version -> its entry's text."""
    parts = VERSION.split(text)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_the_zh_changelog_has_every_version_of_the_english_one_in_chinese(lab):
    en = (lab.folder / CHANGELOG["en"]).read_text(encoding="utf-8")
    zh = (lab.folder / CHANGELOG["zh"]).read_text(encoding="utf-8")
    assert list(entries(zh)) == list(entries(en)), f"{lab.id}: {CHANGELOG['zh']} versions differ from {CHANGELOG['en']}"
    assert VERSION.search(zh).group(1) == lab.version, f"{lab.id}: the newest zh entry is not lab.toml's version"
    for version, text in entries(zh).items():
        assert CJK.search(text), f"{lab.id} {version}: the zh entry has no Chinese text"


def test_the_zh_page_renders_the_zh_changelog_and_the_en_page_the_english_one():
    lab = next(lab for lab in LABS if lab.id.startswith("01-"))
    zh, en = changelog_html(lab, "zh"), changelog_html(lab, "en")
    assert "<h3" in zh and CJK.search(zh) and not re.search(r"\bThe\b", zh)
    assert "<h3" in en and "The" in en and not CJK.search(en.split("<h3")[1].split("</h3>")[1][:40])
    assert zh.startswith("<h3") and en.startswith("<h3")  # the title line is dropped


def test_a_lab_with_an_english_changelog_and_no_zh_one_is_a_build_error(tmp_path, make_course):
    from rocmlab.course.catalog import parse_lab

    root = make_course()
    folder = root / "solutions" / "01-demo"
    lab = parse_lab(folder)
    assert changelog_html(lab, "zh") == ""  # no changelog at all: nothing to show
    (folder / CHANGELOG["en"]).write_text("# 01-demo changelog\n\n## 0.1.0\n\n- First.\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"CHANGELOG\.zh\.md: missing"):
        changelog_html(lab, "zh")
