"""Which labs a hub delivers, and from which folder: the smoke build or a profile rendered at start."""

from __future__ import annotations

from pathlib import Path

from ..course.catalog import GPU, LANGUAGES, SMOKE, discover, select
from ..errors import InputError

COURSE_ID = "rocmlab"  # the nbgrader course of the hub
PROFILES = (SMOKE, GPU)  # smoke: the labs/ build as it is; gpu: rendered by the hub at start


def resolve_labs(root: Path, lang: str, labs) -> list[str]:
    """Lab ids (numbers allowed) whose student notebooks are built under labs/<lang>/; every
    built lab when ``labs`` is empty."""
    if lang not in LANGUAGES:
        raise InputError(f"--lang: expected {' or '.join(LANGUAGES)}, got {lang!r}")
    ids = (
        [lab.id for lab in select(discover(root), list(labs))]
        if labs
        else [lab.id for lab in discover(root) if (root / "labs" / lang / lab.id).is_dir()]
    )
    for lab_id in ids:
        notebook = root / "labs" / lang / lab_id / f"{lab_id}.ipynb"
        if not notebook.is_file():
            raise InputError(f"{notebook}: not built; run `rocmlab build` first")
    return ids


def check_profile(profile: str) -> None:
    if profile not in PROFILES:
        raise InputError(f"--profile: expected {' or '.join(PROFILES)}, got {profile!r}")


def delivered_labs(root: Path, data: Path, lang: str, lab_ids, profile: str, progress=print) -> tuple[Path, list[str]]:
    """The folder the hub delivers notebooks from, and the labs in it: ``labs/<lang>/`` as built for
    smoke; for another profile the notebooks with its parameters, built into
    ``<data>/labs-<profile>/<lang>/`` (a lab without the profile is left out, ``progress`` says why)."""
    from ..build.assignments import build

    check_profile(profile)
    if profile == SMOKE:
        return root / "labs" / lang, list(lab_ids)
    out = data / f"labs-{profile}"
    labs = select(discover(root), list(lab_ids)) if lab_ids else []
    built = build(root, labs, [lang], out, progress=progress, profile=profile)
    return out / lang, [folder.name for folder in built]
