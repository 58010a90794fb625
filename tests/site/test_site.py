"""The course website (issue 27): student notebooks only, badges, launch links, nothing from a CDN."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import nbformat
import pytest
from labsource import HIDDEN_MARKER, SOLUTION_BLOCK, LabSource

from rocmlab.course.catalog import discover
from rocmlab.course.course import Course
from rocmlab.errors import InputError
from rocmlab.site import main as site_main
from rocmlab.site.build import build_site
from rocmlab.site.launch import read_config

REPO = Path(__file__).resolve().parents[2]
FAST_LABS = ("01-rocm-setup", "07-triton-kernels")
HIDDEN_BLOCK = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.DOTALL)


class Links(HTMLParser):
    """Every URL a page loads (src, stylesheet href) and every link it shows (a href)."""

    def __init__(self):
        super().__init__()
        self.loads, self.links = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("src"):
            self.loads.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            self.loads.append(attrs["href"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


def page_text(path: Path) -> str:
    """What a reader sees: tags removed (code is split into highlighting spans), entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


def answer_lines(lab_id: str) -> set[str]:
    """Lines only the instructor's version has: solution blocks and hidden tests, long enough to be telling."""
    source = LabSource(lab_id)
    found = set()
    for cell in source.code_cells:
        blocks = [m.group(0) for m in SOLUTION_BLOCK.finditer(cell.source)] + HIDDEN_BLOCK.findall(cell.source)
        for block in blocks:
            found |= {line.strip() for line in block.splitlines() if len(line.strip()) >= 25}
    visible = "\n".join(
        SOLUTION_BLOCK.sub("", HIDDEN_MARKER.sub("", HIDDEN_BLOCK.sub("", c.source))) for c in source.cells
    )
    visible = normal(visible)
    return {line for line in found if normal(line) not in visible and "###" not in line}


def normal(text: str) -> str:
    """Markdown's code marks and line breaks out: a contract in the prose reads like the code it states."""
    return re.sub(r"\s+", " ", text.replace("`", ""))


def build(tmp_path: Path, labs=FAST_LABS, **overrides) -> Path:
    out = tmp_path / "site"
    build_site(REPO, out, read_config(REPO, **overrides), labs, progress=lambda *_: None)
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("site"))


def check_no_answers(site: Path, lab_ids) -> int:
    checked = 0
    for lab_id in lab_ids:
        answers = answer_lines(lab_id)
        assert answers, f"{lab_id}: no solution lines found to look for"
        for lang in ("zh", "en"):
            text = normal(page_text(site / lang / f"{lab_id}.html"))
            assert "NotImplementedError" in text, "the learner's stubs must be on the page"
            leaked = sorted(line for line in answers if normal(line) in text)
            assert not leaked, f"{lang}/{lab_id}.html shows solution or hidden-test lines: {leaked[:3]}"
            for marker in ("BEGIN SOLUTION", "HIDDEN TESTS"):
                assert marker not in text
            checked += len(answers)
    return checked


@pytest.mark.slow
def test_lab_pages_hold_no_solutions_and_no_hidden_tests(site):
    assert check_no_answers(site, FAST_LABS) > 20


@pytest.mark.slow
def test_the_check_sees_a_leaked_solution(site, tmp_path):
    lab_id = FAST_LABS[0]
    page = site / "zh" / f"{lab_id}.html"
    leaked = tmp_path / "site" / "zh"
    leaked.mkdir(parents=True)
    (leaked / page.name).write_text(page.read_text() + "<pre>" + sorted(answer_lines(lab_id))[0] + "</pre>")
    (tmp_path / "site" / "en").mkdir()
    (tmp_path / "site" / "en" / page.name).write_text(page.read_text())
    with pytest.raises(AssertionError, match="shows solution"):
        check_no_answers(tmp_path / "site", [lab_id])


def test_a_notebook_with_solution_markers_is_refused(tmp_path):
    import shutil

    root = tmp_path / "course"
    for part in ("solutions", "env", "docs"):
        shutil.copytree(REPO / part, root / part)
    lab_id = FAST_LABS[0]
    built = REPO / "labs" / "zh" / lab_id / f"{lab_id}.ipynb"
    notebook = nbformat.read(built, as_version=4)
    notebook.cells[3].source += "\n### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION\n"
    target = root / "labs" / "zh" / lab_id / built.name
    target.parent.mkdir(parents=True)
    nbformat.write(notebook, target)
    with pytest.raises(InputError, match=r"cell 3 holds '### BEGIN SOLUTION'"):
        build_site(root, tmp_path / "out", read_config(root), [lab_id], langs=("zh",), progress=lambda *_: None)
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.building").exists()


@pytest.mark.slow
def test_each_lab_page_shows_its_version_minutes_profiles_and_freshness(site):
    for lab in discover(REPO):
        if lab.id not in FAST_LABS:
            continue
        for lang in ("zh", "en"):
            text = (site / lang / f"{lab.id}.html").read_text(encoding="utf-8")
            head = text[text.index('class="lab-head"') : text.index('class="notebook"')]
            assert f'data-version="{lab.version}"' in head
            assert f"</b> {lab.version}</span>" in head
            assert f"</b> {lab.minutes}</span>" in head
            assert " · ".join(lab.profiles) in head
            assert re.search(r'class="badge verdict-(fresh|stale|failing|flaky|unknown)"', head)
            assert lab.title[lang] in head


def test_freshness_badge_follows_the_ledger(tmp_path):
    from rocmlab.site.build import freshness

    labs = [lab for lab in discover(REPO) if lab.id in FAST_LABS]
    verdicts = freshness(REPO, labs)
    for lab in labs:
        assert verdicts[lab.id][0] in ("fresh", "stale", "failing", "flaky")
    (tmp_path / "solutions").mkdir()
    assert freshness(tmp_path, labs) == {}  # no ledger: every badge says "no record"


@pytest.mark.slow
def test_pages_load_nothing_from_elsewhere(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) == 2 * (len(FAST_LABS) + 3) + 1
    for page in pages:
        parser = Links()
        parser.feed(page.read_text(encoding="utf-8"))
        assert parser.loads, page
        for url in parser.loads:
            assert not re.match(r"^([a-z]+:)?//", url), f"{page}: loads {url} from elsewhere"
            assert (page.parent / url).resolve().is_file(), f"{page}: {url} is not in the site"
        for url in parser.links:
            if not re.match(r"^([a-z]+:|#)", url):
                assert (page.parent / url.split("#")[0]).resolve().is_file(), f"{page}: broken link {url}"
    for css in (site / "static").glob("*.css"):
        assert "url(" not in css.read_text() and "@import" not in css.read_text()


@pytest.mark.slow
def test_the_download_is_the_student_notebook_with_its_data(site):
    import zipfile

    for lab_id in FAST_LABS:
        built = REPO / "labs" / "zh" / lab_id
        if not (built / "data").is_dir():
            served = json.loads((site / "zh" / "notebooks" / f"{lab_id}.ipynb").read_text())
            assert served == json.loads((built / f"{lab_id}.ipynb").read_text())
            continue
        with zipfile.ZipFile(site / "zh" / "notebooks" / f"{lab_id}.zip") as archive:
            names = set(archive.namelist())
            assert json.loads(archive.read(f"{lab_id}/{lab_id}.ipynb")) == json.loads(
                (built / f"{lab_id}.ipynb").read_text()
            )
        expected = {f"{lab_id}/{p.relative_to(built).as_posix()}" for p in built.rglob("*") if p.is_file()}
        assert names == expected and any("/data/" in n for n in names)


@pytest.mark.slow
def test_launch_links_open_the_lab_through_nbgitpuller(tmp_path):
    site = build(tmp_path, labs=FAST_LABS[:1], hub_url="https://hub.example.edu/", labs_branch="labs-only")
    config = read_config(REPO)
    for lang in ("zh", "en"):
        parser = Links()
        parser.feed((site / lang / f"{FAST_LABS[0]}.html").read_text(encoding="utf-8"))
        (launch,) = [url for url in parser.links if "git-pull" in url]
        parts = urlsplit(launch)
        assert f"{parts.scheme}://{parts.netloc}{parts.path}" == "https://hub.example.edu/hub/user-redirect/git-pull"
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        assert query == {
            "repo": config.labs_repo,
            "branch": "labs-only",
            "targetpath": config.target_dir,
            "urlpath": f"lab/tree/{config.target_dir}/{lang}/{FAST_LABS[0]}/{FAST_LABS[0]}.ipynb",
        }


@pytest.mark.slow
def test_language_switch_points_at_the_same_page(site):
    text = (site / "zh" / f"{FAST_LABS[0]}.html").read_text(encoding="utf-8")
    assert f'href="../en/{FAST_LABS[0]}.html"' in text
    assert 'lang="zh-CN"' in text and 'lang="en"' in (site / "en" / "index.html").read_text()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("hub_url", "hub.example.edu", "field hub_url: expected an http"),
        ("labs_repo", "not a url", "field labs_repo: expected a git URL"),
    ],
)
def test_bad_site_config_names_the_field(tmp_path, field, value, message):
    (tmp_path / "env").mkdir()
    text = (REPO / "env" / "site.toml").read_text()
    text = re.sub(rf'^{field} = "[^"]*"', f'{field} = "{value}"', text, flags=re.MULTILINE)
    (tmp_path / "env" / "site.toml").write_text(text)
    with pytest.raises(InputError, match=re.escape(message)):
        read_config(tmp_path)
    with pytest.raises(InputError, match="site.toml: missing"):
        read_config(tmp_path / "nowhere")


@pytest.mark.slow
def test_command_builds_the_site(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert site_main(labs=["01"], out="public", course=Course(REPO)) == 0
    assert (tmp_path / "public" / "zh" / "01-rocm-setup.html").is_file()
    assert (tmp_path / "public" / "index.html").is_file()


@pytest.mark.slow
def test_no_lab_page_holds_an_answer(tmp_path):
    """Every lab's pages; .ci/run names the site its `make site` step built from this tree
    (``ROCMLAB_BUILT_SITE``), which is the one published, instead of building it twice."""
    import os

    labs = [lab.id for lab in discover(REPO)]
    built = os.environ.get("ROCMLAB_BUILT_SITE")
    site = Path(built) if built else build(tmp_path, labs=labs)
    assert check_no_answers(site, labs) > 100


@pytest.mark.slow
def test_the_site_builds_with_no_network(tmp_path):
    """`rocmlab site` in a network namespace of its own (no interface but a downed loopback)."""
    import os
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a network namespace")
    out = tmp_path / "offline-site"
    command = [
        "unshare",
        "-n",
        sys.executable,
        "-m",
        "rocmlab.cli",
        "--root",
        str(REPO),
        "site",
        "--out",
        str(out),
        "01",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert (out / "zh" / "01-rocm-setup.html").is_file() and (out / "en" / "01-rocm-setup.html").is_file()
