"""``solutions/`` → ``labs/<lang>/<id>/``: language split, nbgrader generate_assignment, integrity.

The whole build is written to a temporary folder first and swapped in lab by lab, so a
failed build leaves ``labs/`` as it was. ``check`` compares a fresh build with ``labs/``.
A profile build (``--profile gpu --out DIR``) appends the profile's parameters to each
notebook's parameters cell; it never writes into ``labs/``, which holds the smoke build.
"""

from __future__ import annotations

import ast
import filecmp
import json
import shutil
import tempfile
from pathlib import Path

import nbformat

from ..course.catalog import HIDDEN_DATA, LANGUAGES, Lab
from ..course.notebooks import write_notebook
from ..course.source import MARKERS, for_language, read_notebook
from ..errors import LabError
from ..grading.nbgrader_compat import nbgrader_config, running_nbgrader

LEAK_MARKERS = tuple(marker.removeprefix("### ") for pair in MARKERS.values() for marker in pair)  # however commented


def _generate_student(root: Path, lab: Lab, nb, dest: Path) -> None:
    """Run nbgrader generate_assignment on ``nb`` and copy its release folder to ``dest``."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    with tempfile.TemporaryDirectory(prefix="rocmlab-course-") as tmp:
        course = Path(tmp)
        source = course / "source" / lab.id
        write_notebook(nb, source / f"{lab.id}.ipynb")
        if lab.data_dir.is_dir():
            shutil.copytree(lab.data_dir, source / "data", ignore=shutil.ignore_patterns(HIDDEN_DATA))
        config = nbgrader_config(root, course)
        coursedir = CourseDirectory(config=config)
        api = NbGraderAPI(coursedir=coursedir, config=config)
        with running_nbgrader():
            result = api.generate_assignment(lab.id, force=True, create=True)
        if not result["success"]:
            log = (result.get("log") or "") + (result.get("error") or "")
            raise LabError(f"{lab.source}: nbgrader generate_assignment failed:\n{log.strip()[-2000:]}")
        shutil.copytree(course / "release" / lab.id, dest)


def _solution_lines(nb) -> set[str]:
    """Substantial lines that occur only inside solution or hidden-test blocks of the source."""
    inside, outside = set(), set()
    for cell in nb.cells:
        region = None
        for line in cell.source.splitlines():
            stripped = line.strip()
            for begin, end in MARKERS.values():
                if stripped.startswith(begin):
                    region = begin
                elif stripped.startswith(end):
                    region = None
            target = inside if region else outside
            if len(stripped) >= 16 and not stripped.startswith("#"):
                target.add(stripped)
    return inside - outside


def check_integrity(lab: Lab, source_nb, student_path: Path) -> None:
    """No solution text and no hidden test reaches the student notebook."""
    text = student_path.read_text(encoding="utf-8")
    student = nbformat.reads(text, as_version=4)
    for marker in LEAK_MARKERS:
        if marker in text:
            raise LabError(f"{lab.source}: the student notebook {student_path.name} still contains {marker!r}")
    leaked = sorted(line for line in _solution_lines(source_nb) if any(line in cell.source for cell in student.cells))
    if leaked:
        raise LabError(f"{lab.source}: solution text leaks into the student notebook: {leaked[0]!r}")
    hidden = sorted(p.name for p in student_path.parent.rglob(HIDDEN_DATA))
    if hidden:
        raise LabError(f"{lab.source}: hidden test data reached the student folder: {hidden[0]}")
    meta = student.metadata.get("rocmlab", {})
    if meta.get("id") != lab.id or meta.get("version") != lab.version:
        raise LabError(f"{lab.source}: the student notebook lost its rocmlab metadata (got {meta!r})")


def _literal(lab: Lab, profile: str, key: str, value) -> str:
    """``value`` (from lab.toml) as Python source that evaluates back to it."""
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)
    try:
        same = ast.literal_eval(text) == value
    except (ValueError, SyntaxError):
        same = False
    if not same:
        raise LabError(
            f"{lab.folder / 'lab.toml'}: field profiles.{profile}.params.{key}: {value!r} cannot be "
            "written into the parameters cell (expected a string, number, boolean, list or table)"
        )
    return text


def profile_assignments(lab: Lab, name: str) -> str:
    """The lines a profile build appends to the parameters cell: a comment, the params, PROFILE."""
    values = lab.profile(name).parameters
    lines = [f"# Parameters of the {name} profile ({lab.folder.parent.name}/{lab.id}/lab.toml [profiles.{name}])"]
    lines += [f"{key} = {_literal(lab, name, key, value)}" for key, value in values.items()]
    return "\n".join(lines)


def with_profile(lab: Lab, nb, name: str):
    """``nb`` with the profile's assignments after the defaults of its parameters cell (same cell,
    same tags: the cell carries no nbgrader metadata, so nbgrader neither locks nor checks it)."""
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = cell.source.rstrip("\n") + "\n\n" + profile_assignments(lab, name)
    nb.metadata["rocmlab"]["profile"] = name
    return nb


def render_lab(root: Path, lab: Lab, lang: str, dest: Path, profile: str | None = None) -> Path:
    """Write ``dest`` = the student folder of one lab in one language; returns the notebook.

    With ``profile``, the parameters cell also sets that profile's parameters."""
    nb = read_notebook(lab)
    localized = for_language(lab, nb, lang)
    if profile:
        localized = with_profile(lab, localized, profile)
    _generate_student(root, lab, localized, dest)
    notebook = dest / f"{lab.id}.ipynb"
    student = nbformat.read(notebook, as_version=4)
    student.metadata["rocmlab"] = localized.metadata["rocmlab"]
    write_notebook(student, notebook)
    check_integrity(lab, nb, notebook)
    return notebook


def languages(choice: str) -> list[str]:
    if choice == "all":
        return list(LANGUAGES)
    if choice not in LANGUAGES:
        raise LabError(f"unknown language {choice!r} (expected zh, en or all)")
    return [choice]


def render_all(
    root: Path, labs: list[Lab], langs: list[str], staging: Path, progress=print, profile: str | None = None
) -> None:
    for lab in labs:
        for lang in langs:
            progress(f"build  {lab.id} [{lang}]" + (f" ({profile} profile)" if profile else ""))
            render_lab(root, lab, lang, staging / lang / lab.id, profile)


def labs_with_profile(labs: list[Lab], profile: str, progress=print) -> list[Lab]:
    """The labs that have ``profile``; each other one is reported and left out."""
    kept = []
    for lab in labs:
        if profile in lab.profiles:
            kept.append(lab)
        else:
            progress(
                f"skip   {lab.id}: {lab.folder / 'lab.toml'} has no [profiles.{profile}] "
                f"(it has: {', '.join(lab.profiles)})"
            )
    return kept


def profile_out(root: Path, out: str | None, *, check: bool = False, verify: bool = False) -> Path:
    """The output folder of a profile build; refuses ``labs/`` (the smoke build) and --check/--verify."""
    if check or verify:
        raise LabError(
            f"--profile cannot be combined with --{'check' if check else 'verify'}: they judge the "
            "smoke build in labs/ (run them without --profile)"
        )
    labs_dir = (root / "labs").resolve()
    if out is None:
        raise LabError(
            f"--profile needs --out DIR: {labs_dir} holds the smoke build that `rocmlab build --check` "
            "compares, so a profile build never goes there"
        )
    target = Path(out).resolve()
    if target == labs_dir or labs_dir in target.parents:
        raise LabError(
            f"--out {out}: {labs_dir} holds the smoke build that `rocmlab build --check` compares; "
            "write a profile build elsewhere (e.g. --out build/labs-gpu)"
        )
    return target


def build(
    root: Path, labs: list[Lab], langs: list[str], out: Path, progress=print, profile: str | None = None
) -> list[Path]:
    """Build into a staging folder beside ``out`` and swap each lab folder in only when all succeeded.

    With ``profile``, labs without that profile are skipped (and reported through ``progress``)."""
    if profile:
        labs = labs_with_profile(labs, profile, progress)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=out) as tmp:
        staging = Path(tmp)
        render_all(root, labs, langs, staging, progress, profile)
        built = []
        for lang in langs:
            for lab in labs:
                built.append(_swap_in(staging / lang / lab.id, out / lang / lab.id))
    return built


def _swap_in(new: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    old = target.with_name(f".{target.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.rename(old)
    new.rename(target)
    if old.exists():
        shutil.rmtree(old)
    return target


def _tree_files(folder: Path) -> set[str]:
    if not folder.is_dir():
        return set()
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def drift(root: Path, labs: list[Lab], langs: list[str], out: Path, orphans: bool = True) -> list[str]:
    """Files under ``out`` that differ from what the build would write (added, removed, changed).

    With ``orphans``, lab folders under ``out`` that no source builds any more are listed too.
    """
    with tempfile.TemporaryDirectory(prefix="rocmlab-check-") as tmp:
        staging = Path(tmp)
        render_all(root, labs, langs, staging, progress=lambda _msg: None)
        differences = []
        for lang in langs:
            for lab in labs:
                fresh, current = staging / lang / lab.id, out / lang / lab.id
                for rel in sorted(_tree_files(fresh) | _tree_files(current)):
                    a, b = fresh / rel, current / rel
                    where = f"{out.name}/{lang}/{lab.id}/{rel}"
                    if not b.exists():
                        differences.append(f"missing  {where}")
                    elif not a.exists():
                        differences.append(f"extra    {where}")
                    elif not filecmp.cmp(a, b, shallow=False):
                        differences.append(f"changed  {where}")
        if orphans:
            known = {lab.id for lab in labs}
            differences += [
                f"orphan   {out.name}/{folder.parent.name}/{folder.name}/ (no solutions/{folder.name})"
                for lang in langs
                for folder in sorted((out / lang).glob("[0-9]*"))
                if folder.is_dir() and folder.name not in known
            ]
        return differences
