"""docs/measurements.md: its one writer (benchmarks/measurements.py) and the CI log reader (ci_times.py)."""

import datetime as dt
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
ROOT = BENCHMARKS.parent


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


measurements, ci_times = load("measurements"), load("ci_times")

# The tail of a `.ci/run` log as its report() prints it (printf '%-6s %5d s'; a failed step last).
CI_LOG = """-- slow took 1528 s
== step times
   lint      35 s
   test      65 s
   site      15 s
   model      1 s
   slow    1528 s
   total  1644 s
"""
CI_LOG_FAILED = """== step times
   lint      38 s
   test      70 s (failed)
   total   108 s
"""


def test_a_record_adds_the_newest_entry_first_and_keeps_the_others(tmp_path):
    page = tmp_path / "measurements.md"
    day = dt.date(2026, 12, 6)
    measurements.record("ci", "lint 35 s; 1644 s in all", page=page, when=day, on="2 cores, Xeon")
    measurements.record("ci", "lint 38 s;\n 1700 s in all", page=page, when=day, on="2 cores, Xeon")
    measurements.record("newcomer", "`first: 835 s second: 353 s test: 79 s`", page=page, when=day, on="2 cores")
    text = page.read_text()
    assert measurements.entries(text, "ci") == [
        "- **2026-12-06**, 2 cores, Xeon: lint 38 s; 1700 s in all",
        "- **2026-12-06**, 2 cores, Xeon: lint 35 s; 1644 s in all",
    ]
    assert measurements.entries(text, "grading") == ["- none recorded yet"]
    titles = re.findall(r"^## (.+)$", text, re.M)
    assert titles == [title for title, _how in measurements.SECTIONS.values()]


def test_the_committed_page_is_what_the_writer_renders_from_its_entries():
    """docs/measurements.md is generated: rendering its own entries again changes nothing."""
    text = (ROOT / "docs" / "measurements.md").read_text(encoding="utf-8")
    kept = {name: measurements.entries(text, name) for name in measurements.SECTIONS}
    assert measurements.render(kept) == text
    assert all(kept.values())


def test_the_readme_links_the_page_and_keeps_no_dated_figures_of_its_own():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count("docs/measurements.md") >= 3
    for figure in ("first: 736 s", "1644 s in all", "**2.03×**", "Measured 2026-"):
        assert figure not in readme
    # a measured figure is dated (in parentheses) or a CPU-s count other than the target's
    assert not re.findall(r"\(20\d\d-\d\d-\d\d\)|\b(?!120 )\d+ CPU-s", readme)


@pytest.mark.parametrize(
    ("section", "figures", "message"), [("speed", "x", "unknown section"), ("ci", " ", "no figures")]
)
def test_bad_records_are_refused(tmp_path, section, figures, message):
    with pytest.raises(ValueError, match=message):
        measurements.record(section, figures, page=tmp_path / "m.md")
    assert not (tmp_path / "m.md").exists()


def test_the_machine_names_its_cores_cpu_and_load():
    assert re.fullmatch(r"\d+ cores, .+, load [\d.]+/[\d.]+", measurements.machine())


def test_ci_times_reads_the_last_step_times_block():
    times = ci_times.step_times("== step times\n   lint      99 s\n   total    99 s\n" + CI_LOG)
    assert times[0] == ("lint", 35, False) and times[-1] == ("total", 1644, False)
    line = ci_times.figures(times, "fresh clone")
    assert line == "lint 35 s, test 65 s, site 15 s, model 1 s, slow 1528 s; 1644 s in all (fresh clone)"
    assert ci_times.figures(ci_times.step_times(CI_LOG_FAILED)) == "lint 38 s, test 70 s (failed); 108 s in all"


@pytest.mark.parametrize(
    ("log", "message"),
    [("== lint\nok\n", "no '== step times' block"), ("== step times\n   lint      35 s\n", "no total line")],
)
def test_ci_times_refuses_a_log_without_a_whole_block(tmp_path, log, message):
    path = tmp_path / "ci.log"
    path.write_text(log)
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "ci_times.py"), str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and f"{path}: " in proc.stderr and message in proc.stderr
