"""The course's completion rule: which labs, each passed with at least a fraction of its points,
earn the live workshop's certificate (``rocmlab.live.certificate`` issues it). The course says
which in a TOML file (``env/jupyterhub/completion.toml``, or the file named by
``ROCMLAB_HUB_COMPLETION``)::

    [certificate]
    course = { en = "GPU programming with ROCm", zh = "ROCm GPU 编程" }
    issuer = "rocmlab workshop"          # optional

    [[certificate.labs]]
    lab = "01-rocm-setup"
    pass_fraction = 0.8                  # of the lab's points, in (0, 1]

It is the hub's to read: ``rocmlab hub`` warns at start when the rule needs a lab it does not deliver.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError


@dataclass(frozen=True)
class Requirement:
    lab: str
    pass_fraction: float


@dataclass(frozen=True)
class CompletionRule:
    course: dict  # lang -> title
    issuer: str
    labs: tuple  # of Requirement


def load_rule(path: Path) -> CompletionRule:
    """The completion rule in ``path``; InputError naming the file and the field when it is wrong."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: not a readable TOML file ({exc})") from None
    section = data.get("certificate")
    if not isinstance(section, dict):
        raise InputError(f"{path}: expected a [certificate] table")
    course = section.get("course")
    if not isinstance(course, dict) or not all(
        isinstance(course.get(lang), str) and course[lang] for lang in ("en", "zh")
    ):
        raise InputError(f'{path}: field certificate.course: expected {{ en = "...", zh = "..." }}')
    labs = section.get("labs")
    if not isinstance(labs, list) or not labs:
        raise InputError(f"{path}: field certificate.labs: expected at least one [[certificate.labs]] table")
    return CompletionRule(
        course={"en": course["en"], "zh": course["zh"]},
        issuer=str(section.get("issuer", "")),
        labs=tuple(_requirement(path, index, entry) for index, entry in enumerate(labs)),
    )


def _requirement(path: Path, index: int, entry) -> Requirement:
    where = f"{path}: field certificate.labs[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("lab"), str) or not entry["lab"]:
        raise InputError(f"{where}.lab: expected a lab id")
    fraction = entry.get("pass_fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise InputError(f"{where}.pass_fraction: expected a number in (0, 1], got {fraction!r}")
    return Requirement(entry["lab"], float(fraction))


def unearnable(rule: CompletionRule, delivered) -> list[str]:
    """The labs the rule needs that the hub does not deliver (``delivered``: empty means every lab)."""
    return [need.lab for need in rule.labs if delivered and need.lab not in delivered]


def rule_warning(root: Path, delivered, environ=None) -> str:
    """What ``rocmlab hub`` says at start when the course's rule needs labs it does not deliver
    (the service then offers no certificate); "" when the rule can be earned or there is none."""
    env = os.environ if environ is None else environ
    path = Path(env.get("ROCMLAB_HUB_COMPLETION") or Path(root) / "env" / "jupyterhub" / "completion.toml")
    if not path.is_file():
        return ""
    lacking = unearnable(load_rule(path), tuple(delivered))
    if not lacking:
        return ""
    return (
        f"warning: no certificate is offered: its rule ({path}) needs {', '.join(lacking)}, which this hub does "
        "not deliver; deliver them (--labs) or point ROCMLAB_HUB_COMPLETION at a rule for these labs"
    )
