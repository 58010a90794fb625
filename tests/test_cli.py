import json
import subprocess
import sys

from conftest import GOOD_PY

from rocmlab.cli import main


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
