"""The release matrix (schema, facts), upstream answers (recorded), proposals, verify-pins."""

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from rocmlab import matrix, pins, proposals, releases, schemas, upstream
from rocmlab.cli import main
from rocmlab.errors import ExitCode
from rocmlab.releases import MatrixError

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "env" / "matrix.toml"
UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"
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


def test_matrix_has_todays_rocm_releases():
    m = releases.read_matrix(MATRIX)
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
        assert all(s.url.startswith("https://") and s.seen <= TODAY and s.facts for s in entry.sources)
        covered = {f for s in entry.sources for f in s.facts}
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
    assert newest == next(e for e in entries if e.status == "current") and newest.name == "rocm-10.1"
    assert releases.newest_environment("cpu", MATRIX).name == "cpu-current"


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


def answer(url: str) -> upstream.Response:
    return upstream.Recorded(UPSTREAM)(url)


def test_therock_releases_keep_final_tags_across_pages():
    first = answer(upstream.THEROCK_RELEASES)
    assert first.link_next
    versions = [r.version for r in upstream.parse_releases(first)]
    assert versions == ["10.1.0", "7.14.1", "10.0.0", "7.14.0"]  # no nightly pre-release, no draft
    later = [r.version for r in upstream.parse_releases(answer(first.link_next))]
    assert later == ["7.13.0", "7.12.0", "7.11.0", "7.10.0", "7.9.0"]


def test_pep691_index_lists_rocm_wheels_without_yanked_or_prereleases():
    index = "https://stable.repo.amd.com/rocm/whl-next/"
    wheels = upstream.parse_torch_wheels(answer(index + "torch/"), index)
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
    wheels = upstream.parse_torch_wheels(answer(index + "torch/"), index)
    assert {(w.torch, w.local) for w in wheels} == {("2.9.1", "rocm7.1"), ("2.10.0", "rocm7.1"), ("2.11.0", "rocm7.1")}
    assert upstream.parse_torch_wheels(answer("https://download.pytorch.org/whl/rocm10.1/torch/"), "x") == []


def test_docker_tags_follow_the_naming_scheme_and_paginate():
    url = upstream.DOCKER_TAGS.format(name="rocm10.1")
    tags, following = upstream.parse_docker_tags(answer(url))
    assert following and {t.pytorch for t in tags} == {"2.14.0", "2.13.0"}
    more, last = upstream.parse_docker_tags(answer(following))
    assert last is None and {t.tag for t in more} == {
        f"rocm10.1.0_{os}_py{py}_pytorch_release_2.12.0"
        for os, py in (("ubuntu26.04", "3.14"), ("ubuntu24.04", "3.12"), ("ubuntu22.04", "3.10"))
    }
    assert all(t.digest.startswith("sha256:") for t in tags + more)


def test_pypi_newest_final_release_skips_prereleases_yanked_and_empty():
    assert upstream.parse_pypi(answer(upstream.PYPI_PROJECT.format(name="torch"))) == ("2.15.0", dt.date(2026, 11, 4))
    assert upstream.parse_pypi(answer(upstream.PYPI_PROJECT.format(name="transformers")))[0] == "5.24.0"


@pytest.mark.parametrize(
    "parser,text",
    [
        (upstream.parse_pypi, "<html>"),
        (upstream.parse_releases, '{"message": "rate limited"}'),
        (upstream.parse_docker_tags, '{"detail": "not found"}'),
    ],
)
def test_unexpected_answers_are_source_errors(parser, text):
    with pytest.raises(upstream.SourceError):
        parser(upstream.Response(url="https://x", status=200, text=text))


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
    entries = releases.load_matrix(MATRIX)
    findings = proposals.compare(entries, recorded(entries), today=TODAY)
    assert not findings.anything and not findings.failures
    assert findings.held == [
        "cpu-current: torch 2.14.1 held; PyPI has 2.15.0 (2026-11-04)",
        "cpu-current: triton 3.8.0 held; PyPI has 3.9.0 (2026-10-27)",  # torch 2.14.1 requires triton~=3.8.0
    ]
    assert "Nothing newer" in proposals.render_body(findings)


def test_apply_writes_a_valid_matrix_that_then_checks_clean(tmp_path):
    path = tmp_path / "matrix.toml"
    shutil.copy(BEFORE, path)
    findings = proposals.compare(before(), recorded(before()), today=TODAY)
    changes = proposals.apply(path, findings, today=TODAY)
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
        proposals.apply(path, bad, today=TODAY)
    assert path.read_text() == BEFORE.read_text()


# ---------------------------------------------------------------- the CLI and partial answers


def test_check_fixtures_mode_writes_a_ready_body(tmp_path, capsys):
    body = tmp_path / "body.md"
    args = ("check", "--matrix", str(BEFORE), "--fixtures", str(UPSTREAM), "--today", "2026-12-01")
    assert cli(*args, "--body-out", str(body)) == releases.EXIT_UPDATES
    text = body.read_text(encoding="utf-8")
    assert text.strip() in capsys.readouterr().out
    assert '```toml\n[[rocm]]\nname = "rocm-10.1"' in text and "- [ ]" in text
    assert cli("check", "--matrix", str(MATRIX), "--fixtures", "--today", "2026-12-01") == releases.EXIT_UP_TO_DATE
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
    code = cli("check", "--matrix", str(MATRIX), "--fixtures", str(folder), "--today", "2026-12-01")
    assert code == releases.EXIT_OFFLINE
    out, err = capsys.readouterr()
    assert "Partial check" in out and "Nothing newer" not in out and "pypi peft" in err
    assert releases.EXIT_OFFLINE not in (releases.EXIT_UP_TO_DATE, releases.EXIT_UPDATES, *ExitCode)


def test_offline_says_which_sources_failed(monkeypatch, capsys):
    def no_network(url, accept=None, timeout=0):
        raise upstream.NetworkError(f"{url}: Name or service not known")

    found = upstream.gather(releases.load_matrix(MATRIX), no_network)
    assert found.offline and len(found.failures) == len(found.asked) > 5
    monkeypatch.setattr(upstream, "http_get", no_network)
    assert cli("check", "--matrix", str(MATRIX)) == releases.EXIT_OFFLINE
    assert "Name or service not known" in capsys.readouterr().err


def test_fixtures_folder_without_a_manifest_is_bad_input(tmp_path, capsys):
    assert cli("check", "--matrix", str(MATRIX), "--fixtures", str(tmp_path)) == ExitCode.BAD_INPUT
    assert "manifest.json" in capsys.readouterr().err


def test_bad_matrix_is_bad_input(tmp_path, capsys):
    path = tmp_path / "matrix.toml"
    path.write_text("schema = 1\n[[cpu]]\nname = 'x'\n", encoding="utf-8")
    assert cli("show", "--matrix", str(path)) == ExitCode.BAD_INPUT
    assert str(path) in capsys.readouterr().err


def test_show_lists_entries_and_unverified_facts(capsys):
    assert cli("show", "--matrix", str(MATRIX)) == 0
    lines = capsys.readouterr().out.splitlines()
    m = releases.read_matrix(MATRIX)
    assert [line.split()[0] for line in lines] == [e.name for e in m.entries + m.canaries]
    assert "[unverified: released, pytorch, install]" in lines[0]


def test_the_python_api_takes_keywords_and_finds_the_matrix_under_root(tmp_path, capsys):
    (tmp_path / "env").mkdir()
    shutil.copy(MATRIX, tmp_path / "env" / "matrix.toml")
    assert releases.main(releases_command="show", root=tmp_path, as_json=True) == releases.EXIT_UP_TO_DATE
    assert json.loads(capsys.readouterr().out) == releases.job_matrix(releases.load_matrix(MATRIX))
    with pytest.raises(MatrixError, match="env/matrix.toml: file not found"):
        releases.main(releases_command="show", root=tmp_path / "env")


# ---------------------------------------------------------------- verify-pins


def test_verify_pins_reports_each_pin_state(capsys):
    code = cli("verify-pins", "--matrix", str(MATRIX), "--fixtures", str(UPSTREAM), "--today", "2026-12-01")
    assert code == releases.EXIT_UP_TO_DATE
    out = capsys.readouterr().out
    assert "amd-torch-device-gfx942==2.14.0+rocm10.1.0" in out and "transformers==5.24.0" in out
    report = pins.verify(releases.load_matrix(MATRIX), upstream.Recorded(UPSTREAM), today=TODAY)
    assert {p.state for p in report.pins} == {"ok"} and len(report.pins) == 11  # cpu-current: 6 pins; rocm-7.2 image
    assert "rocm-10.1: released" in report.unverified


def with_pins(tmp_path, old: str, new: str) -> Path:
    path = tmp_path / "matrix.toml"
    text = MATRIX.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_verify_pins_finds_a_vanished_wheel_and_a_stale_source(tmp_path, capsys):
    path = with_pins(tmp_path, '"peft==0.21.2"', '"peft==0.99.0"')
    assert cli("verify-pins", "--matrix", str(path), "--fixtures", str(UPSTREAM), "--today", "2026-12-01") == 12
    assert "peft==0.99.0" in capsys.readouterr().out
    report = pins.verify(releases.load_matrix(MATRIX), upstream.Recorded(UPSTREAM), today=TODAY + dt.timedelta(days=95))
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
    assert cli("verify-pins", "--matrix", str(MATRIX), "--fixtures", str(tmp_path), "--today", "2026-12-01") == 11
    assert "could not be checked" in capsys.readouterr().out
