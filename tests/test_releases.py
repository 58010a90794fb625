import argparse
import datetime as dt
import re
from pathlib import Path

import pytest
from packaging.version import Version

from rocmlab import releases
from rocmlab.releases import MatrixError

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "env" / "matrix.toml"
UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"
TODAY = dt.date(2026, 11, 29)


def cli(*argv) -> int:
    parser = argparse.ArgumentParser()
    releases.add_arguments(parser)
    return releases.run(parser.parse_args(list(argv)))


# ---------------------------------------------------------------- the real matrix


def test_matrix_is_newest_first_rocm_then_cpu():
    entries = releases.load_matrix(MATRIX)
    kinds = [e.kind for e in entries]
    assert kinds == sorted(kinds, key=lambda k: k != "rocm"), kinds
    rocm = [Version(e.rocm) for e in entries if e.kind == "rocm"]
    assert rocm == sorted(rocm, reverse=True)
    assert [e.name for e in entries if e.kind == "cpu"] == ["cpu-current", "cpu-previous"]


def test_matrix_spans_the_eras_and_records_sources():
    entries = releases.load_matrix(MATRIX)
    eras = {e.era for e in entries if e.kind == "rocm"}
    assert eras == {"6.x", "7.x", "therock"}
    for entry in entries:
        assert entry.sources, entry.name
        assert all(s.url.startswith("https://") and s.seen <= dt.date.today() for s in entry.sources)
    therock = [e for e in entries if e.era == "therock"]
    assert all(e.install.method == "multiarch" and Version(e.rocm) >= Version("7.14") for e in therock)


def test_cpu_entries_pin_two_library_generations():
    matrix = releases.read_matrix(MATRIX)
    current, previous = matrix.get("cpu-current"), matrix.get("cpu-previous")
    assert Version(current.pin("transformers")).major == Version(previous.pin("transformers")).major + 1
    assert Version(current.pin("peft")) > Version(previous.pin("peft"))
    assert current.torch_version.endswith("+cpu") and previous.torch_version.endswith("+cpu")


def test_newest_environment_is_the_first_current_entry():
    entries = releases.load_matrix(MATRIX)
    newest = releases.newest_environment(path=MATRIX)
    assert newest == next(e for e in entries if e.status == "current")
    assert newest.kind == "rocm"
    assert releases.newest_environment("cpu", MATRIX).name == "cpu-current"


def test_job_matrix_lists_current_rocm_entries_with_gfx_runner_labels():
    entries = releases.load_matrix(MATRIX)
    jobs = releases.job_matrix(entries)["include"]
    assert [j["name"] for j in jobs] == [e.name for e in entries if e.kind == "rocm" and e.status == "current"]
    for job in jobs:
        assert job["runs_on"][-1] == job["gfx"] and "self-hosted" in job["runs_on"]
        assert (ROOT / job["dockerfile"]).is_file()
    cpu = releases.job_matrix(entries, kind="cpu", statuses=("current", "previous"))["include"]
    assert {j["name"] for j in cpu} == {"cpu-current", "cpu-previous"}


# ---------------------------------------------------------------- validation

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
sources = [{ url = "https://example.org/notes", seen = 2026-11-29, fact = "released" }]

[[cpu]]
name = "cpu-current"
python = "3.11"
status = "current"
pins = ["torch==2.13.0+cpu", "transformers==5.24.0"]
sources = [{ url = "https://example.org/pypi", seen = 2026-11-29, fact = "pins" }]
"""

BAD = [
    ('status = "current"\ngfx', 'status = "fresh"\ngfx', "'rocm-7.14'", "status"),
    ('runner_gfx = "gfx942"', 'runner_gfx = "gfx1100"', "'rocm-7.14'", "runner_gfx"),
    ('gfx = ["gfx942", "gfx90a"]', 'gfx = ["942"]', "'rocm-7.14'", "gfx"),
    ('name = "rocm-7.14"', 'name = "rocm-7.2"', "'rocm-7.2'", "name"),
    ('rocm = "7.14.0"', 'rocm = "seven"', "'rocm-7.14'", "rocm"),
    ("released = 2026-07-16", 'released = "July"', "'rocm-7.14'", "released"),
    ("torch[device-{gfx}]==2.12.0", "torch==2.12.0", "install", "requirement"),
    ("torch[device-{gfx}]==2.12.0+rocm7.14.0", "torch[device-{gfx}]==2.11.0+rocm7.14.0", "install", "requirement"),
    ('method = "multiarch"', 'method = "conda"', "install", "method"),
    ('"transformers==5.24.0"', '"transformers>=5"', "'cpu-current'", "pins"),
    ('"torch==2.13.0+cpu", ', "", "'cpu-current'", "pins"),
    ('python = "3.11"', 'python = "py311"', "'cpu-current'", "python"),
    (
        'sources = [{ url = "https://example.org/pypi"',
        'sources = [{ url = "ftp://example.org/pypi"',
        "'cpu-current'",
        "url",
    ),
    ('status = "current"\npins', 'status = "current"\ncolour = "red"\npins', "'cpu-current'", "colour"),
    ("schema = 1", "schema = 2", "top level", "schema"),
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


def read(name: str) -> str:
    return (UPSTREAM / name).read_text(encoding="utf-8")


def test_pypi_newest_final_release_skips_prereleases_yanked_and_empty():
    assert releases.parse_pypi(read("pypi-torch.json")) == ("2.15.0", dt.date(2026, 11, 4))
    assert releases.parse_pypi(read("pypi-transformers.json")) == ("5.25.0", dt.date(2026, 11, 26))


def test_github_releases_keep_final_rocm_tags_only():
    found = releases.parse_github_releases(read("github-rocm.json"))
    assert [r.version for r in found] == ["7.14.1", "7.14.0", "7.2.4", "6.4.4", "6.3.4"]
    systems = releases.parse_github_releases(read("github-rocm-systems.json"))
    assert [(r.version, r.date) for r in systems] == [
        ("10.1.0", dt.date(2026, 11, 12)),
        ("10.0.0", dt.date(2026, 8, 26)),
    ]


def test_wheel_index_lists_rocm_torch_builds_only():
    builds = releases.parse_wheel_index(read("pytorch-wheels.html"))
    assert {(b.torch, b.rocm, b.python) for b in builds} == {
        ("2.8.0", "6.4", "3.12"),
        ("2.8.0", "6.4", "3.11"),
        ("2.10.0", "7.1", "3.12"),
        ("2.11.0", "7.1", "3.12"),
    }


def test_docker_tags_follow_the_release_naming_scheme():
    tags = releases.parse_docker_tags(read("dockerhub-rocm-pytorch.json"))
    assert [t.tag for t in tags] == [
        "rocm10.1_ubuntu24.04_py3.12_pytorch_release_2.13.0",
        "rocm10.1_ubuntu24.04_py3.12_pytorch_release_2.12.0",
        "rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0",
        "rocm7.2.4_ubuntu22.04_py3.10_pytorch_release_2.10.0",
    ]
    assert (tags[0].rocm, tags[0].python, tags[0].pytorch) == ("10.1", "3.12", "2.13.0")


@pytest.mark.parametrize(
    "parser,text",
    [
        (releases.parse_pypi, "<html>"),
        (releases.parse_github_releases, '{"message": "rate limited"}'),
        (releases.parse_docker_tags, '{"detail": "not found"}'),
    ],
)
def test_unexpected_answers_are_source_errors(parser, text):
    with pytest.raises(releases.SourceError):
        parser(text)


# ---------------------------------------------------------------- comparing and the CLI


def recorded():
    return releases.gather(releases.fixture_fetcher(UPSTREAM))


def test_findings_from_recorded_responses():
    findings = releases.compare(releases.load_matrix(MATRIX), recorded(), today=TODAY)
    (proposal,) = findings.new_entries
    assert (proposal["name"], proposal["rocm"], proposal["pytorch"]) == ("rocm-10.1", "10.1.0", "2.13.0")
    assert proposal["install"] == {
        "method": "image",
        "image": "rocm/pytorch:rocm10.1_ubuntu24.04_py3.12_pytorch_release_2.13.0",
    }
    text = "\n".join(findings.updates)
    assert "rocm-7.14: ROCm 7.14.0 -> 7.14.1" in text
    assert "rocm-7.1: PyTorch 2.10.0 -> 2.11.0" in text
    assert "cpu-current: transformers 5.24.0 -> 5.25.0" in text
    assert "peft" not in text and "rocm-6.4" not in text and "rocm-7.2:" not in text
    assert findings.failures == []


def test_proposed_entries_are_valid_matrix_entries(tmp_path):
    findings = releases.compare(releases.load_matrix(MATRIX), recorded(), today=TODAY)
    path = tmp_path / "matrix.toml"
    path.write_text(
        MATRIX.read_text(encoding="utf-8") + "\n" + releases.render_entries_toml(findings.new_entries), encoding="utf-8"
    )
    names = [e.name for e in releases.load_matrix(path)]
    assert names[0] == "rocm-10.1"


def test_nothing_new_when_upstream_matches_the_matrix():
    findings = releases.compare(releases.load_matrix(MATRIX), releases.Upstream(), today=TODAY)
    assert not findings.anything
    assert "Nothing newer" in releases.render_body(findings)


def test_check_command_writes_a_ready_body(tmp_path, capsys):
    body = tmp_path / "body.md"
    code = cli("check", "--matrix", str(MATRIX), "--fixtures", str(UPSTREAM), "--body-out", str(body))
    assert code == releases.EXIT_UPDATES
    text = body.read_text(encoding="utf-8")
    assert text.strip() in capsys.readouterr().out
    assert re.search(r"```toml\n\[\[rocm\]\]\nname = \"rocm-10.1\"", text)
    assert "- [ ]" in text


def test_offline_check_says_so_with_a_distinct_status(monkeypatch, capsys):
    def no_network(url, timeout=0):
        raise releases.NetworkError(f"{url}: Name or service not known")

    upstream = releases.gather(no_network)
    assert upstream.offline and len(upstream.failures) == len(releases.SOURCES)
    monkeypatch.setattr(releases, "fetch_url", no_network)
    assert cli("check", "--matrix", str(MATRIX)) == releases.EXIT_OFFLINE
    err = capsys.readouterr().err
    assert "could not check" in err and "Name or service not known" in err
    assert releases.EXIT_OFFLINE not in (releases.EXIT_UP_TO_DATE, releases.EXIT_UPDATES, releases.EXIT_ERROR, 2)


def test_no_readable_source_is_not_up_to_date(tmp_path):
    assert cli("check", "--matrix", str(MATRIX), "--fixtures", str(tmp_path)) == releases.EXIT_OFFLINE


def test_partial_failures_are_listed_not_fatal():
    def only_pypi(url, timeout=0):
        if "pypi.org" in url:
            return releases.fixture_fetcher(UPSTREAM)(url)
        raise releases.NetworkError(f"{url}: timed out")

    upstream = releases.gather(only_pypi)
    assert not upstream.offline and len(upstream.failures) == 4
    findings = releases.compare(releases.load_matrix(MATRIX), upstream, today=TODAY)
    assert "Sources that could not be read" in releases.render_body(findings)


def test_bad_matrix_is_an_error_exit(tmp_path, capsys):
    path = tmp_path / "matrix.toml"
    path.write_text("schema = 1\n[[cpu]]\nname = 'x'\n", encoding="utf-8")
    assert cli("show", "--matrix", str(path)) == releases.EXIT_ERROR
    assert str(path) in capsys.readouterr().err


def test_show_lists_entries_newest_first(capsys):
    assert cli("show", "--matrix", str(MATRIX)) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == [e.name for e in releases.load_matrix(MATRIX)]
