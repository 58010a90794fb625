"""Shared by the freshness tests: a small release matrix, runs and records made to measure."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from rocmlab.execution.fingerprint import freeze_hash
from rocmlab.execution.results import Record, write_record
from rocmlab.report.history import Run

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
# The real matrix as it stood when tests/fixtures/upstream/ was recorded: tests that assert its pins
# read this copy, so that a maintainer's bump of env/matrix.toml leaves them green.
RECORDED_MATRIX = Path(__file__).parent / "fixtures" / "upstream" / "matrix-recorded.toml"
FACTS = '["rocm", "released", "pytorch", "python", "gfx", "install", "pins"]'
SOURCE = f'{{ url = "https://example.org/notes", seen = 2026-11-29, facts = {FACTS}, fact = "test entry" }}'
MATRIX = f"""\
schema = 1

[[rocm]]
name = "rocm-10.0"
rocm = "10.0.0"
released = 2026-08-26
era = "therock"
pytorch = "2.11.0"
python = "3.12"
status = "current"
gfx = ["gfx942"]
runner_gfx = "gfx942"
install = {{ method = "multiarch", index_url = "https://example.org/whl/", requirement = "torch[device-{{gfx}}]==2.11.0+rocm10.0.0" }}
sources = [{SOURCE}]

[[rocm]]
name = "rocm-7.14"
rocm = "7.14.0"
released = 2026-07-16
era = "therock"
pytorch = "2.12.0"
python = "3.12"
status = "current"
gfx = ["gfx90a"]
runner_gfx = "gfx90a"
install = {{ method = "multiarch", index_url = "https://example.org/whl/", requirement = "torch[device-{{gfx}}]==2.12.0+rocm7.14.0" }}
sources = [{SOURCE}]

[[rocm]]
name = "rocm-7.2"
rocm = "7.2.4"
released = 2026-05-29
era = "7.x"
pytorch = "2.10.0"
python = "3.12"
status = "previous"
gfx = ["gfx90a"]
runner_gfx = "gfx90a"
install = {{ method = "image", image = "rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0" }}
sources = [{SOURCE}]

[[cpu]]
name = "cpu-current"
python = "3.11"
status = "current"
pins = ["torch==2.13.0+cpu", "transformers==5.24.0", "peft==0.21.2"]
sources = [{SOURCE}]

[[cpu]]
name = "cpu-previous"
python = "3.11"
status = "previous"
pins = ["torch==2.13.0+cpu", "transformers==4.57.6", "peft==0.17.1"]
sources = [{SOURCE}]
"""

CPU_CURRENT = ["torch==2.13.0+cpu", "transformers==5.24.0", "peft==0.21.2", "numpy==2.4.6"]
CPU_PREVIOUS = ["torch==2.13.0+cpu", "transformers==4.57.6", "peft==0.17.1", "numpy==2.4.6"]
ROCM_10 = ["torch==2.11.0+rocm10.0.0", "transformers==5.24.0", "rocm-sdk-core==10.0.0"]
ROCM_714 = ["torch==2.12.0+rocm7.14.0", "transformers==5.24.0", "rocm-sdk-core==7.14.0"]
FREEZES = {"cpu-current": CPU_CURRENT, "cpu-previous": CPU_PREVIOUS, "rocm-10.0": ROCM_10, "rocm-7.14": ROCM_714}


def write_matrix(root: Path, cpu_current_pins: list[str] | None = None) -> Path:
    """MATRIX under root; cpu_current_pins replace cpu-current's pins (e.g. what is installed here)."""
    text = MATRIX
    if cpu_current_pins is not None:
        pins_line = f"pins = {json.dumps(CPU_CURRENT[:3])}"
        assert pins_line in text, "MATRIX's cpu-current pins no longer match CPU_CURRENT"
        text = text.replace(pins_line, f"pins = {json.dumps(cpu_current_pins)}", 1)
    path = root / "env" / "matrix.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def entries(root: Path) -> list:
    from rocmlab.freshness.releases import load_matrix

    return load_matrix(write_matrix(root))


def fingerprint(env: str, freeze: list[str] | None = None) -> dict:
    """What `python -m rocmlab.execution.fingerprint` would record in that environment (its JSON form)."""
    freeze = sorted(freeze if freeze is not None else FREEZES.get(env, CPU_CURRENT))
    packages = dict(line.split("==", 1) for line in freeze)
    rocm = packages.get("rocm-sdk-core")
    return {
        "python": "3.12.3" if rocm else "3.11.7",
        "os": "Debian GNU/Linux 12 (bookworm)",
        "packages": {k: v for k, v in packages.items() if k in ("torch", "transformers", "peft", "numpy")},
        "freeze": freeze,
        "freeze_sha256": freeze_hash(freeze),
        "rocm": rocm,
        "rocm_source": "rocm-sdk-core package" if rocm else "",
        "gpus": [{"name": "AMD Instinct MI300X", "arch": "gfx942", "memory_gb": 192.0}] if rocm else [],
    }


def at(days_ago: float, now: dt.datetime = NOW) -> str:
    return (now - dt.timedelta(days=days_ago)).isoformat(timespec="seconds")


def make_run(lab="01-demo", env="cpu-current", status="passed", days_ago=1.0, freeze=None, **kw) -> Run:
    fp = fingerprint(env, freeze)
    installed = fp.pop("freeze")
    base = dict(
        lab=lab,
        lab_version="1.0.0",
        env=env,
        profile="gpu" if env.startswith("rocm") else "smoke",
        status=status,
        started_at=at(days_ago),
        duration_s=4.0,
        fingerprint=fp,
        freeze_sha256=fp.pop("freeze_sha256"),
        freeze=installed,
    )
    if status in ("failed", "timeout", "crashed", "flaky"):
        base["failing_cell"] = {"index": 7, "ename": "RuntimeError", "evalue": "HIP error: invalid device function"}
        base["reason"] = "cell 7: RuntimeError: HIP error: invalid device function"
    base.update(kw)
    return Run(**base)


def write_result(results: Path, lab="01-demo", env="cpu-current", status="passed", days_ago=1.0, freeze=None, **kw):
    """A record as `rocmlab run` leaves it under results/<env>/<lab>.json."""
    record = Record(
        lab=lab,
        lab_version=kw.pop("lab_version", "1.0.0"),
        profile="gpu" if env.startswith("rocm") else "smoke",
        env=env,
        status=status,
        started_at=kw.pop("started_at", at(days_ago, dt.datetime.now(dt.UTC))),
        duration_s=kw.pop("duration_s", 4.0),
        fingerprint=fingerprint(env, freeze),
        notebook=f"{lab}.ipynb",
        **kw,
    )
    write_record(record, results / env / f"{lab}.json")
    return record


def executed_notebook(path: Path, durations: list[float], error: dict | None = None) -> Path:
    """An executed notebook as papermill leaves it: code cells with papermill durations."""
    cells = []
    for i, seconds in enumerate(durations):
        outputs = []
        if error and i == len(durations) - 1:
            outputs.append({"output_type": "error", **error})
        cells.append(
            {
                "cell_type": "code",
                "source": f"step_{i}()\n",
                "metadata": {"papermill": {"duration": seconds, "status": "completed"}},
                "outputs": outputs,
                "execution_count": i + 1,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}), encoding="utf-8")
    return path


def dashboard_course(make_course, now: dt.datetime | None = None) -> Path:
    """A course with six weeks of history: CPU runs each week (01-demo failed once, 02-other fails
    in the newest week after a numpy bump), ROCm 7.14 runs, ROCm 10.0 never
    run, a lab title that must be escaped, one executed notebook."""
    from rocmlab.report import history

    now = now or dt.datetime.now(dt.UTC)
    root = make_course({"01-demo": (None, None), "02-other": (None, None)})
    toml = root / "solutions" / "02-other" / "lab.toml"
    toml.write_text(toml.read_text().replace('en = "Test"', 'en = "<script>alert(1)</script> & co"'))
    write_matrix(root)
    runs = []
    for week in range(6, 0, -1):
        days = week * 7 - 0.5
        failed = week == 3
        runs.append(
            make_run(
                env="cpu-current",
                status="failed" if failed else "passed",
                started_at=at(days, now),
                duration_s=20.0 + week,
                run_url=f"https://github.com/amd/rocmlab/actions/runs/{100 + week}",
                cells=[{"index": 2, "label": "train()", "duration_s": 10.0 + week}],
            )
        )
        newest = week == 1  # 02-other breaks in the newest week, after numpy moved
        runs.append(
            make_run(
                lab="02-other",
                env="cpu-current",
                status="failed" if newest else "passed",
                started_at=at(days, now),
                duration_s=31.0,
                freeze=[p.replace("numpy==2.4.6", "numpy==2.5.0") for p in CPU_CURRENT] if newest else None,
            )
        )
        runs.append(
            make_run(
                env="rocm-7.14",
                started_at=at(days + 0.2, now),
                duration_s=12.0,
            )
        )
    runs.append(make_run(env="cpu-previous", started_at=at(2, now), duration_s=22.0))
    history.append(root, runs)
    executed_notebook(root / "results" / "cpu-current" / "01-demo.ipynb", [0.4, 1.2, 9.0])
    write_result(root / "results", lab="01-demo", env="cpu-current", days_ago=0.2, duration_s=21.5)
    return root


def render_dashboard(root: Path, page: Path) -> str:
    """`rocmlab report --format html` of ``root`` (ledger and results/) into ``page``; its text."""
    from rocmlab.cli import main

    argv = [
        "--root",
        str(root),
        "report",
        "--results",
        str(root / "results"),
        "--format",
        "html",
        "--output",
        str(page),
    ]
    assert main(argv) == 0
    return page.read_text(encoding="utf-8")
