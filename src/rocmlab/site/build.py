"""The course website: static, bilingual HTML from the built student notebooks (``labs/<lang>/``).

Each lab gets one page per language: its prose and code as the learner receives them (solutions
stubbed, hidden tests removed by nbgrader; a page is refused if a marker of either is left), its
version, minutes, profiles and freshness verdict from the ledger ``ci/history/``, its CHANGELOG,
the notebook to download, and the launch link (``launch.py``). The quickstart and the instructor
guide come from ``docs/``. Everything the pages load is in the output folder: no CDN, no fonts or
scripts from elsewhere, so the site works offline and where foreign CDNs are slow or blocked.

Why nbconvert + jinja2 and not jupyter-book 2 / MyST: see docs/site.md.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import jinja2
import nbformat

from ..course.catalog import LANGUAGES, Lab, discover, select
from ..course.source import MARKERS
from ..errors import InputError
from .launch import LaunchConfig

TEMPLATES = Path(__file__).resolve().parents[1] / "templates" / "site"
# What nbgrader's release must have removed: a page holding one of these would publish answers.
FORBIDDEN = tuple(marker for pair in MARKERS.values() for marker in pair)
VERDICT_TEXT = {
    "fresh": {"zh": "已验证（新鲜）", "en": "fresh"},
    "stale": {"zh": "待重新验证", "en": "stale"},
    "failing": {"zh": "运行失败", "en": "failing"},
    "flaky": {"zh": "不稳定", "en": "flaky"},
    "unknown": {"zh": "尚无记录", "en": "no record"},
}
UI = {
    "zh": {
        "course": "rocmlab · AMD GPU 工作坊",
        "labs": "实验",
        "quickstart": "快速开始",
        "instructor": "讲师指南",
        "other": "English",
        "version": "版本",
        "minutes": "分钟",
        "profiles": "配置",
        "freshness": "新鲜度",
        "launch": "在工作坊 Hub 上打开",
        "download": "下载 notebook",
        "download_zip": "下载 notebook 及其数据（zip）",
        "changes": "更新记录",
        "last_pass": "最近通过",
    },
    "en": {
        "course": "rocmlab · AMD GPU workshop",
        "labs": "Labs",
        "quickstart": "Quickstart",
        "instructor": "Instructor guide",
        "other": "中文",
        "version": "version",
        "minutes": "minutes",
        "profiles": "profiles",
        "freshness": "freshness",
        "launch": "Launch on the workshop hub",
        "download": "Download the notebook",
        "download_zip": "Download the notebook with its data (zip)",
        "changes": "What changed",
        "last_pass": "last pass",
    },
}
DOCS = {  # page name: source per language (docs/, relative to the course root)
    "quickstart": {"zh": "docs/site/quickstart.zh.md", "en": "docs/site/quickstart.en.md"},
    "instructor": {"zh": "docs/site/instructor.zh.md", "en": "docs/hub.md"},
}


@dataclass
class LabPage:
    lab: Lab
    lang: str
    title: str
    verdict: str
    last_pass: str
    launch_url: str
    changelog_html: str
    body_html: str = ""
    with_data: bool = False  # the lab reads files beside its notebook: the download is a zip of both

    @property
    def href(self) -> str:
        return f"{self.lab.id}.html"

    @property
    def notebook_href(self) -> str:
        return f"notebooks/{self.lab.id}.{'zip' if self.with_data else 'ipynb'}"


def freshness(root: Path, labs: list[Lab]) -> dict[str, tuple[str, str]]:
    """Lab id → (verdict, date of the last pass) from the ledger and the release matrix."""
    from ..report.command import read_entries
    from ..report.history import FreezeStore, read_ledger
    from ..report.verdict import build

    runs, _ = read_ledger(root)
    if not runs:
        return {}
    entries, window, _ = read_entries(root)
    report = build(labs, runs, entries, window_days=window, freezes=FreezeStore(root))
    return {row.lab.id: (row.verdict, row.last_pass.started_at[:10] if row.last_pass else "") for row in report.rows}


def student_notebook(root: Path, lang: str, lab: Lab) -> nbformat.NotebookNode:
    path = root / "labs" / lang / lab.id / f"{lab.id}.ipynb"
    if not path.is_file():
        raise InputError(f"{path}: not built; run `rocmlab build` first")
    notebook = nbformat.read(path, as_version=4)
    for number, cell in enumerate(notebook.cells):
        for marker in FORBIDDEN:
            if marker in cell.source:
                raise InputError(f"{path}: cell {number} holds {marker!r}; the site shows student notebooks only")
    version = notebook.metadata.get("rocmlab", {}).get("version")
    if version != lab.version:
        raise InputError(f"{path}: built from version {version}, the source is {lab.version}; run `rocmlab build`")
    return notebook


def notebook_html(notebook: nbformat.NotebookNode) -> str:
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="basic", exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(notebook)
    return body


def markdown_html(text: str) -> str:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(text)


CHANGELOG = {"en": "CHANGELOG.md", "zh": "CHANGELOG.zh.md"}  # a lab's changelog, per language of its page


def changelog_html(lab: Lab, lang: str) -> str:
    """The lab's changelog in ``lang`` (its newest entries first, as written), without its title line;
    "" for a lab with no changelog. A lab with an English one and no Chinese one is an InputError: the
    zh page would otherwise show English developer text."""
    path = lab.folder / CHANGELOG[lang]
    if not path.is_file():
        if (lab.folder / CHANGELOG["en"]).is_file():
            raise InputError(f"{path}: missing (the zh page's changelog; {CHANGELOG['en']} has no zh rendering)")
        return ""
    text = re.sub(r"\A#[^\n]*\n", "", path.read_text(encoding="utf-8"))
    return markdown_html(re.sub(r"^## ", "### ", text, flags=re.MULTILINE))


def doc_html(root: Path, name: str, lang: str, static: Path) -> str:
    """A docs page as HTML: its images copied into ``static/images/``, its links to other docs
    files (not part of the site) left as plain text."""
    path = root / DOCS[name][lang]
    if not path.is_file():
        raise InputError(f"{path}: missing (the site's {name} page)")
    html = markdown_html(path.read_text(encoding="utf-8"))

    def image(match: re.Match) -> str:
        source = (path.parent / match.group(2)).resolve()
        if not source.is_file():
            raise InputError(f"{path}: image {match.group(2)} not found")
        (static / "images").mkdir(exist_ok=True)
        shutil.copy(source, static / "images" / source.name)
        return f'{match.group(1)}"../static/images/{source.name}"'

    html = re.sub(r'(<img[^>]*\ssrc=)"(?![a-z]+:|/)([^"]+)"', image, html)
    return re.sub(r'<a href="(?![a-z]+:|#|\.\./)[^"]*\.md(#[^"]*)?">(.*?)</a>', r"\2", html, flags=re.DOTALL)


def pygments_css() -> str:
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style="default").get_style_defs(".highlight")


def build_site(root: Path, out: Path, launch: LaunchConfig, lab_ids=(), langs=LANGUAGES, progress=print) -> list[Path]:
    """Write the site into ``out`` (replaced whole); the pages written."""
    labs = sorted(select(discover(root), list(lab_ids)), key=lambda lab: lab.id)
    verdicts = freshness(root, labs)
    staging = out.with_name(f".{out.name}.building")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        written = _render(root, staging, labs, verdicts, launch, langs)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    progress(f"site: {len(written)} pages in {out}")
    return [out / path.relative_to(staging) for path in written]


def _render(root: Path, staging: Path, labs: list[Lab], verdicts: dict, launch: LaunchConfig, langs) -> list[Path]:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=jinja2.select_autoescape(["html", "j2"])
    )
    (staging / "static").mkdir(parents=True)
    shutil.copy(TEMPLATES / "site.css", staging / "static" / "site.css")
    (staging / "static" / "pygments.css").write_text(pygments_css(), encoding="utf-8")
    written = []
    for lang in langs:
        folder = staging / lang
        (folder / "notebooks").mkdir(parents=True)
        pages = []
        for lab in labs:
            notebook = student_notebook(root, lang, lab)
            verdict, last_pass = verdicts.get(lab.id, ("unknown", ""))
            page = LabPage(
                lab, lang, lab.title[lang], verdict, last_pass, launch.url(lang, lab.id), changelog_html(lab, lang)
            )
            page.body_html = notebook_html(notebook)
            built = root / "labs" / lang / lab.id
            page.with_data = (built / "data").is_dir()
            write_download(built, folder / page.notebook_href)
            pages.append(page)
        common = {"lang": lang, "ui": UI[lang], "pages": pages, "verdict_text": VERDICT_TEXT, "launch": launch}
        for page in pages:
            written.append(_write(env, "lab.html.j2", folder / page.href, common, page=page, here=page.href))
        written.append(_write(env, "index.html.j2", folder / "index.html", common, here="index.html"))
        for name in DOCS:
            html = doc_html(root, name, lang, staging / "static")
            written.append(
                _write(env, "doc.html.j2", folder / f"{name}.html", common, doc=name, body=html, here=f"{name}.html")
            )
    written.append(_write(env, "root.html.j2", staging / "index.html", {"labs": labs}))
    return written


def write_download(built: Path, dest: Path) -> None:
    """The built lab as a learner downloads it: the notebook, or with its ``data/`` a zip of the
    folder (``<lab>/<lab>.ipynb``, ``<lab>/data/...``), which runs where it is unpacked. Entries are
    sorted and dated by the source's content, so an unchanged lab gives the same bytes."""
    if dest.suffix == ".ipynb":
        shutil.copy(built / dest.name, dest)
        return
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in built.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(
                f"{built.name}/{path.relative_to(built).as_posix()}", date_time=(2020, 1, 1, 0, 0, 0)
            )
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())


def _write(env: jinja2.Environment, template: str, path: Path, context: dict, **more) -> Path:
    path.write_text(env.get_template(template).render(**context, **more), encoding="utf-8")
    return path
