"""The course's completion rule (rocmlab.hub.completion): a wrong file named with its field, the
shipped rule's labs, and ``rocmlab hub``'s warning when the delivered labs cannot earn it."""

from __future__ import annotations

import re

import pytest
from labsource import REPO

from rocmlab.errors import InputError
from rocmlab.hub import completion


def write_rule(tmp_path, text):
    path = tmp_path / "completion.toml"
    path.write_text(text, encoding="utf-8")
    return completion.load_rule(path)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("x = 1", "expected a [certificate] table"),
        ("[certificate]\ncourse = 'x'", "field certificate.course"),
        ("[certificate]\ncourse = {en='a', zh='b'}", "field certificate.labs"),
        ("[certificate]\ncourse = {en='a', zh='b'}\n[[certificate.labs]]\npass_fraction = 1", "labs[0].lab"),
        (
            "[certificate]\ncourse = {en='a', zh='b'}\n[[certificate.labs]]\nlab='01'\npass_fraction = 80",
            "labs[0].pass_fraction",
        ),
        ("[certificate\n", "not a readable TOML file"),
    ],
)
def test_a_wrong_rule_names_the_file_and_the_field(tmp_path, text, field):
    with pytest.raises(InputError, match=re.escape(field)) as error:
        write_rule(tmp_path, text)
    assert "completion.toml" in str(error.value)


def test_the_courses_own_rule_loads_and_names_labs_of_the_course():
    course = completion.load_rule(REPO / "env" / "jupyterhub" / "completion.toml")
    assert course.labs and all((REPO / "solutions" / need.lab / "lab.toml").is_file() for need in course.labs)


def test_rocmlab_hub_says_at_start_when_the_courses_rule_cannot_be_earned(tmp_path):
    course = completion.load_rule(REPO / "env" / "jupyterhub" / "completion.toml")
    needed = [need.lab for need in course.labs]
    assert completion.rule_warning(REPO, needed, {}) == ""
    warning = completion.rule_warning(REPO, ["01-rocm-setup", "07-triton-kernels"], {})
    lacking = [lab for lab in needed if lab not in ("01-rocm-setup", "07-triton-kernels")]
    assert warning.startswith("warning: no certificate is offered") and all(lab in warning for lab in lacking)
