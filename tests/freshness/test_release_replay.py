"""The release history replayed: ROCm 7.2 -> 7.14 -> 10.0 -> 10.1 -> a synthetic 10.2 with torch 2.15.

Each step is one weekly `rocmlab releases check --apply` against what upstream answered that day
(tests/fixtures/replay/, recorded in the sources' own formats: PEP 503 HTML indexes as AMD and
PyTorch serve them, GitHub's releases API with the real tag and name shapes, Docker Hub's tags
with series-only rocm10.0_… names, PyPI's JSON), starting from the real matrix file's shape
with its comments. Each step must be detected, proposed, applied, loaded and schema-validated,
and must start the freshness runs of exactly the entries that changed.
"""

import datetime as dt
import difflib
import importlib.util
import json
import shutil
from pathlib import Path

import matrix_json  # ci/matrix_json.py (ci/ is on pytest's pythonpath)
import pytest

from rocmlab import schemas
from rocmlab.cli import main
from rocmlab.freshness import matrix, proposals, pull_request, releases, upstream

ROOT = Path(__file__).resolve().parents[2]
REPLAY = Path(__file__).parents[1] / "fixtures" / "replay"
_spec = importlib.util.spec_from_file_location("make_fixtures", REPLAY / "make_fixtures.py")
make_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_fixtures)

# step folder -> what a maintainer expects of it
STEPS = [
    (
        "step1-rocm7.14",
        {
            "new": ("rocm-7.14", "2.12.0", "https://repo.amd.com/rocm/whl-multi-arch/"),
            "removed": [],
            "changed": ["rocm-7.14"],
            "rocm_jobs": ["rocm-7.14", "rocm-7.2"],
            "cpu_jobs": [],
        },
    ),
    (
        "step2-rocm10.0",
        {
            "new": ("rocm-10.0", "2.13.0", "https://stable.repo.amd.com/rocm/whl-next/"),
            "removed": [
                'rocm = "7.14.0"',
                "released = 2026-07-15",
                'install = { method = "multiarch", index_url = "https://repo.amd.com/rocm/whl-multi-arch/", '
                'requirement = "torch[device-{gfx}]==2.12.0+rocm7.14.0" }',
                'status = "current"',
                '  "transformers==5.20.0",',
            ],
            "changed": ["rocm-10.0", "rocm-7.14", "cpu-current"],
            "rocm_jobs": ["rocm-10.0", "rocm-7.14"],
            "cpu_jobs": ["cpu-current"],
        },
    ),
    (
        "step3-rocm10.1",
        {
            "new": ("rocm-10.1", "2.14.0", "https://stable.repo.amd.com/rocm/whl-next/"),
            "removed": ['status = "current"'],
            "changed": ["rocm-10.1"],
            "rocm_jobs": ["rocm-10.1"],
            "cpu_jobs": [],
            "notice": "PyTorch's own index https://download.pytorch.org/whl/rocm7.14/ has torch 2.14.0+rocm7.14",
        },
    ),
    (
        "step4-rocm10.2",
        {
            "new": ("rocm-10.2", "2.15.0", "https://stable.repo.amd.com/rocm/whl-next/"),
            "removed": ['status = "current"', '  "transformers==5.22.0",', '  "peft==0.20.0",'],
            "changed": ["rocm-10.2", "cpu-current"],
            "rocm_jobs": ["rocm-10.2"],
            "cpu_jobs": ["cpu-current"],
            "held": ["torch 2.14.1 held; PyPI has 2.15.0", "triton 3.8.0 held; PyPI has 3.9.0"],
            "capped": ["transformers 6.0.0 (2026-11-12) crosses the cap `<6,>=4.56`"],
            "majors": ["accelerate 2.0.0 (2026-11-17) is a new major over the pinned 1.14.0"],
            "unwatched": ["rocm-7.2: rocm/pytorch has images of ROCm 7.2.5"],
            # after the edit: the cap, the unmarked major and the 7.2.5 images still need a person
            "after": releases.EXIT_NEEDS_PERSON,
            "yanked": [("cpu-current", "peft", "0.20.0")],
            # published after the matrix's newest release: it may be the new one, so the check is partial
            "unreadable": [
                "TheRock release tag 'dev-tarballs' name 'dev-tarballs' "
                "(https://github.com/ROCm/TheRock/releases/tag/dev-tarballs): neither the tag nor the name holds "
                "a ROCm version"
            ],
        },
    ),
]
DAYS = dict((folder, day) for day, folder in make_fixtures.STEPS)


def course(tmp_path: Path) -> Path:
    """A course checkout as the weekly job sees it: env/matrix.toml (the 7.2-era file) and pyproject.toml."""
    (tmp_path / "env").mkdir()
    shutil.copy(REPLAY / "matrix-7.2.toml", tmp_path / "env" / "matrix.toml")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def check(path: Path, step: str, *extra) -> int:
    return main(
        ["releases", "check", "--matrix", str(path), "--fixtures", str(REPLAY / step), "--today", DAYS[step], *extra]
    )


def header(text: str) -> str:
    return text[: text.index("schema = 1")]


def jobs(path: Path, kind: str, only: list[str], capsys) -> list[str]:
    """The freshness workflow's job matrix for `entries=…` (ci/matrix_json.py --only, as the workflow runs it)."""
    if not only:
        return []
    capsys.readouterr()
    assert matrix_json.main(["--matrix", str(path), "--kind", kind, "--only", ",".join(only)]) == 0
    return [job["name"] for job in json.loads(capsys.readouterr().out)["include"]]


def test_the_replay_starts_from_the_real_matrix_shape():
    real = (ROOT / "env" / "matrix.toml").read_text(encoding="utf-8")
    start = (REPLAY / "matrix-7.2.toml").read_text(encoding="utf-8")
    assert header(start) == header(real)  # the comment lines of the real file, [[rocm]] in them included
    assert "# [[rocm]]" in header(start)
    entries = releases.load_matrix(REPLAY / "matrix-7.2.toml")
    assert [(e.name, e.status) for e in entries if e.kind == "rocm"] == [
        ("rocm-7.2", "current"),
        ("rocm-7.1", "eol"),
        ("rocm-6.4", "eol"),
    ]


def test_the_recorded_answers_are_what_the_generator_writes(tmp_path):
    make_fixtures.write(tmp_path)
    for _day, step in make_fixtures.STEPS:
        for recorded in sorted((REPLAY / step).iterdir()):
            fresh = tmp_path / step / recorded.name
            assert fresh.read_text(encoding="utf-8") == recorded.read_text(encoding="utf-8"), recorded


def test_the_recorded_answers_are_in_the_sources_formats():
    step = REPLAY / "step4-rocm10.2"
    amd = (step / "whl-next-torch.html").read_text(encoding="utf-8")
    assert amd.startswith("<!DOCTYPE html>") and "<h1>Links for torch</h1>" in amd
    assert 'href="torch-2.15.0%2Brocm10.2.0-cp312-cp312-manylinux_2_28_x86_64.whl"' in amd
    # TheRock's generator: no PEP 592 data-yanked (a pulled wheel is deleted), no #sha256 fragment by default
    assert "data-yanked" not in amd and "#sha256=" not in amd and "2.14.1%2Brocm10.1.0" not in amd
    assert "torch-2.14.2%2Brocm10.1.0-cp312-cp312-win_amd64.whl" in amd  # Windows only
    assert "torch-2.14.2%2Brocm10.1.0-cp312-cp312-manylinux" not in amd
    device = (step / "whl-next-amd-torch-device-gfx942.html").read_text(encoding="utf-8")
    assert "<h1>Links for amd-torch-device-gfx942</h1>" in device and "-py3-none-linux_x86_64.whl" in device
    pytorch = (step / "pytorch-rocm7.14-torch.html").read_text(encoding="utf-8")
    assert 'href="/whl/rocm7.14/torch-2.14.0%2Brocm7.14-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=' in pytorch
    tags = {r["name"] for r in json.loads((step / "dockerhub-rocm10.0.json").read_text())["results"]}
    assert "rocm10.0_ubuntu26.04_py3.14_pytorch_release_2.13.0" in tags  # series-only, as Docker Hub has them
    tags = {r["name"] for r in json.loads((step / "dockerhub-rocm10.1.json").read_text())["results"]}
    assert tags == {"rocm10.1.0_ubuntu24.04_py3.12_pytorch_release_2.14.0"}  # full version from 10.1
    releases_page = json.loads((step / "therock-releases.json").read_text())
    assert {(r["tag_name"], r["name"]) for r in releases_page} >= {
        ("therock-7.14", "therock-7.14"),
        ("therock-10.0", "ROCm 10.0.0"),
    }
    manifest = json.loads((step / "manifest.json").read_text())
    assert manifest["https://stable.repo.amd.com/rocm/whl-next/torch/"]["content_type"] == "text/html"
    # a missing index on S3 answers 403 AccessDenied; PyTorch's rocm7.2 and rocm7.14 indexes exist
    assert manifest["https://download.pytorch.org/whl/rocm10.2/torch/"] == {"status": 403}
    assert all("file" in manifest[f"https://download.pytorch.org/whl/rocm{s}/torch/"] for s in ("7.2", "7.14"))


def test_replay_of_the_release_history(tmp_path, capsys):
    path = course(tmp_path) / "env" / "matrix.toml"
    for step, want in STEPS:
        before = path.read_text(encoding="utf-8")
        body = tmp_path / f"{step}.md"
        code = check(path, step, "--apply", "--json", "--body-out", str(body))
        out = capsys.readouterr().out
        assert code == releases.EXIT_UPDATES, (step, out)
        found = json.loads(out)
        assert not found["failures"], (step, found["failures"])
        assert found["unreadable"] == want.get("unreadable", []), step

        # detected and proposed
        (new,) = found["new_entries"]
        name, torch, index = want["new"]
        assert (new["name"], new["pytorch"], new["install"]["index_url"]) == (name, torch, index), step
        assert new["install"]["requirement"] == f"torch[device-{{gfx}}]=={torch}+rocm{new['rocm']}"
        assert found["changed_entries"] == want["changed"], step
        for key in ("held", "capped", "majors", "unwatched"):
            assert len(found[key]) == len(want.get(key, [])), (step, key, found[key])
            for said in want.get(key, []):
                assert any(said in h for h in found[key]), (step, key, found[key])
        assert [(y["entry"], y["package"], y["version"]) for y in found["yanked"]] == want.get("yanked", [])
        if "notice" in want:
            assert any(want["notice"] in n for n in found["notices"]), found["notices"]
        text = body.read_text(encoding="utf-8")
        assert f'name = "{name}"' in text
        runs = text[text.index("### What runs again") : text.index("### Checklist")]
        listed = [line[2:].split(" on ")[0] for line in runs.splitlines() if line.startswith("- ")]
        assert listed == want["changed"] == [r["entry"] for r in found["runs"]], (step, runs)

        # applied: loads, passes the schema, and the diff is what a maintainer writes
        after = path.read_text(encoding="utf-8")
        loaded = releases.read_matrix(path)
        assert loaded.entries[0].name == name and loaded.get(name).status == "current"
        assert len([e for e in loaded.entries if e.kind == "rocm" and e.status == "current"]) <= 2
        assert header(after) == header(before)
        diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
        removed = [line[1:] for line in diff if line.startswith("-") and not line.startswith("---")]
        assert removed == want["removed"], (step, removed)
        first_rocm = before.index("\n[[rocm]]\n") + 1
        assert after[first_rocm:].startswith(f'[[rocm]]\nname = "{name}"\n')  # in front of the first real table
        assert after[:first_rocm] == before[:first_rocm]

        # the freshness runs of the changed entries: the job matrices of `entries=<changed>`
        assert jobs(path, "rocm", want["changed"], capsys) == [n for n in want["rocm_jobs"] if n in want["changed"]]
        assert jobs(path, "cpu", want["changed"], capsys) == want["cpu_jobs"]

        # and the next check of the same day proposes nothing more; what needs a person stays said
        after_code = check(path, step, "--json")
        again = json.loads(capsys.readouterr().out)
        assert not again["new_entries"] and not again["updates"], step
        assert after_code == want.get("after", releases.EXIT_UP_TO_DATE), (step, again["needs_person"])

    final = releases.read_matrix(path)
    assert [(e.name, e.rocm, e.pytorch, e.status) for e in final.entries if e.kind == "rocm"] == [
        ("rocm-10.2", "10.2.0", "2.15.0", "current"),
        ("rocm-10.1", "10.1.0", "2.14.0", "current"),
        ("rocm-10.0", "10.0.0", "2.13.0", "previous"),
        ("rocm-7.14", "7.14.1", "2.12.0", "previous"),
        ("rocm-7.2", "7.2.4", "2.10.0", "previous"),
        ("rocm-7.1", "7.1.1", "2.10.0", "eol"),
        ("rocm-6.4", "6.4.4", "2.8.0", "eol"),
    ]
    assert final.get("rocm-7.14").released == dt.date(2026, 8, 31)
    assert final.get("cpu-current").pins[1:3] == ("transformers==5.24.0", "peft==0.21.2")


def test_a_release_without_a_torch_build_is_pending_not_proposed(tmp_path, capsys):
    """10.2 is out, but no channel has a torch for it yet: never an entry with 10.1's torch under a 10.2 name."""
    path = course(tmp_path) / "env" / "matrix.toml"
    for step, _ in STEPS[:3]:
        check(path, step, "--apply")
    capsys.readouterr()
    folder = tmp_path / "step4-no-build"
    shutil.copytree(REPLAY / "step4-rocm10.2", folder)
    shutil.copy(REPLAY / "step3-rocm10.1" / "whl-next-torch.html", folder / "whl-next-torch.html")
    entries = releases.load_matrix(path)
    found = upstream.gather(entries, upstream.Recorded(folder))
    findings = proposals.compare(entries, found, today=dt.date(2026, 11, 20))
    assert not findings.new_entries and not findings.failures
    (pending,) = findings.pending
    assert (
        pending.startswith("ROCm 10.2.0 released 2026-11-18")
        and "https://stable.repo.amd.com/rocm/whl-next/" in pending
    )
    assert f"- waiting for torch: {pending}" in pull_request.render_body(findings)
    assert releases.exit_code(findings) == releases.EXIT_UPDATES  # the pin updates go to the PR, the issue
    assert any(r.startswith("waiting for torch: ROCm 10.2.0") for r in findings.needs_person)  # said on the issue


def test_older_new_series_are_noticed_not_proposed():
    """From 7.2, the whole preview train 7.9-7.13 is newer too: only the newest series becomes an entry."""
    entries = releases.load_matrix(REPLAY / "matrix-7.2.toml")
    found = upstream.gather(entries, upstream.Recorded(REPLAY / "step1-rocm7.14"))
    assert not any("rocm7.13" in asked for asked in found.asked)  # not even asked
    findings = proposals.compare(entries, found, today=dt.date(2026, 7, 20))
    assert [e["name"] for e in findings.new_entries] == ["rocm-7.14"]
    assert sum("newer than the matrix but older than the series proposed" in n for n in findings.notices) == 5


@pytest.mark.parametrize("kind", ["rocm", "cpu"])
def test_every_replayed_matrix_validates_against_the_schema(tmp_path, kind, capsys):
    path = course(tmp_path) / "env" / "matrix.toml"
    for step, _ in STEPS:
        check(path, step, "--apply")
        data = __import__("tomllib").loads(path.read_text(encoding="utf-8"))
        schemas.validate(data, "matrix", path, matrix.MatrixError)
        assert all(table["name"] for table in data[kind])
    capsys.readouterr()
