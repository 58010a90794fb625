"""Ready the course's cached assets for a run: each found in the cache, or built there by a child
process whose progress lines are passed on as they come. In build order:

- the offline course model tiny-qwen-zh (``rocmlab assets build-model``);
- lab 03's QC adapter on it, which labs 03 and 06 load (``python -m rocmlab.lab.qc_adapter``).

A child process, not a thread: an interrupted run can end it, and it has a time limit.
"""

from __future__ import annotations

import os
import subprocess
import threading

from ..assets.tiny_model import BUILD_LIMIT_S
from ..errors import CommandFailed
from ..lab.qc_adapter import LOCK_TIMEOUT_S as ADAPTER_LIMIT_S

MODEL_KEY = "model tiny-qwen-zh"  # each asset's name in progress lines
ADAPTER_KEY = "adapter qc-lora"
# key: (its build command after the interpreter, time limit); in build order: the adapter is trained on the model
BUILDS = {
    MODEL_KEY: (["-m", "rocmlab", "assets", "build-model"], BUILD_LIMIT_S),
    ADAPTER_KEY: (["-m", "rocmlab.lab.qc_adapter"], ADAPTER_LIMIT_S),
}


def needed_assets(requires) -> list[str]:
    """The keys of the assets a profile's ``requires`` names, in build order."""
    return [MODEL_KEY] * requires.course_model + [ADAPTER_KEY] * requires.qc_adapter


def missing_assets() -> list[str]:
    """The keys of the assets the cache lacks, in build order."""
    from ..assets import tiny_model
    from ..lab import qc_adapter

    model = tiny_model.read_valid_manifest(tiny_model.model_dir()) is not None
    adapter = model and qc_adapter.read_manifest(qc_adapter.adapter_dir(tiny_model.MODEL_NAME)) is not None
    return [key for key, ready in ((MODEL_KEY, model), (ADAPTER_KEY, adapter)) if not ready]


class AssetBuild:
    """``run()`` returns once the asset is in the cache; ``stop()`` ends a build under way."""

    def __init__(self, command: list[str], say, *, timeout_s: float = BUILD_LIMIT_S):
        self.command, self.say, self.timeout_s = command, say, timeout_s
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def run(self) -> None:
        with self._lock:
            if self._stopped:
                raise CommandFailed(f"the build ({' '.join(self.command[1:])}) was stopped before it started")
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
            raise CommandFailed(f"{' '.join(self.command[1:])} failed ({why}): {' | '.join(tail)[-600:]}")

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._proc and self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()


def asset_builds(python: str, say) -> dict:
    """A build for each asset the cache lacks, in build order; ``say(key, line)`` gets its progress."""
    return {
        key: AssetBuild([python, *BUILDS[key][0]], lambda line, key=key: say(key, line), timeout_s=BUILDS[key][1])
        for key in missing_assets()
    }
