"""Hints of the live workshop: stored, targeted, and delivered beside the notebook (issue 34)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from live_fakes import attempt, check

from rocmlab.errors import InputError
from rocmlab.live.hints import HintStore, check_hint, deliver_hint_file, send_hint
from rocmlab.live.view import stuck_learners

LAB = "02-hip-kernels"
ME = (os.getuid(), os.getgid())


def home_with_lab(root: Path, learner: str) -> Path:
    home = root / learner
    (home / LAB).mkdir(parents=True)
    (home / LAB / f"{LAB}.ipynb").write_text('{"cells": []}', encoding="utf-8")
    return home


def test_a_hint_needs_a_lab_an_exercise_and_some_text():
    assert check_hint(LAB, "grid", {"en": " Launch more blocks. ", "zh": ""}) == {"en": "Launch more blocks.", "zh": ""}
    with pytest.raises(InputError, match="field lab"):
        check_hint("../etc", "grid", {"en": "x"})
    with pytest.raises(InputError, match="field grade_id"):
        check_hint(LAB, "a b", {"en": "x"})
    with pytest.raises(InputError, match="text_en, text_zh"):
        check_hint(LAB, "grid", {"en": "  ", "zh": ""})
    with pytest.raises(InputError, match="text_zh: 4001 characters"):
        check_hint(LAB, "grid", {"zh": "字" * 4001})


def test_hints_and_deliveries_survive_a_new_store_on_the_same_file(tmp_path):
    store = HintStore(tmp_path / "live.sqlite")
    hint = store.add(LAB, "grid", {"en": "more blocks", "zh": "多开几个 block"}, author="teacher", now=10.0)
    store.record_delivery(hint.id, "cy", file=f"{LAB}/HINT-{LAB}.md")
    store.record_delivery(hint.id, "dee", error="no lab folder")
    again = HintStore(tmp_path / "live.sqlite")
    assert [h.text for h in again.hints(LAB)] == [{"en": "more blocks", "zh": "多开几个 block"}]
    assert [h.id for h in again.hints_for("cy")] == [hint.id] and again.hints_for("ada") == []
    assert again.deliveries(hint.id) == {"cy": "", "dee": "no lab folder"}


def test_the_hint_file_goes_beside_the_notebook_and_the_notebook_is_unchanged(tmp_path):
    store = HintStore(tmp_path / "live.sqlite")
    homes = tmp_path / "homes"
    for learner in ("ada", "cy", "dee"):
        home_with_lab(homes, learner)
    attempts = [
        attempt("ada", LAB, 1, checks=[check("grid", True)]),
        attempt("cy", LAB, 1, checks=[check("grid", False)]),
        attempt("dee", LAB, 1, checks=[check("grid", False)]),
    ]
    first = store.add(
        LAB, "grid", {"en": "Launch ceil(n / block) blocks.", "zh": "启动 ceil(n / block) 个 block。"}, "t"
    )
    sent = send_hint(store, first, stuck_learners(attempts, LAB, "grid"), lambda name: (homes / name, ME))
    assert sent == {"cy": "", "dee": ""}
    assert not (homes / "ada" / LAB / f"HINT-{LAB}.md").exists()
    text = (homes / "cy" / LAB / f"HINT-{LAB}.md").read_text(encoding="utf-8")
    assert "Launch ceil(n / block) blocks." in text and "启动 ceil(n / block) 个 block。" in text
    assert (homes / "cy" / LAB / f"{LAB}.ipynb").read_text(encoding="utf-8") == '{"cells": []}'
    second = store.add(LAB, "reduce", {"en": "Synchronize before reading shared memory."}, "t")
    send_hint(store, second, ["cy"], lambda name: (homes / name, ME))
    text = (homes / "cy" / LAB / f"HINT-{LAB}.md").read_text(encoding="utf-8")
    assert "Launch ceil" in text and "Synchronize before" in text  # the file holds every hint sent to cy
    assert "Synchronize" not in (homes / "dee" / LAB / f"HINT-{LAB}.md").read_text(encoding="utf-8")
    assert sorted(p.name for p in (homes / "cy" / LAB).iterdir()) == [f"{LAB}.ipynb", f"HINT-{LAB}.md"]


def test_a_link_in_the_home_is_never_followed(tmp_path):
    store = HintStore(tmp_path / "live.sqlite")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep", encoding="utf-8")
    linked_folder = tmp_path / "homes" / "cy"
    linked_folder.mkdir(parents=True)
    (linked_folder / LAB).symlink_to(outside)  # the lab folder is a link: refused
    linked_file = home_with_lab(tmp_path / "homes", "dee")
    (linked_file / LAB / f"HINT-{LAB}.md").symlink_to(outside / "victim.txt")  # the file is a link: replaced
    hint = store.add(LAB, "grid", {"en": "more blocks"}, "t")
    sent = send_hint(store, hint, ["cy", "dee", "nobody"], lambda name: (tmp_path / "homes" / name, ME))
    assert "Too many levels of symbolic links" in sent["cy"] or "Not a directory" in sent["cy"]
    assert sent["dee"] == "" and "nobody" in sent and sent["nobody"]
    assert (outside / "victim.txt").read_text(encoding="utf-8") == "keep"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    written = linked_file / LAB / f"HINT-{LAB}.md"
    assert not written.is_symlink() and "more blocks" in written.read_text(encoding="utf-8")
    assert store.deliveries(hint.id)["cy"] == sent["cy"]


def test_the_file_is_written_by_the_home_owner_when_run_as_root(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root: the child drops to the learner's uid")
    home = home_with_lab(tmp_path, "cy")
    os.chown(home, 65534, 65534)
    os.chown(home / LAB, 65534, 65534)
    store = HintStore(tmp_path / "live.sqlite")
    hint = store.add(LAB, "grid", {"en": "x"}, "t")
    deliver_hint_file(home, (65534, 65534), LAB, [hint])
    assert (home / LAB / f"HINT-{LAB}.md").stat().st_uid == 65534


def test_the_hint_goes_beside_the_notebook_the_learner_submits_from(tmp_path):
    """Issue 49: hints went into the practice copy (~/<lab>/), not the fetched one the learner
    works on and submits (~/rocmlab/<lab>/): it goes where the notebook was saved last."""
    store = HintStore(tmp_path / "live.sqlite")
    home = home_with_lab(tmp_path / "homes", "cy")
    fetched = home / "rocmlab" / LAB
    fetched.mkdir(parents=True)
    (fetched / f"{LAB}.ipynb").write_text('{"cells": [1]}', encoding="utf-8")
    os.utime(home / LAB / f"{LAB}.ipynb", (1_000, 1_000))  # the practice copy, untouched since delivery
    hint = store.add(LAB, "grid", {"en": "more blocks"}, "t")
    assert send_hint(store, hint, ["cy"], lambda name: (home, ME)) == {"cy": ""}
    assert (fetched / f"HINT-{LAB}.md").is_file() and not (home / LAB / f"HINT-{LAB}.md").exists()
    os.utime(fetched / f"{LAB}.ipynb", (500, 500))  # now the practice copy is the one being worked on
    send_hint(store, store.add(LAB, "reduce", {"en": "sync"}, "t"), ["cy"], lambda name: (home, ME))
    assert "sync" in (home / LAB / f"HINT-{LAB}.md").read_text(encoding="utf-8")
