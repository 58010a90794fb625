"""The HTML dashboard (rocmlab.report.dashboard): one self-contained, autoescaped page."""

import re

from freshness_helpers import dashboard_course, render_dashboard


def render(root, tmp_path):
    out = tmp_path / "site" / "index.html"
    return out, render_dashboard(root, out)


def test_the_page_is_self_contained_escaped_and_links_runs(make_course, tmp_path):
    root = dashboard_course(make_course)
    out, page = render(root, tmp_path)
    assert page.startswith("<!doctype html>")
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in page
    sources = re.findall(r'src="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "<link" not in page and "@import" not in page
    assert 'data-verdict="never run"' in page and 'data-verdict="verified"' in page
    assert 'href="https://github.com/amd/rocmlab/actions/runs/101"' in page
    assert 'href="../course/results/cpu-current/01-demo.ipynb"' in page  # the local executed notebook
    assert page.count('class="history"') == 2
    assert "<th>ran on</th>" in page and "Python: 3.11.7; OS: Debian GNU/Linux 12 (bookworm)" in page  # every fact


def test_a_lab_without_runs_says_so(make_course, tmp_path):
    root = make_course()
    _, page = render(root, tmp_path)
    assert "No run yet." in page and 'class="history"' not in page
