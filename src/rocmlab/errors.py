"""The exceptions of rocmlab and the exit status each one means (README, "Exit status").

A command raises; ``rocmlab.cli.main`` alone turns the exception into one line on stderr and an
exit status. No other module prints ``error:`` or picks an exit status for an error.

- ``InputError`` (exit 2): the user's input is wrong. The message names the file, the field or
  the value, and what was expected. ``LabError`` is one: a lab source is wrong.
- ``CommandFailed`` (exit 1): the input was fine but the work could not be done (a download, an
  install, a server that would not start). The message says what to do.

Statuses that are results rather than errors (1: a lab failed, 3: a lab was skipped) are what a
command's ``main()`` returns; ``ExitCode`` names them.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    SKIPPED = 3
    INTERRUPTED = 130


class RocmlabError(Exception):
    """Every error rocmlab reports to its user; ``exit_code`` is the status the command ends with."""

    exit_code = ExitCode.FAILED


class InputError(RocmlabError):
    """Bad input: the message names the file, the field or the value, and what was expected."""

    exit_code = ExitCode.BAD_INPUT


class LabError(InputError):
    """A lab source (lab.toml, lab.py) or the choice of labs is wrong; the message names the file and field."""


class CommandFailed(RocmlabError):
    """The input was fine and the work could not be done; the message says what to do."""

    exit_code = ExitCode.FAILED
