"""Ready the offline course model (tiny-qwen-zh) for a run: found in the cache, or built there by a
``rocmlab assets build-model`` child process whose progress lines are passed on as they come.

A child process, not a thread: an interrupted run can end it, and it has a time limit.
"""

from __future__ import annotations

import os
import subprocess
import threading

from ..assets.tiny_model import BUILD_LIMIT_S
from ..errors import CommandFailed

BUILD_TIMEOUT_S = BUILD_LIMIT_S


class CourseModelBuild:
    """``run()`` returns once the course model is in the cache; ``stop()`` ends a build under way."""

    def __init__(self, python: str, say, *, timeout_s: float = BUILD_TIMEOUT_S, command: list[str] | None = None):
        self.python, self.say, self.timeout_s = python, say, timeout_s
        self.command = command or [python, "-m", "rocmlab", "assets", "build-model"]
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def run(self) -> None:
        with self._lock:
            if self._stopped:
                raise CommandFailed("the course model build was stopped before it started")
            self._proc = subprocess.Popen(
                self.command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},  # each progress line as it is printed
            )
        past_limit = threading.Event()
        timer = threading.Timer(self.timeout_s, lambda: (past_limit.set(), self._proc.kill()))
        timer.start()
        tail = []
        try:
            for line in self._proc.stdout:
                line = line.rstrip()
                if line:
                    tail = (tail + [line])[-5:]
                    self.say(line)
            code = self._proc.wait()
        finally:
            timer.cancel()
            self._proc.stdout.close()
        if code != 0:
            why = "it ran past its limit" if past_limit.is_set() else f"exit code {code}"
            raise CommandFailed(f"building the course model failed ({why}): {' | '.join(tail)[-600:]}")

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._proc and self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()


def course_model_ready() -> bool:
    """Whether the cache already holds a valid build of the default course model."""
    from ..assets import tiny_model

    return tiny_model.read_valid_manifest(tiny_model.model_dir()) is not None
