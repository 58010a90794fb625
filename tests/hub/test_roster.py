"""The class roster (issue 52): `rocmlab roster import` checks every row before it changes anything,
is idempotent, reports what it adds, changes and removes, never deletes a removed learner's grades,
and its names reach nbgrader's gradebook (grades.csv) and the certificate."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest
from live_fakes import attempt, check

from rocmlab.cli import main as rocmlab
from rocmlab.errors import ExitCode, InputError
from rocmlab.hub import completion, roster
from rocmlab.live import certificate as cert

HEADER = "login,name_zh,name_en,email,group\n"
CLASS = HEADER + (
    "ada,林艾达,Ada Lin,ada@uni.example.edu,learner\n"
    "bo,王博,Bo Wang,,learner\n"
    "prof-li,李老师,Prof. Li,li@uni.example.edu,instructor\n"
)
DAY = 1_780_000_000


def write(tmp_path, text, name="roster.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def students(db_url):
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gradebook:
        return {s.id: (s.first_name, s.last_name, s.email) for s in gradebook.students}


def test_import_makes_the_roster_and_reports_who_was_added(tmp_path, capsys):
    data = tmp_path / "hub"
    assert rocmlab(["roster", "import", str(write(tmp_path, CLASS)), "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "added (3): ada, bo, prof-li" in out
    people = roster.load(data)
    assert people["ada"] == roster.Person("ada", "林艾达", "Ada Lin", "ada@uni.example.edu", "learner")
    assert roster.logins(people, "instructor") == {"prof-li"}
    assert (data / "roster.json").stat().st_mode & 0o777 == 0o600  # names and e-mail: owner-only


def test_reimport_changes_nothing_and_says_so(tmp_path, capsys):
    data, file = tmp_path / "hub", write(tmp_path, CLASS)
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    assert rocmlab(["roster", "import", str(file), "--data", str(data), "--gradebook", db]) == 0
    stored = (data / "roster.json").stat()
    before = students(db)
    capsys.readouterr()
    assert rocmlab(["roster", "import", str(file), "--data", str(data), "--gradebook", db]) == 0
    assert "roster unchanged (3 people)" in capsys.readouterr().out
    assert (data / "roster.json").stat().st_mtime_ns == stored.st_mtime_ns
    assert students(db) == before


def test_changes_and_removals_are_reported_and_grades_stay(tmp_path, capsys):
    from nbgrader.api import Gradebook

    data, db = tmp_path / "hub", f"sqlite:///{tmp_path / 'gradebook.db'}"
    roster.import_roster(write(tmp_path, CLASS), data, [db])
    with Gradebook(db) as gradebook:  # bo has handed in a lab
        gradebook.add_assignment("01-rocm-setup")
        gradebook.add_submission("01-rocm-setup", "bo")
    renamed = CLASS.replace("Ada Lin,ada@", "Ada Lin-Moreau,ada@").replace("bo,王博,Bo Wang,,learner\n", "")
    changes = roster.import_roster(write(tmp_path, renamed + "cy,陈晨,Chen Chen,,learner\n"), data, [db])
    assert (changes.added, changes.changed, changes.removed) == (["cy"], ["ada"], ["bo"])
    assert "bo" not in roster.load(data)
    with Gradebook(db) as gradebook:  # removed from the class, not from the gradebook
        assert gradebook.find_submission("01-rocm-setup", "bo") is not None
    assert students(db)["ada"] == ("Ada Lin-Moreau", "林艾达", "ada@uni.example.edu")
    assert "submissions and grades are kept" in roster.describe(changes, 3)


@pytest.mark.parametrize(
    ("row", "where"),
    [
        ("Ada,林艾达,Ada Lin,,learner", "line 3: field login"),
        ("../x,林,X,,learner", "line 3: field login"),
        ("cy,,,,learner", "line 3: field name_en"),
        ("cy,陈晨,Chen,not-an-address,learner", "line 3: field email"),
        ("cy,陈晨,Chen,,student", "line 3: field group: 'student': expected learner or instructor"),
        ("ada,林艾达,Ada Lin,,learner", "line 3: field login: 'ada' is listed twice"),
        ("cy,陈晨,Chen,,learner,extra", "line 3: more fields"),
    ],
)
def test_a_bad_row_is_refused_with_file_line_and_field_and_nothing_changes(tmp_path, row, where):
    data, db = tmp_path / "hub", f"sqlite:///{tmp_path / 'gradebook.db'}"
    roster.import_roster(write(tmp_path, CLASS), data, [db])
    stored, before = (data / "roster.json").read_bytes(), students(db)
    bad = write(tmp_path, HEADER + "ada,林艾达,Ada Lin Changed,,learner\n" + row + "\n", "bad.csv")
    with pytest.raises(InputError) as refused:
        roster.import_roster(bad, data, [db])
    assert str(bad) in str(refused.value) and where in str(refused.value)
    assert (data / "roster.json").read_bytes() == stored
    assert students(db) == before


def test_a_wrong_header_is_refused_and_the_command_says_where(tmp_path, capsys):
    bad = write(tmp_path, "login,name,group\nada,Ada,learner\n")
    assert rocmlab(["roster", "import", str(bad), "--data", str(tmp_path / "hub")]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert f"{bad}: line 1: header" in err and "missing ['name_zh', 'name_en', 'email']" in err
    assert not (tmp_path / "hub" / "roster.json").exists()


def test_an_excel_csv_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes(CLASS.encode("utf-8-sig"))
    assert set(roster.read_roster(path)) == {"ada", "bo", "prof-li"}


def test_display_name_in_each_language_and_its_fallbacks(tmp_path):
    data = tmp_path / "hub"
    roster.import_roster(write(tmp_path, CLASS + "dee,,Dee,,learner\n"), data)
    assert roster.display_name("ada", "zh", data) == "林艾达"
    assert roster.display_name("ada", "en", data) == "Ada Lin"
    assert roster.display_name("dee", "zh", data) == "Dee"  # no Chinese name: the English one
    assert roster.display_name("stranger", "en", data) == "stranger"
    assert roster.display_name("ada", "en", tmp_path / "no-roster") == "ada"


def test_the_certificate_prints_the_roster_names(tmp_path, monkeypatch):
    data = tmp_path / "hub"
    roster.import_roster(write(tmp_path, CLASS), data)
    monkeypatch.setenv("ROCMLAB_HUB_DATA", str(data))  # as the live service has it
    rule_file = write(
        tmp_path,
        '[certificate]\ncourse = { en = "GPU", zh = "GPU 课" }\n[[certificate.labs]]\n'
        'lab = "01-rocm-setup"\npass_fraction = 1.0\n',
        "completion.toml",
    )
    passed = [attempt("ada", "01-rocm-setup", DAY, checks=[check("a", True)])]
    earned = cert.earned(completion.load_rule(rule_file), passed, "ada")
    assert earned.names == {"en": "Ada Lin", "zh": "林艾达"}
    assert '<p class="learner" id="learner">林艾达</p>' in cert.certificate_page(earned, "zh")
    assert '<p class="learner" id="learner">Ada Lin</p>' in cert.certificate_page(earned, "en")
    key = b"k" * 32
    signed = cert.sign(earned, key)
    assert cert.is_signed(signed, key)
    assert not cert.is_signed(replace(signed, names={"en": "Eve", "zh": "Eve"}), key)  # the names are signed


def test_roster_names_reach_grades_csv(tmp_path, make_course):
    """The gradebook a class is graded into (rocmlab grade --gradebook) carries the roster's
    names: nbgrader's CSV export, grades.csv, lists them beside each score."""
    from rocmlab.course.catalog import parse_lab
    from rocmlab.course.notebooks import solution_notebook
    from rocmlab.grading.gradebook import Course

    root = make_course()
    lab = parse_lab(root / "solutions" / "01-demo")
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    roster.import_roster(write(tmp_path, CLASS), tmp_path / "hub", [db])
    course = Course(root, lab, tmp_path / "out" / "course", db)
    course.create_assignment(solution_notebook(lab, "en"))
    course.record("ada", None)  # an ungradable submission: zero, a path every grading run can take
    course.export_csv(tmp_path / "grades.csv")
    rows = {row["student_id"]: row for row in csv.DictReader((tmp_path / "grades.csv").open(encoding="utf-8"))}
    assert (rows["ada"]["first_name"], rows["ada"]["last_name"]) == ("Ada Lin", "林艾达")
    assert rows["ada"]["email"] == "ada@uni.example.edu"


def test_show_prints_the_roster(tmp_path, capsys):
    data = tmp_path / "hub"
    roster.import_roster(write(tmp_path, CLASS), data)
    capsys.readouterr()
    assert rocmlab(["roster", "show", "--data", str(data)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "login,name_zh,name_en,email,group"
    assert json.loads((data / "roster.json").read_text(encoding="utf-8"))["people"]["bo"]["name_en"] == "Bo Wang"


def xlsx(tmp_path, rows, name="class.xlsx"):
    openpyxl = pytest.importorskip("openpyxl", reason="openpyxl is not installed (hub extra)")
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    book.save(tmp_path / name)
    return tmp_path / name


def test_an_excel_workbook_imports_like_the_csv(tmp_path):
    rows = [line.split(",") for line in CLASS.splitlines()]
    rows[2][0] = 2023001  # a numeric login as Excel stores it
    people = roster.read_roster(xlsx(tmp_path, rows))
    assert set(people) == {"ada", "2023001", "prof-li"}
    assert people["2023001"].name_zh == "王博" and people["ada"].email == "ada@uni.example.edu"


def test_a_bad_excel_row_names_its_sheet_line(tmp_path):
    rows = [line.split(",") for line in CLASS.splitlines()] + [["cy", "陈晨", "Chen", "", "student"]]
    with pytest.raises(InputError, match=r"class.xlsx: line 5: field group: 'student'"):
        roster.read_roster(xlsx(tmp_path, rows))
    (tmp_path / "fake.xlsx").write_text("login,name_zh\n", encoding="utf-8")
    with pytest.raises(InputError, match="fake.xlsx: not a readable XLSX workbook"):
        roster.read_roster(tmp_path / "fake.xlsx")


def test_a_name_is_text_on_the_certificate_never_markup(tmp_path, monkeypatch):
    data = tmp_path / "hub"
    roster.import_roster(write(tmp_path, HEADER + 'ada,,"<img src=x onerror=alert(1)>",,learner\n'), data)
    monkeypatch.setenv("ROCMLAB_HUB_DATA", str(data))
    rule_file = write(
        tmp_path,
        '[certificate]\ncourse = { en = "GPU", zh = "GPU 课" }\n[[certificate.labs]]\n'
        'lab = "01-rocm-setup"\npass_fraction = 1.0\n',
        "completion.toml",
    )
    earned = cert.earned(
        completion.load_rule(rule_file), [attempt("ada", "01-rocm-setup", DAY, checks=[check("a", True)])], "ada"
    )
    page = cert.certificate_page(earned, "en")
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
