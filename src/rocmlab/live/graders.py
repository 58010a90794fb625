"""The graders a live worker keeps open: one ``ClassGrader`` per lab (rocmlab.grading.grader), opened
at the lab's first attempt and used for every attempt after it, so that an attempt costs what one
learner of a batch ``rocmlab grade`` costs: its sandbox's worker, zygote and gradebook are made
once, and while another attempt of the lab waits in the queue a kernel is started ahead for it
(issue 49: a whole one-learner ``rocmlab grade`` per attempt cost 1.64x the CPU of batch grading).
With none waiting no kernel is started ahead, as a batch starts none past its last learner.

Each attempt still runs in a run of its own (its own kernel, folders, tmpfs and grader user, as
each learner of a batch grade), and the folders every kernel has covered include the queue's,
which holds every learner's submissions. A submission outside them is graded by a grader opened for
it alone, with its folder covered too, and closed after it.

A grader whose grading raised (an attempt past its time budget, an error of ours) or whose zygote
ended is closed and opened anew at the lab's next attempt. At most ``keep`` labs' graders are open
at once, the least recently used closed first: each holds a worker, a zygote with the lab's heavy
modules loaded and, while the lab has attempts waiting, a kernel started ahead.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path

from ..course.catalog import SMOKE, discover, select
from ..grading.grader import ClassGrader
from ..grading.submissions import StudentResult, Submission

OPEN_LABS = 3  # graders a worker keeps open: a workshop's room works on one or two labs at a time


def import_grading_modules() -> None:
    """Import what opening any lab's grader imports into this process (nbgrader and nbconvert, about
    0.5 CPU-s), so that a worker pays it at start, before its first claim, and not while a learner's
    first attempt waits (a replacement worker's included)."""
    import nbconvert.preprocessors  # noqa: F401
    import nbgrader.api
    import nbgrader.apps
    import nbgrader.coursedir
    import nbgrader.preprocessors  # noqa: F401


class OpenGraders:
    """One worker's open graders, by lab; ``close`` ends them all."""

    def __init__(
        self, root: Path, *, profile: str = SMOKE, unsafe: bool = False, hide=(), keep: int = OPEN_LABS, log=None
    ):
        self.root, self.profile, self.unsafe = Path(root), profile, unsafe
        self.hide = [Path(folder) for folder in hide]
        self.keep = max(1, keep)
        self.log = log or (lambda _message: None)
        self._open: OrderedDict[str, tuple[ClassGrader, Path]] = OrderedDict()

    def grade(
        self, lab_id: str, learner: str, notebook: Path, seed: int | None, *, next_waits: bool = True
    ) -> StudentResult:
        """Grade ``notebook`` as ``rocmlab grade`` grades that learner, on ``seed`` when given;
        ``next_waits``: another attempt of the lab waits in the queue, so a kernel is started ahead
        for it (none is otherwise: a kernel started for nobody costs as much CPU as an attempt's
        kernel, and the lab's zygote forks one at the next attempt)."""
        seeds = {learner: seed} if seed is not None else None
        submission = [Submission(learner, notebook)]
        grader = self._grader(lab_id)
        if not grader.covers(notebook):
            self.log(f"{notebook} lies outside the folders hidden from kernels: graded by a grader of its own")
            alone, out = self._new_grader(lab_id, notebook.parent)
            try:
                (result,) = alone.grade(submission, seeds, progress=_quiet)
            finally:
                _end(alone, out)
            return result
        try:
            (result,) = grader.grade(submission, seeds, progress=_quiet, ahead=next_waits)
        except BaseException:
            self._close(lab_id)  # the grader closed itself: its runs may be half done
            raise
        if grader.broken:
            self.log(f"the grader of {lab_id} is broken (a zygote ended): it is opened anew for the next attempt")
            self._close(lab_id)
        return result

    def _grader(self, lab_id: str) -> ClassGrader:
        if lab_id in self._open:
            self._open.move_to_end(lab_id)
            return self._open[lab_id][0]
        while len(self._open) >= self.keep:
            self._close(next(iter(self._open)))
        self._open[lab_id] = self._new_grader(lab_id)
        return self._open[lab_id][0]

    def _new_grader(self, lab_id: str, *more_hidden: Path) -> tuple[ClassGrader, Path]:
        lab = select(discover(self.root), [lab_id])[0]  # LabError: a lab this checkout lacks
        out = Path(tempfile.mkdtemp(prefix=f"rocmlab-live-{lab.id}-"))
        try:
            grader = ClassGrader(
                self.root,
                lab,
                out,
                profile_name=self.profile,
                unsafe=self.unsafe,
                extra_hidden=[*self.hide, *more_hidden],
                ahead=not more_hidden,  # a grader for one submission starts no kernel for a next one
            )
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)
            raise
        return grader, out

    def _close(self, lab_id: str) -> None:
        _end(*self._open.pop(lab_id))

    @property
    def labs(self) -> list[str]:
        """The labs whose graders are open, least recently used first."""
        return list(self._open)

    def close(self) -> None:
        while self._open:
            self._close(next(iter(self._open)))


def _end(grader: ClassGrader, out: Path) -> None:
    try:
        grader.close()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _quiet(_message: str) -> None:
    """The live worker logs each attempt itself: the grader's progress lines are not printed."""
