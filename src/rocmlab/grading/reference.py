"""The grader's side of the reference kernel (``rocmlab.execution.reference_kernel``): one per
slot, in a sandbox run of its own, made the first time a learner of the slot is graded and kept
until the class ends (``Sandbox.close``). Only a lab whose checks take ``reference`` gets one."""

from __future__ import annotations

import shutil

from ..course.catalog import HIDDEN_DATA
from ..execution.reference_kernel import reference_options, reference_tag
from ..execution.worker import kernel_environment


def needs_reference(checks: list) -> bool:
    """Whether any of the lab's checks (``harness.Check``) asks the reference kernel."""
    return any(c.wants_reference for c in checks)


def slot_reference(plan, slot: int) -> dict | None:
    """The harness's ``reference`` option for the slot's runs (None: the lab needs none)."""
    if not needs_reference(plan.checks):
        return None
    if slot not in plan.references:
        profile = plan.profile
        run, new = plan.sandbox.reference_run(slot, profile.cell_timeout_s)
        if new and plan.lab.data_dir.is_dir():
            shutil.copytree(
                plan.lab.data_dir, run.work / "data", dirs_exist_ok=True, ignore=shutil.ignore_patterns(HIDDEN_DATA)
            )
        env = kernel_environment(reference_tag(), run.env)
        plan.references[slot] = reference_options(
            run, plan.sources["en"], profile.parameters, profile.cell_timeout_s, profile.timeout_s, env
        )
    return plan.references[slot]
