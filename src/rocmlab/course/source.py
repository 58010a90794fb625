"""Read a lab's ``lab.py`` (jupytext percent text) into a validated notebook.

The cell conventions are in docs/lab-format.md: language tags on prose, a ``parameters``
cell, ``solution`` and ``test`` cells carrying ``grade_id`` / ``points``. This module turns
them into nbgrader metadata and splits the languages; it knows nothing about building files.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import re

import jupytext
import nbformat

from .. import python_ast
from .catalog import LANGUAGES, SMOKE, Lab, LabError

KNOWN_TAGS = {"zh", "en", "parameters", "solution", "test"}
GRADE_ID = re.compile(r"^[A-Za-z0-9_-]{1,60}$")
MARKERS = {
    "solution": ("### BEGIN SOLUTION", "### END SOLUTION"),
    "test": ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"),
}
STATED_VERSION = re.compile(r"\*\*(?:Version|版本)\*\*\s*[:：]?\s*v?(\d+(?:\.\d+)+)")
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def source_hash(lab: Lab) -> str:
    return hashlib.sha256(lab.source.read_bytes()).hexdigest()


def _where(lab: Lab, index: int, cell) -> str:
    first = next((line for line in cell.source.splitlines() if line.strip()), "").strip()
    return f"{lab.source}: cell {index + 1} ({first[:60]!r})"


def _kind(cell) -> str | None:
    tags = set(cell.metadata.get("tags", []))
    return "solution" if "solution" in tags else "test" if "test" in tags else None


def read_notebook(lab: Lab) -> nbformat.NotebookNode:
    """Parse lab.py; every convention violated raises LabError naming the file and the cell."""
    try:
        text = lab.source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LabError(f"{lab.source}: missing (every lab folder needs a lab.py)") from None
    if not re.search(r"^# %%", text, re.MULTILINE):
        raise LabError(f"{lab.source}: not jupytext percent format: no '# %%' cell marker found")
    try:
        nb = jupytext.reads(text, fmt="py:percent")
    except Exception as exc:  # noqa: BLE001 (jupytext raises assorted errors on malformed cell options)
        raise LabError(f"{lab.source}: cannot be read as jupytext percent format: {exc}") from None
    _validate(lab, nb)
    _render_lab_fields(lab, nb)
    return nb


def _render_lab_fields(lab: Lab, nb) -> None:
    """``{{version}}`` and ``{{minutes}}`` in prose become lab.toml's values: the title never disagrees with it."""
    fields = {"{{version}}": lab.version, "{{minutes}}": str(lab.minutes)}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for placeholder, value in fields.items():
                cell.source = cell.source.replace(placeholder, value)


def _validate(lab: Lab, nb) -> None:
    seen_ids: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        tags = cell.metadata.get("tags", [])
        unknown = [t for t in tags if t not in KNOWN_TAGS]
        if unknown:
            raise LabError(
                f"{_where(lab, index, cell)}: unknown tag {unknown[0]!r} "
                f"(expected one of {', '.join(sorted(KNOWN_TAGS))})"
            )
        if cell.cell_type == "code" and set(tags) & set(LANGUAGES):
            raise LabError(
                f"{_where(lab, index, cell)}: a code cell tagged {sorted(set(tags) & set(LANGUAGES))[0]!r}: "
                "language tags mark prose; both languages run the same code cells"
            )
        _check_markers(lab, index, cell)
        kind = _kind(cell)
        if kind:
            grade_id = _check_graded(lab, index, cell, kind)
            if grade_id in seen_ids:
                raise LabError(
                    f"{_where(lab, index, cell)}: duplicate grade_id {grade_id!r} (also cell {seen_ids[grade_id] + 1})"
                )
            seen_ids[grade_id] = index
    _check_parameters(lab, nb)
    _check_language_pairs(lab, nb)
    _check_stated_version(lab, nb)


def _check_markers(lab: Lab, index: int, cell) -> None:
    kind = _kind(cell)
    if MARKERS["test"][0] in cell.source or MARKERS["test"][1] in cell.source:
        raise LabError(
            f"{_where(lab, index, cell)}: hidden tests do not live in the notebook (the learner's kernel "
            f"could forge them): write each rule as a @check in {lab.checks} (docs/lab-format.md)"
        )
    for marker_kind, (begin, end) in MARKERS.items():
        opened, closed = cell.source.count(begin), cell.source.count(end)
        if (opened or closed) and kind != marker_kind:
            raise LabError(f"{_where(lab, index, cell)}: {begin!r} is only allowed in a cell tagged {marker_kind!r}")
        if opened != closed:
            raise LabError(f"{_where(lab, index, cell)}: {opened} {begin!r} but {closed} {end!r}")
    if kind == "solution" and not cell.source.count(MARKERS["solution"][0]):
        raise LabError(f"{_where(lab, index, cell)}: a solution cell needs a '### BEGIN SOLUTION' block")


def _check_graded(lab: Lab, index: int, cell, kind: str) -> str:
    where = _where(lab, index, cell)
    if cell.cell_type != "code":
        raise LabError(f"{where}: a {kind} cell must be a code cell")
    grade_id = cell.metadata.get("grade_id")
    if not isinstance(grade_id, str) or not GRADE_ID.match(grade_id):
        raise LabError(f'{where}: field grade_id: expected a stable id like "03-lora-count-1", got {grade_id!r}')
    if kind == "test":
        points = cell.metadata.get("points")
        if isinstance(points, bool) or not isinstance(points, (int, float)) or points <= 0:
            raise LabError(f"{where}: field points: expected a positive number, got {points!r}")
    return grade_id


def _only_imports(source: str) -> bool:
    try:
        tree = python_ast.parse(source)
    except SyntaxError:
        return False
    return all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in tree.body)


def parameter_names(source: str) -> set[str]:
    """Names assigned at top level in a parameters cell."""
    names = set()
    for node in python_ast.parse(source).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _check_parameters(lab: Lab, nb) -> None:
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    params = [(i, c) for i, c in code if "parameters" in c.metadata.get("tags", [])]
    if len(params) != 1:
        raise LabError(f"{lab.source}: expected exactly one code cell tagged 'parameters', found {len(params)}")
    p_index, p_cell = params[0]
    for index, cell in code:
        if index == p_index:
            break
        if not _only_imports(cell.source):
            raise LabError(f"{_where(lab, index, cell)}: only imports may come before the parameters cell")
    try:
        names = parameter_names(p_cell.source)
    except SyntaxError as exc:
        raise LabError(f"{_where(lab, p_index, p_cell)}: the parameters cell is not valid Python: {exc}") from None
    for required in ("PROFILE", "SEED"):
        if required not in names:
            raise LabError(f"{_where(lab, p_index, p_cell)}: the parameters cell must assign {required}")
    for profile in lab.profiles.values():
        for key in profile.params:
            if key not in names:
                raise LabError(
                    f"{lab.folder / 'lab.toml'}: field profiles.{profile.name}.params.{key}: "
                    f"no such variable in the parameters cell of {lab.source} "
                    f"(it assigns {', '.join(sorted(names))})"
                )


def _check_language_pairs(lab: Lab, nb) -> None:
    counts = {lang: sum(lang in c.metadata.get("tags", []) for c in nb.cells) for lang in LANGUAGES}
    if counts["zh"] != counts["en"]:
        raise LabError(
            f"{lab.source}: prose comes in zh/en pairs, but there are {counts['zh']} cells "
            f"tagged zh and {counts['en']} tagged en"
        )


def _check_stated_version(lab: Lab, nb) -> None:
    """A version the prose states (``**Version** 1.2.0``, ``**版本** 1.2.0``) is lab.toml's."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for stated in STATED_VERSION.findall(cell.source):
            if stated != lab.version:
                raise LabError(
                    f"{_where(lab, index, cell)}: states version {stated}, but {lab.folder / 'lab.toml'} "
                    f"field version is {lab.version}: write {lab.version}"
                )


def nbgrader_metadata(cell) -> dict | None:
    kind = _kind(cell)
    if kind is None:
        return None
    meta = {"grade_id": cell.metadata["grade_id"], "schema_version": 3, "task": False}
    if kind == "solution":
        meta.update(grade=False, locked=False, solution=True)
    else:
        meta.update(grade=True, locked=True, solution=False, points=cell.metadata["points"])
    return meta


CACHED_ASSETS = ("course_model", "qc_adapter")  # the fields of ``Requires`` that name a built asset of the cache


def cache_needs(lab: Lab) -> list[str]:
    """What the lab's smoke run needs built in the model cache: written into each notebook's
    ``metadata.rocmlab``, so that ``rocmlab check`` on a downloaded notebook, with no ``lab.toml``
    at hand, runs the grader's preflight for it."""
    requires = lab.profiles[SMOKE].requires if SMOKE in lab.profiles else None
    return [name for name in CACHED_ASSETS if requires is not None and getattr(requires, name)]


def for_language(lab: Lab, nb, lang: str) -> nbformat.NotebookNode:
    """The notebook in one language, with nbgrader cell metadata and stable cell ids."""
    if lang not in LANGUAGES:
        raise LabError(f"unknown language {lang!r} (expected one of {', '.join(LANGUAGES)})")
    other = set(LANGUAGES) - {lang}
    out = nbformat.v4.new_notebook()
    out.metadata = {
        "kernelspec": dict(KERNELSPEC),
        "language_info": {"name": "python"},
        "rocmlab": {"id": lab.id, "version": lab.version, "lang": lang, "source_sha256": source_hash(lab)},
    }
    if needs := cache_needs(lab):
        out.metadata["rocmlab"]["cache_needs"] = needs
    if lab.needs:  # what its run needs of the sandbox: `rocmlab check` on the notebook alone stops up front
        out.metadata["rocmlab"]["needs"] = list(lab.needs)
    for index, cell in enumerate(nb.cells):
        tags = cell.metadata.get("tags", [])
        if other & set(tags):
            continue
        new = copy.deepcopy(cell)
        grading = nbgrader_metadata(cell)
        keep_tags = [t for t in tags if t == "parameters"]
        new.metadata = {"tags": keep_tags} if keep_tags else {}
        if grading:
            new.metadata["nbgrader"] = grading
        new.id = grading["grade_id"] if grading else f"cell-{index}"
        if new.cell_type == "code":
            new.outputs, new.execution_count = [], None
        out.cells.append(new)
    return out
