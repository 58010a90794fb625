"""The release matrix (schema, facts), upstream answers (recorded), proposals, verify-pins."""

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest
from freshness_helpers import RECORDED_MATRIX
from packaging.version import Version

from rocmlab import schemas
from rocmlab.cli import main
from rocmlab.course.course import Course
from rocmlab.errors import ExitCode
from rocmlab.freshness import matrix, pins, proposals, pull_request, releases, upstream, upstream_pages
from rocmlab.freshness.releases import MatrixError

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "env" / "matrix.toml"
UPSTREAM = Path(__file__).parents[1] / "fixtures" / "upstream"
BEFORE = UPSTREAM / "matrix-before.toml"
TODAY = dt.date(2026, 12, 1)


def cli(*argv) -> int:
    return main(["releases", *argv])


def recorded(entries):
    return upstream.gather(entries, upstream.Recorded(UPSTREAM))


# ---------------------------------------------------------------- the real matrix


def test_matrix_is_newest_first_rocm_then_cpu():
    entries = releases.load_matrix(MATRIX)
    kinds = [e.kind for e in entries]
    assert kinds == sorted(kinds, key=lambda k: k != "rocm"), kinds
    rocm = [Version(e.rocm) for e in entries if e.kind == "rocm"]
    assert rocm == sorted(rocm, reverse=True)
    assert [e.name for e in entries if e.kind == "cpu"] == ["cpu-current", "cpu-previous"]


def test_the_recorded_matrix_has_the_rocm_releases_of_its_day():
    """Values of one day, asserted on the frozen copy (the real matrix moves with every bot PR)."""
    m = releases.read_matrix(RECORDED_MATRIX)
    assert (m.get("rocm-10.1").rocm, m.get("rocm-10.1").status) == ("10.1.0", "current")
    assert m.get("rocm-7.14").rocm == "7.14.1"
    assert m.get("rocm-10.0").install.requirement == "torch[device-{gfx}]==2.13.0+rocm10.0.0"
    for name in ("rocm-10.1", "rocm-10.0", "rocm-7.14"):
        entry = m.get(name)
        # TheRock publishes device extras for gfx90a and the RDNA targets; gfx942 is its release-ready Instinct target
        assert {"gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201", "gfx1030"} <= set(entry.gfx)
        assert entry.runner_gfx == "gfx942" and entry.install.method == "multiarch"


def test_every_fact_has_a_source_with_a_date():
    m = releases.read_matrix(MATRIX)
    for entry in m.entries + m.canaries:
        assert entry.sources, entry.name
        assert all(s.url.startswith("https://") and s.seen <= dt.date.today() and s.facts for s in entry.sources)
        # a fact is named by a source, or marked unverified (as the bot marks the gfx targets it copies)
        covered = {f for s in entry.sources for f in s.facts} | set(getattr(entry, "unverified", ()))
        required = {"rocm": matrix.ROCM_FACTS, "cpu": matrix.CPU_FACTS, "canary": matrix.CANARY_FACTS}[entry.kind]
        assert set(required) <= covered, (entry.name, set(required) - covered)


def test_a_fact_without_a_source_is_an_error_unless_marked_unverified(tmp_path):
    text = MATRIX.read_text(encoding="utf-8")
    start = text.index('name = "rocm-6.4"')
    block_end = text.index("\n[[cpu]]")
    block = text[start:block_end].replace('facts = ["gfx"]', 'facts = ["python"]')
    path = tmp_path / "matrix.toml"
    path.write_text(text[:start] + block + text[block_end:], encoding="utf-8")
    with pytest.raises(MatrixError, match=r"rocm-6.4.*'sources'.*'gfx'"):
        releases.load_matrix(path)
    marked = block.replace(
        'unverified = ["pytorch", "python", "install"]', 'unverified = ["pytorch", "python", "install", "gfx"]'
    )
    path.write_text(text[:start] + marked + text[block_end:], encoding="utf-8")
    assert "gfx" in releases.read_matrix(path).get("rocm-6.4").unverified


def test_cpu_entries_pin_two_library_generations():
    m = releases.read_matrix(MATRIX)
    current, previous = m.get("cpu-current"), m.get("cpu-previous")
    assert Version(current.pin("transformers")).major == Version(previous.pin("transformers")).major + 1
    assert Version(current.pin("peft")) > Version(previous.pin("peft"))
    assert Version(current.torch_version) >= Version("2.14.1") and current.held == ("torch", "triton")
    assert previous.torch_version == "2.13.0+cpu"


def test_canaries_are_not_environments_a_lab_is_judged_on():
    m = releases.read_matrix(MATRIX)
    assert {c.name for c in m.canaries} >= {"canary-pytorch-nightly", "canary-therock-nightly"}
    assert all(c.name not in {e.name for e in releases.load_matrix(MATRIX)} for c in m.canaries)
    assert m.get("canary-therock-nightly").on_gpu and not m.get("canary-pytorch-nightly").on_gpu


def test_newest_environment_is_the_first_current_entry():
    entries = releases.load_matrix(MATRIX)
    newest = releases.newest_environment(path=MATRIX)
    current_rocm = [e for e in entries if e.kind == "rocm" and e.status == "current"]
    assert newest == next(e for e in entries if e.status == "current")
    assert newest == max(current_rocm, key=lambda e: Version(e.rocm))
    assert releases.newest_environment("cpu", MATRIX).name == "cpu-current"
    assert releases.newest_environment(path=RECORDED_MATRIX).name == "rocm-10.1"


def test_every_gpu_entry_runs_on_a_target_it_carries():
    for entry in releases.load_matrix(MATRIX):
        if entry.kind == "rocm":
            assert entry.runner_gfx in entry.gfx, entry.name


def test_job_matrix_lists_current_entries_with_runner_labels():
    entries = releases.load_matrix(MATRIX)
    jobs = releases.job_matrix(entries)["include"]
    assert [j["name"] for j in jobs] == [e.name for e in entries if e.kind == "rocm" and e.status == "current"]
    for job in jobs:
        assert job["runs_on"] == ["self-hosted", "linux", "rocm", job["gfx"]]
        assert (ROOT / job["dockerfile"]).is_file()
    variables = {"ROCMLAB_RUNNER_GFX942": "linux-gfx942-1gpu-ossci", "ROCMLAB_RUNNER_GFX942_MULTI": '["a", "b"]'}
    single = releases.job_matrix(entries, variables=variables)["include"][0]
    multi = releases.job_matrix(entries, variables=variables, multi=True)["include"][0]
    assert (single["runs_on"], multi["runs_on"]) == (["linux-gfx942-1gpu-ossci"], ["a", "b"])
    assert releases.runner_labels("gfx90a", {}, multi=True)[-2:] == ["gfx90a", "multi-gpu"]
    with pytest.raises(MatrixError, match="ROCMLAB_RUNNER_GFX942"):
        releases.runner_labels("gfx942", {"ROCMLAB_RUNNER_GFX942": "[1, 2]"})


# ---------------------------------------------------------------- schema: bad input names file, entry, field

ROCM_OK = """\
schema = 1
[[rocm]]
name = "rocm-7.14"
rocm = "7.14.0"
released = 2026-07-16
era = "therock"
pytorch = "2.12.0"
python = "3.12"
status = "current"
gfx = ["gfx942", "gfx90a"]
runner_gfx = "gfx942"
install = { method = "multiarch", index_url = "https://example.org/whl/", requirement = "torch[device-{gfx}]==2.12.0+rocm7.14.0" }
sources = [{ url = "https://example.org/notes", seen = 2026-11-29, facts = ["rocm", "released", "pytorch", "python", "gfx", "install"], fact = "released" }]

[[cpu]]
name = "cpu-current"
python = "3.11"
status = "current"
pins = ["torch==2.13.0+cpu", "transformers==5.24.0"]
sources = [{ url = "https://example.org/pypi", seen = 2026-11-29, facts = ["pins"], fact = "pins" }]
"""

BAD = [
    ('status = "current"\ngfx', 'status = "fresh"\ngfx', "'rocm-7.14'", "status"),
    ('runner_gfx = "gfx942"', 'runner_gfx = "gfx1100"', "'rocm-7.14'", "runner_gfx"),
    ('gfx = ["gfx942", "gfx90a"]', 'gfx = ["942"]', "'rocm-7.14'", "gfx"),
    ('name = "rocm-7.14"', 'name = "rocm-7.2"', "'rocm-7.2'", "name"),
    ('rocm = "7.14.0"', 'rocm = "seven"', "'rocm-7.14'", "rocm"),
    ("released = 2026-07-16", 'released = "July"', "'rocm-7.14'", "released"),
    ("released = 2026-07-16", "released = 2026-07-16T10:00:00", "'rocm-7.14'", "released"),
    ('era = "therock"', 'era = "7.x"', "'rocm-7.14'", "era"),
    ("torch[device-{gfx}]==2.12.0", "torch==2.12.0", "install", "requirement"),
    ("torch[device-{gfx}]==2.12.0+rocm7.14.0", "torch[device-{gfx}]==2.11.0+rocm7.14.0", "install", "requirement"),
    ("torch[device-{gfx}]==2.12.0+rocm7.14.0", "torch[device-{gfx}]==2.12.0+rocm7.13.0", "install", "requirement"),
    ('method = "multiarch"', 'method = "conda"', "install", "method"),
    ('"transformers==5.24.0"', '"transformers>=5"', "'cpu-current'", "pins"),
    ('"torch==2.13.0+cpu", ', "", "'cpu-current'", "pins"),
    ('python = "3.11"', 'python = "py311"', "'cpu-current'", "python"),
    ('{ url = "https://example.org/pypi"', '{ url = "ftp://example.org/pypi"', "'cpu-current' sources[0]", "url"),
    ('facts = ["pins"]', 'facts = ["colour"]', "'cpu-current' sources[0]", "facts"),
    ('status = "current"\npins', 'status = "current"\ncolour = "red"\npins', "'cpu-current'", "colour"),
    ('status = "current"\npins', 'status = "current"\nheld = ["peft"]\npins', "'cpu-current'", "held"),
    ("schema = 1", "schema = 2", "top level", "schema"),
    ('name = "rocm-7.14"\n', "", "[[rocm]] entry #1: missing field", "name"),
    ("install = { method", "instal = { method", "'rocm-7.14': unknown field", "instal"),
    ('method = "multiarch", ', 'method = "image", ', "install: missing field 'image' (with method = image", "image"),
    ('runner_gfx = "gfx942"', "", "'rocm-7.14': missing field", "runner_gfx"),
]


@pytest.mark.parametrize("old,new,where,field", BAD, ids=[b[3] + "-" + b[1][:18] for b in BAD])
def test_bad_matrix_names_file_entry_and_field(tmp_path, old, new, where, field):
    assert old in ROCM_OK
    path = tmp_path / "matrix.toml"
    path.write_text(ROCM_OK.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(MatrixError) as err:
        releases.load_matrix(path)
    message = str(err.value)
    assert str(path) in message and where in message and repr(field) in message, message


def test_the_schema_ships_with_the_package_and_is_a_valid_json_schema():
    import jsonschema

    schema = schemas.schema("matrix")
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"] == {"const": 1, "expected": "1"}


def test_good_fixture_matrix_loads(tmp_path):
    path = tmp_path / "matrix.toml"
    path.write_text(ROCM_OK, encoding="utf-8")
    entries = releases.load_matrix(path)
    assert [e.name for e in entries] == ["rocm-7.14", "cpu-current"]
    assert entries[0].install.requirement_for("gfx90a") == "torch[device-gfx90a]==2.12.0+rocm7.14.0"


def test_duplicate_names_and_broken_toml_are_errors(tmp_path):
    path = tmp_path / "matrix.toml"
    path.write_text(ROCM_OK + ROCM_OK.split("\n", 1)[1].split("[[cpu]]")[0], encoding="utf-8")
    with pytest.raises(MatrixError, match="duplicate"):
        releases.load_matrix(path)
    path.write_text("schema = 1\n[[rocm]\n", encoding="utf-8")
    with pytest.raises(MatrixError, match="not valid TOML"):
        releases.load_matrix(path)


def test_unknown_entry_name_lists_the_known_ones():
    with pytest.raises(MatrixError, match="cpu-current"):
        releases.read_matrix(MATRIX).get("rocm-99.0")


# ---------------------------------------------------------------- parsing recorded responses


def answer(url: str) -> upstream_pages.Response:
    return upstream.Recorded(UPSTREAM)(url)


def test_therock_releases_keep_final_tags_across_pages():
    first = answer(upstream.THEROCK_RELEASES)
    assert first.link_next
    versions = [r.version for r in upstream_pages.parse_releases(first)]
    assert versions == ["10.1.0", "7.14.1", "10.0.0", "7.14.0"]  # no nightly pre-release, no draft
    later = [r.version for r in upstream_pages.parse_releases(answer(first.link_next))]
    assert later == ["7.13.0", "7.12.0", "7.11.0", "7.10.0", "7.9.0"]


def test_pep503_index_lists_rocm_wheels_without_yanked_or_prereleases():
    index = "https://stable.repo.amd.com/rocm/whl-next/"
    wheels = upstream_pages.parse_torch_wheels(answer(index + "torch/"), index)
    linux312 = {(w.torch, w.local) for w in wheels if w.python == "3.12" and w.platform == "linux_x86_64"}
    assert linux312 == {
        ("2.11.0", "rocm10.0.0"),
        ("2.12.0", "rocm10.0.0"),
        ("2.13.0", "rocm10.0.0"),
        ("2.12.0", "rocm10.1.0"),
        ("2.13.0", "rocm10.1.0"),
        ("2.14.0", "rocm10.1.0"),
    }


def test_pytorch_html_index_and_a_missing_index():
    index = "https://download.pytorch.org/whl/rocm7.1/"
    wheels = upstream_pages.parse_torch_wheels(answer(index + "torch/"), index)
    assert {(w.torch, w.local) for w in wheels} == {("2.9.1", "rocm7.1"), ("2.10.0", "rocm7.1"), ("2.11.0", "rocm7.1")}
    # an index PyTorch has not published: S3 behind CloudFront answers 403 AccessDenied, not 404
    assert json.loads((UPSTREAM / "manifest.json").read_text())[index.replace("7.1", "10.1") + "torch/"] == {
        "status": 403
    }
    with pytest.raises(upstream_pages.SourceError, match="HTTP 403"):
        answer("https://download.pytorch.org/whl/rocm10.1/torch/")


def test_docker_tags_follow_the_naming_scheme_and_paginate():
    url = upstream.DOCKER_TAGS.format(name="rocm10.1")
    tags, following = upstream_pages.parse_docker_tags(answer(url))
    assert following and {t.pytorch for t in tags} == {"2.14.0", "2.13.0"}
    more, last = upstream_pages.parse_docker_tags(answer(following))
    assert last is None and {t.tag for t in more} == {
        f"rocm10.1.0_{os}_py{py}_pytorch_release_2.12.0"  # full-version tags, as Docker Hub has them for 10.1
        for os, py in (("ubuntu26.04", "3.14"), ("ubuntu24.04", "3.12"), ("ubuntu22.04", "3.10"))
    }
    assert all(t.digest.startswith("sha256:") for t in tags + more)


def test_pypi_newest_final_release_skips_prereleases_yanked_and_empty():
    assert upstream_pages.parse_pypi(answer(upstream.PYPI_PROJECT.format(name="torch"))) == (
        "2.15.0",
        dt.date(2026, 11, 4),
    )
    assert upstream_pages.parse_pypi(answer(upstream.PYPI_PROJECT.format(name="transformers")))[0] == "5.25.0"


def test_a_version_that_is_not_pep_440_is_reported_not_skipped():
    text = json.dumps({"releases": {"1.0.0": [{"yanked": False}], "2023-01-01-nightly": [{"yanked": False}]}})
    unparsed = []
    good, _ = upstream_pages.parse_pypi_releases(
        upstream_pages.Response("https://pypi.org/pypi/x/json", 200, text), unparsed
    )
    assert list(good) == ["1.0.0"]
    assert unparsed == ["https://pypi.org/pypi/x/json: 1 version(s) that are not PEP 440: 2023-01-01-nightly"]


@pytest.mark.parametrize(
    "parser,text",
    [
        (upstream_pages.parse_pypi, "<html>"),
        (upstream_pages.parse_releases, '{"message": "rate limited"}'),
        (upstream_pages.parse_docker_tags, '{"detail": "not found"}'),
    ],
)
def test_unexpected_answers_are_source_errors(parser, text):
    with pytest.raises(upstream_pages.SourceError):
        parser(upstream_pages.Response(url="https://x", status=200, text=text))


# ---------------------------------------------------------------- comparing: the rules


def before():
    return releases.load_matrix(BEFORE)


def test_recorded_responses_propose_10_1_0_and_7_14_1():
    findings = proposals.compare(before(), recorded(before()), today=TODAY)
    (new,) = findings.new_entries
    assert (new["name"], new["rocm"], new["released"], new["pytorch"]) == (
        "rocm-10.1",
        "10.1.0",
        dt.date(2026, 10, 5),
        "2.14.0",
    )
    assert new["install"]["requirement"] == "torch[device-{gfx}]==2.14.0+rocm10.1.0"
    assert new["unverified"] == ["gfx"] and new["sources"][1]["url"] == "https://stable.repo.amd.com/rocm/whl-next/"
    changes = {(u.entry, u.field): (u.old, u.new) for u in findings.updates}
    assert changes[("rocm-7.14", "rocm")] == ("7.14.0", "7.14.1")
    assert changes[("rocm-7.14", "released")] == ("2026-07-16", "2026-08-31")
    assert changes[("rocm-7.14", "requirement")][1] == "torch[device-{gfx}]==2.12.0+rocm7.14.1"
    assert findings.failures == []


def test_pytorch_bumps_come_from_the_entry_own_channel_never_for_eol():
    findings = proposals.compare(before(), recorded(before()), today=TODAY)
    changes = {(u.entry, u.field): (u.old, u.new) for u in findings.updates}
    # rocm-10.0: 2.13.0+rocm10.0.0 on whl-next (the yanked 2.13.1 and the 2.14.0+rocm10.1.0 builds do not count)
    assert changes[("rocm-10.0", "pytorch")] == ("2.11.0", "2.13.0")
    # rocm-7.1 and rocm-6.4 are eol: 2.11.0+rocm7.1 and 2.9.0+rocm6.4 are on their indexes, nothing proposed
    assert not any(u.entry in ("rocm-7.1", "rocm-6.4") for u in findings.updates)
    # rocm-7.2's channel is rocm/pytorch rocm7.2.4 tags of its Python: 2.10.0 is the newest there
    assert not any(u.entry == "rocm-7.2" for u in findings.updates)
    assert changes[("cpu-current", "pin:torch")] == ("2.13.0+cpu", "2.15.0")


def test_the_current_matrix_is_up_to_date_and_says_what_it_holds():
    entries = releases.load_matrix(RECORDED_MATRIX)
    findings = proposals.compare(entries, recorded(entries), today=TODAY)
    assert not findings.anything and not findings.failures
    assert findings.held == [
        "cpu-current: torch 2.14.1 held; PyPI has 2.15.0 (2026-11-04)",
        "cpu-current: triton 3.8.0 held; PyPI has 3.9.0 (2026-10-27)",  # torch 2.14.1 requires triton~=3.8.0
    ]
    assert "Nothing newer" in pull_request.render_body(findings)


def test_apply_writes_a_valid_matrix_that_then_checks_clean(tmp_path):
    path = tmp_path / "matrix.toml"
    shutil.copy(BEFORE, path)
    findings = proposals.compare(before(), recorded(before()), today=TODAY)
    changes = pull_request.apply(path, findings, today=TODAY)
    assert any("rocm-10.1: new entry" in c for c in changes)
    m = releases.read_matrix(path)
    assert [e.name for e in m.entries][:3] == ["rocm-10.1", "rocm-10.0", "rocm-7.14"]
    assert m.get("rocm-7.14").status == "previous" and m.get("rocm-10.0").status == "current"
    assert m.get("rocm-10.0").pytorch == "2.13.0" and m.get("rocm-7.14").released == dt.date(2026, 8, 31)
    assert any(s.url == "https://stable.repo.amd.com/rocm/whl-next/" for s in m.get("rocm-10.0").sources)
    assert "# TheRock device extras:" in path.read_text(encoding="utf-8")  # comments survive
    entries = list(m.entries)
    again = proposals.compare(entries, recorded(entries), today=TODAY)
    assert not again.anything, again.updates


def test_apply_refuses_an_edit_that_would_not_validate(tmp_path):
    path = tmp_path / "matrix.toml"
    shutil.copy(BEFORE, path)
    bad = proposals.Findings(updates=[proposals.Update("rocm-10.0", "rocm", "10.0.0", "11.0.0", "https://x", "f")])
    with pytest.raises(MatrixError, match="would not be valid"):
        pull_request.apply(path, bad, today=TODAY)
    assert path.read_text() == BEFORE.read_text()


# ---------------------------------------------------------------- the CLI and partial answers


def test_check_fixtures_mode_writes_a_ready_body(tmp_path, capsys):
    body = tmp_path / "body.md"
    args = ("check", "--matrix", str(BEFORE), "--fixtures", str(UPSTREAM), "--today", "2026-12-01")
    assert cli(*args, "--body-out", str(body)) == releases.EXIT_UPDATES
    text = body.read_text(encoding="utf-8")
    assert text.strip() in capsys.readouterr().out
    assert '```toml\n[[rocm]]\nname = "rocm-10.1"' in text and "- [ ]" in text
    recorded = ("check", "--matrix", str(RECORDED_MATRIX), "--fixtures", str(UPSTREAM), "--today", "2026-12-01")
    assert cli(*recorded) == releases.EXIT_UP_TO_DATE
    # a bare --fixtures finds the recorded answers beside the real matrix's repository
    assert cli("check", "--matrix", str(MATRIX), "--fixtures", "--today", "2026-12-01") != ExitCode.BAD_INPUT
    capsys.readouterr()
    assert cli(*args, "--json") == releases.EXIT_UPDATES
    found = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in found["new_entries"]] == ["rocm-10.1"] and found["partial"] is False
    assert found["new_entries"][0]["released"] == "2026-10-05"


def test_a_failed_source_makes_the_check_partial_never_up_to_date(tmp_path, capsys):
    folder = tmp_path / "recorded"
    shutil.copytree(UPSTREAM, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["https://pypi.org/pypi/peft/json"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    code = cli("check", "--matrix", str(RECORDED_MATRIX), "--fixtures", str(folder), "--today", "2026-12-01")
    assert code == releases.EXIT_OFFLINE
    out, err = capsys.readouterr()
    assert "partial check" in out and "- failed source: pypi peft" in out and "Nothing newer" not in out
    assert "pypi peft" in err
    assert releases.EXIT_OFFLINE not in (releases.EXIT_UP_TO_DATE, releases.EXIT_UPDATES, *ExitCode)


def test_offline_says_which_sources_failed(monkeypatch, capsys):
    def no_network(url, accept=None, timeout=0):
        raise upstream.NetworkError(f"{url}: Name or service not known")

    found = upstream.gather(releases.load_matrix(RECORDED_MATRIX), no_network)
    assert found.offline and len(found.failures) == len(found.asked) > 5
    monkeypatch.setattr(upstream, "http_get", no_network)
    assert cli("check", "--matrix", str(RECORDED_MATRIX)) == releases.EXIT_OFFLINE
    assert "Name or service not known" in capsys.readouterr().err


def test_fixtures_folder_without_a_manifest_is_bad_input(tmp_path, capsys):
    assert cli("check", "--matrix", str(RECORDED_MATRIX), "--fixtures", str(tmp_path)) == ExitCode.BAD_INPUT
    assert "manifest.json" in capsys.readouterr().err


def test_bad_matrix_is_bad_input(tmp_path, capsys):
    path = tmp_path / "matrix.toml"
    path.write_text("schema = 1\n[[cpu]]\nname = 'x'\n", encoding="utf-8")
    assert cli("show", "--matrix", str(path)) == ExitCode.BAD_INPUT
    assert str(path) in capsys.readouterr().err


def test_show_lists_entries_and_unverified_facts(capsys):
    assert cli("show", "--matrix", str(RECORDED_MATRIX)) == 0
    lines = capsys.readouterr().out.splitlines()
    m = releases.read_matrix(RECORDED_MATRIX)
    assert [line.split()[0] for line in lines] == [e.name for e in m.entries + m.canaries]
    assert "[unverified: pytorch, install]" in lines[0]


def test_the_python_api_takes_keywords_and_finds_the_matrix_of_the_course(tmp_path, capsys):
    (tmp_path / "env").mkdir()
    shutil.copy(RECORDED_MATRIX, tmp_path / "env" / "matrix.toml")
    assert releases.main(releases_command="show", course=Course(tmp_path), as_json=True) == releases.EXIT_UP_TO_DATE
    assert json.loads(capsys.readouterr().out) == releases.job_matrix(releases.load_matrix(RECORDED_MATRIX))
    with pytest.raises(MatrixError, match="env/matrix.toml: file not found"):
        releases.main(releases_command="show", course=Course(tmp_path / "env"))


# ---------------------------------------------------------------- verify-pins


def test_verify_pins_reports_each_pin_state(capsys):
    code = cli("verify-pins", "--matrix", str(RECORDED_MATRIX), "--fixtures", str(UPSTREAM), "--today", "2026-12-01")
    assert code == releases.EXIT_UP_TO_DATE
    out = capsys.readouterr().out
    assert "amd-torch-device-gfx942==2.14.0+rocm10.1.0" in out and "transformers==5.25.0" in out
    report = pins.verify(releases.load_matrix(RECORDED_MATRIX), upstream.Recorded(UPSTREAM), today=TODAY)
    assert {p.state for p in report.pins} == {"ok"} and len(report.pins) == 11  # cpu-current: 6 pins; rocm-7.2 image
    assert "rocm-10.1: pytorch" in report.unverified and "rocm-10.1: released" not in report.unverified


def with_pins(tmp_path, old: str, new: str) -> Path:
    path = tmp_path / "matrix.toml"
    text = RECORDED_MATRIX.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_verify_pins_finds_a_vanished_wheel_and_a_stale_source(tmp_path, capsys):
    path = with_pins(tmp_path, '"peft==0.21.2"', '"peft==0.99.0"')
    assert cli("verify-pins", "--matrix", str(path), "--fixtures", str(UPSTREAM), "--today", "2026-12-01") == 12
    assert "peft==0.99.0" in capsys.readouterr().out
    report = pins.verify(
        releases.load_matrix(RECORDED_MATRIX), upstream.Recorded(UPSTREAM), today=TODAY + dt.timedelta(days=95)
    )
    assert report.stale_sources and all("days > 90" in s for s in report.stale_sources)


def test_verify_pins_records_image_digests_and_sees_a_moved_tag(tmp_path):
    digest = "sha256:" + "0" * 64
    path = with_pins(
        tmp_path,
        'status = "previous"\ngfx = ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1151"',
        'status = "current"\ngfx = ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1151"',
    )
    entries = releases.load_matrix(path)
    (state,) = [p for p in pins.verify(entries, upstream.Recorded(UPSTREAM), today=TODAY).pins if p.entry == "rocm-7.2"]
    assert state.state == "ok" and state.digest.startswith("sha256:") and len(state.digest) == 71
    moved = path.read_text().replace('pytorch_release_2.10.0" }', f'pytorch_release_2.10.0", digest = "{digest}" }}')
    path.write_text(moved)
    (state,) = [
        p
        for p in pins.verify(releases.load_matrix(path), upstream.Recorded(UPSTREAM), today=TODAY).pins
        if p.entry == "rocm-7.2"
    ]
    assert state.state == "moved" and digest in state.detail


def test_verify_pins_offline_has_its_own_exit_status(tmp_path, capsys):
    (tmp_path / "manifest.json").write_text("{}")
    assert (
        cli("verify-pins", "--matrix", str(RECORDED_MATRIX), "--fixtures", str(tmp_path), "--today", "2026-12-01") == 11
    )
    assert "could not be checked" in capsys.readouterr().out


# ---------------------------------------------------------------- issue 35: what upstream really looks like


def release(tag, name, **more):
    item = {"tag_name": tag, "name": name, "draft": False, "prerelease": False, "published_at": "2026-10-05T16:00:00Z"}
    return item | {"html_url": f"https://github.com/ROCm/TheRock/releases/tag/{tag}"} | more


@pytest.mark.parametrize(
    "item,version",
    [
        (release("therock-10.0", "ROCm 10.0.0"), "10.0.0"),  # a series tag, the patch version in the name
        (release("therock-7.14", "therock-7.14"), "7.14.0"),
        (release("therock-7.9.0", "therock-7.9.0"), "7.9.0"),
        (release("therock-7.14.1", "ROCm 7.14.1"), "7.14.1"),
        (release("latest-stable", "ROCm 10.1.0"), "10.1.0"),  # the name alone
        (release("therock-10.1", "ROCm 10.1.0 (PyTorch 2.14)"), "10.1.0"),
        (release("2026-10-release", "TheRock release v10.1.0, PyTorch 2.14.0"), "10.1.0"),
        (release("therock-10.2.0a20261130", "nightly"), None),  # a nightly: known, not a release
        (release("therock-10.2", "ROCm 10.2.0", draft=True), None),
        (release("therock-10.2", "ROCm 10.2.0", prerelease=True), None),
    ],
)
def test_release_tags_and_names_are_both_read(item, version):
    found, problem = upstream_pages.read_release(item)
    assert problem is None and (found.version if found else None) == version
    if found:
        assert (found.tag, found.name) == (item["tag_name"], item["name"])


@pytest.mark.parametrize(
    "item,why",
    [
        (release("dev-tarballs", "dev-tarballs"), "neither the tag nor the name"),
        (release("therock-10.0", "ROCm 10.1.0"), "disagree"),
        (release("therock-10.0.0", "ROCm 10.0.1"), "disagree"),
        (release("bundle", "7.14.1 and 10.0.0"), "several versions"),
    ],
)
def test_a_release_that_cannot_be_read_is_reported(item, why):
    found, problem = upstream_pages.read_release(item)
    assert found is None and why in problem and item["tag_name"] in problem
    unparsed = []
    text = json.dumps([item, release("therock-10.1", "ROCm 10.1.0")])
    read = upstream_pages.parse_releases(upstream_pages.Response(url="u", status=200, text=text), unparsed)
    assert [r.version for r in read] == ["10.1.0"] and unparsed == [problem]


def html_page(*anchors: str) -> upstream_pages.Response:
    body = "\n".join(anchors)
    text = f"<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Links for torch</h1>\n{body}\n  </body>\n</html>\n"
    return upstream_pages.Response(url="https://x/torch/", status=200, text=text, content_type="text/html")


def test_pep503_html_yanked_files_and_names_that_cannot_be_read():
    page = html_page(
        '<a href="torch-2.13.0%2Brocm10.0.0-cp312-cp312-manylinux_2_28_x86_64.whl">t</a><br/>',
        '<a href="torch-2.14.1%2Brocm10.1.0-cp312-cp312-manylinux_2_28_x86_64.whl" data-yanked="">t</a><br/>',
        '<a href="torch-latest.whl">t</a><br/>',
        '<a href="torch-2.13.0.tar.gz">t</a><br/>',
    )
    unparsed = []
    wheels = upstream_pages.parse_torch_wheels(page, "https://x/", unparsed)
    assert [(w.torch, w.local) for w in wheels] == [("2.13.0", "rocm10.0.0")]
    assert unparsed == ["https://x/torch/: 1 file name(s) not understood: torch-latest.whl"]
    assert upstream_pages.versions_on_index(page, "torch") == {"2.13.0+rocm10.0.0", "2.13.0"}
    assert "2.14.1+rocm10.1.0" in upstream_pages.versions_on_index(page, "torch", with_yanked=True)


@pytest.mark.parametrize(
    "content_type,text",
    [
        ("application/octet-stream", "torch-2.13.0.whl"),
        ("text/plain", "<a href='x'>x</a>"),
        ("text/html", "Service temporarily unavailable"),
    ],
)
def test_an_index_answer_in_an_unknown_format_is_a_failure_not_an_empty_index(content_type, text):
    with pytest.raises(upstream_pages.SourceError):
        upstream_pages.index_filenames(
            upstream_pages.Response(url="https://x/torch/", status=200, text=text, content_type=content_type)
        )


def test_docker_name_filter_is_a_substring_match_and_tags_outside_the_scheme_are_reported():
    results = [
        {"name": "rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.10.0", "digest": "sha256:a"},
        {"name": "rocm7.14_ubuntu24.04_py3.12_pytorch_release_2.12.0", "digest": "sha256:b"},  # found by "rocm7.1"
        {"name": "rocm7.1.1_ubuntu24.04_py3.12_pytorch_staging", "digest": "sha256:c"},
    ]
    answer = upstream_pages.Response(
        url="https://hub/tags", status=200, text=json.dumps({"results": results, "next": None})
    )
    found = upstream.Upstream()
    upstream._images(upstream._Asker(lambda url, accept=None, timeout=0: answer, 1, found), (7, 1))
    assert [i.tag for i in found.images] == ["rocm7.1.1_ubuntu24.04_py3.12_pytorch_release_2.10.0"]
    assert "rocm7.1.1_ubuntu24.04_py3.12_pytorch_staging" in found.unparsed[0]
    tags, _ = upstream_pages.parse_docker_tags(answer)
    assert tags[1].rocm == "7.14"  # a series-only tag


def pypi_upstream(versions: dict, yanked: dict | None = None) -> upstream.Upstream:
    found = upstream.Upstream()
    for package, releases_ in versions.items():
        found.pypi_versions[package] = {v: TODAY for v in releases_}
        newest = max(releases_, key=Version)
        found.pypi[package] = (newest, TODAY)
    found.pypi_yanked = yanked or {}
    return found


def test_a_major_that_crosses_the_pyproject_cap_is_held_and_the_newest_below_it_proposed():
    caps = proposals.pyproject_caps(ROOT / "pyproject.toml")
    assert str(caps["transformers"][0]) == "<6,>=4.56" and "extra labs" in caps["transformers"][1]
    entries = releases.load_matrix(RECORDED_MATRIX)
    found = pypi_upstream({"transformers": ["5.25.0", "5.26.0", "6.0.0", "6.0.1"]})
    findings = proposals.compare(entries, found, today=TODAY, caps=caps)
    (update,) = findings.updates
    assert (update.entry, update.field, update.old, update.new) == (
        "cpu-current",
        "pin:transformers",
        "5.25.0",
        "5.26.0",
    )
    (held,) = findings.capped
    assert "transformers 6.0.1" in held and "crosses the cap `<6,>=4.56`" in held
    assert "rotate cpu-previous to cpu-current's generation (transformers 5.x), raise the cap" in held
    assert f"- held at a cap: {held}" in pull_request.render_body(findings)
    alone = proposals.compare(entries, pypi_upstream({"transformers": ["5.25.0", "6.0.0"]}), today=TODAY, caps=caps)
    assert not alone.updates and alone.capped and not alone.anything  # nothing installable is newer
    assert releases.exit_code(alone) == releases.EXIT_NEEDS_PERSON  # held at a cap: a person is told


def test_a_fact_that_names_a_replaced_pin_is_listed_for_the_maintainer():
    entries = releases.load_matrix(RECORDED_MATRIX)
    found = pypi_upstream({"transformers": ["5.25.0", "5.26.0"], "peft": ["0.21.2"]})
    findings = proposals.compare(entries, found, today=TODAY)
    (restated,) = findings.restated  # the PyPI fact "transformers 5.25.0 on PyPI (2026-12-01)"
    assert restated.startswith("cpu-current: pin:transformers 5.25.0 -> 5.26.0, but the fact of ")
    assert "https://pypi.org/project/transformers/5.25.0/ (seen 2026-12-03) still names 5.25.0" in restated
    body = pull_request.render_body(findings)
    assert f"### Facts that name a replaced value\n\n- {restated}" in body
    unchanged = proposals.compare(entries, pypi_upstream({"peft": ["0.21.2"]}), today=TODAY)
    assert unchanged.restated == [] and "replaced value" not in pull_request.render_body(unchanged)


def test_a_yanked_pin_is_reported_by_check(tmp_path, capsys):
    entries = releases.load_matrix(RECORDED_MATRIX)
    found = pypi_upstream({"peft": ["0.21.2", "0.17.1"]}, {"peft": {"0.21.2": "corrupt wheel"}})
    findings = proposals.compare(entries, found, today=TODAY)
    assert findings.anything and not findings.updates
    (pin,) = findings.yanked
    assert (pin.entry, pin.package, pin.version, pin.reason) == ("cpu-current", "peft", "0.21.2", "corrupt wheel")
    assert "peft==0.21.2 is yanked (corrupt wheel" in pull_request.render_body(findings)
    assert findings.as_json()["yanked"][0]["url"] == "https://pypi.org/project/peft/0.21.2/"
    # through the CLI, from recorded PyPI answers: exit 10, the pin in the JSON that ci/route_failures.py --pins reads
    folder = tmp_path / "recorded"
    shutil.copytree(UPSTREAM, folder)
    data = json.loads((folder / "pypi-peft.json").read_text())
    for file in data["releases"]["0.21.2"]:
        file |= {"yanked": True, "yanked_reason": "corrupt wheel"}
    (folder / "pypi-peft.json").write_text(json.dumps(data))
    code = cli("check", "--matrix", str(RECORDED_MATRIX), "--fixtures", str(folder), "--today", "2026-12-01", "--json")
    out = json.loads(capsys.readouterr().out)
    assert code == releases.EXIT_UPDATES and [y["package"] for y in out["yanked"]] == ["peft"]


def test_apply_on_the_real_matrix_file_keeps_it_valid(tmp_path):
    """The bug of issue 35: a new entry went in at the '[[rocm]]' of the header comment."""
    path = tmp_path / "env" / "matrix.toml"
    path.parent.mkdir()
    shutil.copy(RECORDED_MATRIX, path)  # the real file's shape, frozen at the day of the recordings
    text = path.read_text(encoding="utf-8")
    assert "# [[rocm]]" in text[: text.index("schema = 1")]
    entries = releases.load_matrix(path)
    found = upstream.Upstream(
        releases=[
            upstream_pages.RocmRelease(
                "10.2.0",
                dt.date(2026, 11, 18),
                "https://github.com/ROCm/TheRock/releases/tag/therock-10.2",
                "therock-10.2",
                "ROCm 10.2.0",
            )
        ],
        wheels=[
            upstream_pages.WheelBuild(
                "2.15.0",
                "rocm10.2.0",
                "3.12",
                "https://stable.repo.amd.com/rocm/whl-next/",
                filename="torch-2.15.0+rocm10.2.0-cp312-cp312-linux_x86_64.whl",
            )
        ],
        device_files={
            ("https://stable.repo.amd.com/rocm/whl-next", "gfx942"): [
                "amd_torch_device_gfx942-2.15.0+rocm10.2.0-py3-none-linux_x86_64.whl"
            ]
        },
    )
    findings = proposals.compare(entries, found, today=TODAY)
    assert [e["name"] for e in findings.new_entries] == ["rocm-10.2"]
    changes = pull_request.apply(path, findings, today=TODAY)
    assert changes == ["rocm-10.0: status current -> previous", "rocm-10.2: new entry (ROCm 10.2.0, PyTorch 2.15.0)"]
    after = path.read_text(encoding="utf-8")
    assert after[: after.index("schema = 1")] == text[: text.index("schema = 1")]
    m = releases.read_matrix(path)
    assert [(e.name, e.status) for e in m.entries[:3]] == [
        ("rocm-10.2", "current"),
        ("rocm-10.1", "current"),
        ("rocm-10.0", "previous"),
    ]
    new_block = after[after.index('name = "rocm-10.2"') - len("[[rocm]]\n") : after.index('name = "rocm-10.1"')]
    assert new_block.startswith("[[rocm]]\n") and new_block.endswith("\n\n[[rocm]]\n")
    assert after.count("\n") - text.count("\n") == new_block.count("\n") - 1


def test_apply_moves_verified_facts_out_of_unverified(tmp_path):
    path = tmp_path / "matrix.toml"
    shutil.copy(BEFORE, path)
    update = proposals.Update(
        "rocm-10.0",
        "released",
        "2026-08-26",
        "2026-08-27",
        "https://github.com/ROCm/TheRock/releases/tag/therock-10.0",
        "published",
    )
    pull_request.apply(path, proposals.Findings(updates=[update]), today=TODAY)
    entry = releases.read_matrix(path).get("rocm-10.0")
    assert entry.unverified == ("pytorch",) and entry.sources[0].facts == ("released",)
    assert entry.released == dt.date(2026, 8, 27)


def test_verify_pins_says_when_an_index_pin_is_yanked(tmp_path):
    """PEP 592's data-yanked, as a PEP 503 index may write it (AMD's generator never does: it deletes)."""
    folder = tmp_path / "recorded"
    shutil.copytree(UPSTREAM, folder)
    page = folder / "whl-next-torch.html"
    wheel = "torch-2.13.1%2Brocm10.0.0-cp312-cp312-linux_x86_64.whl"
    page.write_text(
        page.read_text().replace(
            "  </body>", f'    <a href="{wheel}" data-yanked="withdrawn">{wheel}</a><br/>\n  </body>'
        )
    )
    path = with_pins(tmp_path, "2.13.0+rocm10.0.0", "2.13.1+rocm10.0.0")
    path.write_text(
        path.read_text().replace(
            'pytorch = "2.13.0"\npython = "3.12"\nstatus = "current"',
            'pytorch = "2.13.1"\npython = "3.12"\nstatus = "current"',
            1,
        )
    )
    report = pins.verify(releases.load_matrix(path), upstream.Recorded(folder), today=TODAY)
    (state,) = [p for p in report.pins if p.entry == "rocm-10.0" and p.pin.startswith("torch")]
    assert state.state == "missing" and "yanked on https://stable.repo.amd.com/rocm/whl-next/" in state.detail
    deleted = pins.verify(releases.load_matrix(path), upstream.Recorded(UPSTREAM), today=TODAY)
    (state,) = [p for p in deleted.pins if p.entry == "rocm-10.0" and p.pin.startswith("torch")]
    assert state.state == "missing" and "not on https://stable.repo.amd.com/rocm/whl-next/" in state.detail


def test_a_403_from_a_static_index_host_means_no_such_index():
    def fetch(url, accept=None, timeout=0):
        raise upstream_pages.SourceError(f"{url}: HTTP 403")

    found = upstream.Upstream()
    upstream._wheels(upstream._Asker(fetch, 1, found), "https://download.pytorch.org/whl/rocm10.2/")
    assert found.wheels == []
    with pytest.raises(upstream_pages.SourceError):
        upstream._wheels(upstream._Asker(fetch, 1, found), "https://mirror.example.org/whl/")
