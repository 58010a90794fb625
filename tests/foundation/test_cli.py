import json
import shutil
import subprocess
import sys

import pytest
from conftest import GOOD_PY
from labsource import REPO

from rocmlab.cli import COMMANDS, command, main, make_parser


def test_list_json(make_course, capsys):
    root = make_course()
    assert main(["--root", str(root), "list", "--json"]) == 0
    (lab,) = json.loads(capsys.readouterr().out)
    assert lab["id"] == "01-demo" and lab["profiles"] == ["smoke"]


def test_unknown_lab_exits_2_with_a_suggestion(make_course, capsys):
    root = make_course()
    assert main(["--root", str(root), "run", "01-dmeo"]) == 2
    assert "did you mean '01-demo'" in capsys.readouterr().err


def test_bad_source_exits_2_and_writes_nothing(make_course, capsys):
    root = make_course({"01-demo": (None, GOOD_PY.replace('grade_id="t-1" ', ""))})
    assert main(["--root", str(root), "build"]) == 2
    err = capsys.readouterr().err
    assert "lab.py: cell" in err and "grade_id" in err
    assert not any((root / "labs").glob("*/*"))


def test_check_reports_drift_with_exit_1(make_course, capsys):
    root = make_course()
    assert main(["--root", str(root), "build", "--check"]) == 1
    assert "missing  labs/zh/01-demo/01-demo.ipynb" in capsys.readouterr().out
    assert main(["--root", str(root), "build"]) == 0
    assert main(["--root", str(root), "build", "--check"]) == 0


def test_console_script_is_installed():
    out = subprocess.run([sys.executable, "-m", "rocmlab.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("rocmlab ")


def test_an_unknown_or_missing_environment_is_bad_input_not_a_traceback(capsys, tmp_path):
    assert main(["run", "01", "--env", "no-such-env", "--out", str(tmp_path)]) == 2
    assert "no entry named 'no-such-env'" in capsys.readouterr().err


# Every command, given bad input: exit 2 and a message on stderr that names the file, field or
# value. A command added to cli.COMMANDS needs a case here (the last test says so).
BAD_INPUT = {
    "list": (["list", "99-nope"], "unknown lab '99-nope'"),
    "new": (["new", "1-hello", "--title-en", "Hello", "--title-zh", "你好"], "'1-hello' is not a lab id"),
    "build": (["build", "--profile", "gpu"], "--profile needs --out DIR"),
    "run": (["run", "--repeat", "0"], "--repeat: expected a positive number, got 0"),
    "report": (["report", "--skip", "nonsense"], "--skip 'nonsense': expected ENTRY=REASON"),
    "doctor": (["doctor", "--machine", "{tmp}"], "machine.json"),
    "assets": (["assets", "build-model", "--steps", "0"], "--steps: expected a positive number, got 0"),
    "releases": (["releases", "show", "--matrix", "{tmp}/missing.toml"], "missing.toml"),
    "env": (["env", "create", "no-such-env"], "matrix.toml: no entry named 'no-such-env'"),
    "grade": (["grade", "01", "--submissions", "{tmp}/no-class"], "no-class: no such submissions folder"),
    "check": (["check", "{tmp}/nope.ipynb"], "nope.ipynb: no such notebook"),
    "hub": (["hub", "--demo", "--labs", "99-nope"], "unknown lab '99-nope'"),
    "live": (["live", "status", "--queue", "{tmp}/none.sqlite"], "none.sqlite: expected the live queue file"),
    "submit": (["submit", "{tmp}/nope.ipynb"], "nope.ipynb: no such notebook"),
    "site": (["site", "--hub-url", "hub.example.org"], "site.toml: missing (the hub URL of the launch links)"),
    "roster": (["roster", "import", "{tmp}/class.csv", "--data", "{tmp}/hub"], "class.csv: not a readable UTF-8"),
}


@pytest.mark.parametrize("name", BAD_INPUT)
def test_every_command_says_what_is_wrong_with_its_input_and_exits_2(name, make_course, tmp_path, capsys):
    argv, message = BAD_INPUT[name]
    root = make_course()
    (root / "env").mkdir()
    shutil.copy(REPO / "env" / "matrix.toml", root / "env")  # a course has its release matrix
    status = main(["--root", str(root), *(word.format(tmp=tmp_path) for word in argv)])
    err = capsys.readouterr().err
    assert (status, message in err) == (2, True), err


def test_argparse_errors_are_exit_2_and_every_command_has_a_bad_input_case(capsys):
    assert main(["report", "--format", "xml"]) == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err
    assert set(BAD_INPUT) == set(COMMANDS)


def test_a_failure_is_exit_1_with_the_message_on_stderr(capsys, monkeypatch):
    from rocmlab.errors import CommandFailed

    def fails(**options):
        raise CommandFailed("the work could not be done: do this")

    monkeypatch.setattr(command("list"), "main", fails)
    assert main(["list"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "rocmlab list: error: the work could not be done: do this\n" and captured.out == ""


def test_the_readme_command_table_is_generated_from_the_parsers():
    from rocmlab.cli_table import rows, stamped

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    parser = make_parser([], every_command=True)
    assert stamped(readme, parser) == readme, "run: python -m rocmlab.cli_table README.md"
    commands = [usage.split()[1] for usage, _ in rows(parser)]
    assert set(commands) == set(COMMANDS)
    assert any(usage.startswith("rocmlab env list") for usage, _ in rows(parser))  # sub-commands get rows


def test_the_command_line_starts_without_the_notebook_machinery_and_blocks_the_iri_grammar():
    """`rocmlab` imports only the chosen command's module: not the notebook worker (papermill's
    side), whose blocked imports it once borrowed; jsonschema's IRI grammar is blocked (startup.py)."""
    probe = (
        "import sys, rocmlab.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith('rocmlab')))\n"
        "rocmlab.cli.main(['--version'])\n"
        "import jsonschema\n"
        "print(sys.modules.get('rfc3987_syntax', 'absent'))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    loaded, *_, iri = out.stdout.splitlines()
    assert loaded == "['rocmlab', 'rocmlab.cli', 'rocmlab.errors', 'rocmlab.processes', 'rocmlab.startup']"
    assert iri == "None"
