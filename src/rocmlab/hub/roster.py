"""The class roster: one CSV (or XLSX) file of ``login, name_zh, name_en, email, group`` (group: learner or
instructor) that decides who may sign in to the hub, who is an instructor there, the students
(with their names) of nbgrader's gradebooks, and the names printed on certificates.

``rocmlab roster import FILE`` checks every row first: a malformed row is refused with the file,
its line and the field, and nothing changes. A good file replaces the hub's roster
(``DATA/roster.json``, owner-only, written atomically) and is pushed into each gradebook named
with ``--gradebook``; the command reports who was added, changed and removed, and says so when
nothing changed. A person removed from the roster can no longer sign in; their submissions,
grades and gradebook entry are kept (nbgrader's ``remove_student`` would delete their grades,
so it is never called).

Read by: ``env/jupyterhub/jupyterhub_config.py`` and ``rocmlab.hub.auth`` (allow-list and the
instructor group, at start and at each sign-in) and ``rocmlab.live.certificate`` (``display_name``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import InputError
from .accounts import USER_NAME

COLUMNS = ("login", "name_zh", "name_en", "email", "group")
GROUPS = ("learner", "instructor")
ROSTER_FILE = "roster.json"
DEFAULT_DATA = "/srv/rocmlab-hub"  # jupyterhub_config.py's default ROCMLAB_HUB_DATA
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
MAX_NAME = 200


@dataclass(frozen=True)
class Person:
    login: str
    name_zh: str
    name_en: str
    email: str
    group: str  # learner | instructor


@dataclass
class Changes:
    added: list
    changed: list
    removed: list

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


# ------------------------------------------------------------------ reading a roster file


def read_roster(path: Path) -> dict[str, Person]:
    """The roster in ``path`` (CSV, or XLSX: its first sheet), login -> Person; InputError naming
    the file, line and field of the first wrong row (so nothing is half-imported)."""
    path = Path(path)
    header, rows = _xlsx_rows(path) if path.suffix.lower() == ".xlsx" else _csv_rows(path)
    header = [name.strip() for name in header]
    missing = [name for name in COLUMNS if name not in header]
    unknown = [name for name in header if name not in COLUMNS]
    if missing or unknown:
        raise InputError(
            f"{path}: line 1: header {header}: expected the columns {list(COLUMNS)}"
            + (f" (missing {missing})" if missing else "")
            + (f" (unknown {unknown})" if unknown else "")
        )
    people: dict[str, Person] = {}
    for line, values in rows:
        if len(values) > len(header):
            raise InputError(f"{path}: line {line}: more fields than the {len(header)} columns of the header")
        row = dict(zip(header, [value.strip() for value in values] + [""] * (len(header) - len(values))))
        person = check_row(path, line, row)
        if person.login in people:
            raise InputError(f"{path}: line {line}: field login: {person.login!r} is listed twice")
        people[person.login] = person
    if not people:
        raise InputError(f"{path}: no rows: a roster lists at least one person")
    return people


def _csv_rows(path: Path):
    try:
        text = path.read_text(encoding="utf-8-sig")  # Excel writes a byte-order mark
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable UTF-8 CSV file ({exc})") from None
    reader = csv.reader(text.splitlines())
    header = next(reader, [])
    return header, [(reader.line_num, values) for values in reader if any(value.strip() for value in values)]


def _xlsx_rows(path: Path):
    try:
        import openpyxl
    except ImportError:
        raise InputError(f"{path}: reading XLSX needs openpyxl (the hub extra); or save the sheet as CSV") from None
    from openpyxl.utils.exceptions import InvalidFileException

    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, InvalidFileException) as exc:
        raise InputError(f"{path}: not a readable XLSX workbook ({exc})") from None
    try:
        cells = [[_cell_text(cell) for cell in row] for row in book.worksheets[0].iter_rows(values_only=True)]
    finally:
        book.close()
    while cells and cells[-1] and not any(cells[-1]):
        cells.pop()
    header = [value for value in (cells[0] if cells else []) if value]
    rows = [(number, _trim(values)) for number, values in enumerate(cells[1:], start=2) if any(values)]
    return header, rows


def _cell_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():  # a login typed as a number: 2023001, not 2023001.0
        return str(int(value))
    return str(value)


def _trim(values: list) -> list:
    while values and not values[-1]:
        values = values[:-1]
    return values


def check_row(path: Path, line: int, row: dict) -> Person:
    def refuse(field: str, expected: str):
        raise InputError(f"{path}: line {line}: field {field}: {row.get(field, '')!r}: expected {expected}")

    if not USER_NAME.fullmatch(row["login"]):
        refuse("login", "lower-case letters, digits, '.', '_' or '-', starting with a letter or digit, 64 at most")
    if not row["name_zh"] and not row["name_en"]:
        refuse("name_en", "a name (name_en, name_zh or both)")
    for field in ("name_zh", "name_en"):
        if len(row[field]) > MAX_NAME or any(not char.isprintable() for char in row[field]):
            refuse(field, f"printable text of {MAX_NAME} characters at most")
    if row["email"] and not EMAIL.fullmatch(row["email"]):
        refuse("email", "an e-mail address, or nothing")
    if row["group"] not in GROUPS:
        refuse("group", " or ".join(GROUPS))
    return Person(**{field: row[field] for field in COLUMNS})


# ------------------------------------------------------------------ the hub's roster


def data_folder(data: Path | str | None = None) -> Path:
    return Path(data or os.environ.get("ROCMLAB_HUB_DATA") or DEFAULT_DATA)


def roster_path(data: Path | str | None = None) -> Path:
    return data_folder(data) / ROSTER_FILE


def load(data: Path | str | None = None) -> dict[str, Person]:
    """The hub's roster (empty when none was imported)."""
    path = roster_path(data)
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a roster written by `rocmlab roster import` ({exc})") from None
    return {login: Person(**fields) for login, fields in stored["people"].items()}


def save(people: dict[str, Person], data: Path | str | None = None) -> None:
    path = roster_path(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{ROSTER_FILE}.{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump({"people": {login: asdict(p) for login, p in sorted(people.items())}}, file, ensure_ascii=False)
    os.replace(temp, path)


def diff(old: dict[str, Person], new: dict[str, Person]) -> Changes:
    return Changes(
        added=sorted(set(new) - set(old)),
        changed=sorted(login for login in set(old) & set(new) if old[login] != new[login]),
        removed=sorted(set(old) - set(new)),
    )


def logins(people: dict[str, Person], group: str | None = None) -> set[str]:
    return {login for login, person in people.items() if group is None or person.group == group}


def display_name(login: str, lang: str, data: Path | str | None = None) -> str:
    """``login``'s name in ``lang`` (en or zh) from the hub's roster; the other language's name
    when that one is empty; the login itself when the roster does not list them."""
    try:
        person = load(data).get(login)
    except InputError:
        person = None
    if person is None:
        return login
    first, second = (person.name_zh, person.name_en) if lang == "zh" else (person.name_en, person.name_zh)
    return first or second or login


# ------------------------------------------------------------------ nbgrader's gradebook


def sync_gradebook(db_url: str, people: dict[str, Person]) -> int:
    """Create or update every learner of ``people`` in the gradebook at ``db_url``, with names and
    e-mail (nbgrader has a first and a last name: first_name holds name_en, last_name name_zh).
    Nobody is removed. Returns how many students were written."""
    from nbgrader.api import Gradebook

    from ..grading.nbgrader_compat import running_nbgrader

    learners = [person for person in people.values() if person.group == "learner"]
    if db_url.startswith("sqlite:///"):  # a lab not graded yet: its course folder comes first
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    with running_nbgrader(), Gradebook(db_url) as gradebook:
        for person in learners:
            gradebook.update_or_create_student(
                person.login, first_name=person.name_en, last_name=person.name_zh, email=person.email or None
            )
    return len(learners)


# ------------------------------------------------------------------ rocmlab roster


def import_roster(file: Path, data: Path | str | None = None, gradebooks=()) -> Changes:
    """Check ``file``, then make it the hub's roster and push it into ``gradebooks``."""
    new = read_roster(file)
    changes = diff(load(data), new)
    for url in gradebooks:  # before the hub's roster: a gradebook that fails leaves that as it was
        sync_gradebook(url, new)
    if changes:
        save(new, data)
    return changes


def describe(changes: Changes, people_count: int) -> str:
    if not changes:
        return f"roster unchanged ({people_count} people)"
    lines = [f"roster of {people_count} people:"]
    for label, names in (("added", changes.added), ("changed", changes.changed), ("removed", changes.removed)):
        if names:
            lines.append(f"  {label} ({len(names)}): {', '.join(names)}")
    if changes.removed:
        lines.append("  removed people can no longer sign in; their submissions and grades are kept")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    imp = actions.add_parser(
        "import", help="make a CSV or XLSX file of login,name_zh,name_en,email,group the class roster"
    )
    imp.add_argument("file", metavar="FILE", type=Path, help="CSV (UTF-8) or XLSX (first sheet) with a header row")
    imp.add_argument(
        "--data", metavar="DIR", help=f"the hub's data folder (default $ROCMLAB_HUB_DATA, else {DEFAULT_DATA})"
    )
    imp.add_argument(
        "--gradebook",
        action="append",
        default=[],
        metavar="URL",
        help="also create or update the learners, with names, in this nbgrader gradebook (SQLAlchemy URL; repeatable)",
    )
    show = actions.add_parser("show", help="print the hub's roster as CSV")
    show.add_argument("--data", metavar="DIR", help="the hub's data folder (default as for import)")


def main(action: str, data: str | None = None, file: Path | None = None, gradebook=(), **_options) -> int:
    if action == "show":
        writer = csv.writer(sys.stdout)
        writer.writerow(COLUMNS)
        for person in load(data).values():
            writer.writerow([getattr(person, field) for field in COLUMNS])
        return 0
    changes = import_roster(file, data, gradebook)
    print(describe(changes, len(load(data))))
    if gradebook:
        print(f"learners written to the gradebook(s): {', '.join(gradebook)}")
    return 0
