"""Seconds per step of one application run, as recorded in manifests and gate results (``timings``).

The bench and the task logs read these records to tell where a batch's time went, so the engine,
the gate and ``process_batch`` name and round them the same way: ``<step>_s`` and ``total_s``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class StepTimer:
    def __init__(self) -> None:
        self._started = self._last = time.perf_counter()
        self.steps: dict[str, float] = {}

    def _add(self, name: str, seconds: float) -> None:
        key = f"{name}_s"
        self.steps[key] = round(self.steps.get(key, 0.0) + seconds, 3)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time the block; a step timed twice adds up."""
        started = time.perf_counter()
        try:
            yield
        finally:
            now = time.perf_counter()
            self._add(name, now - started)
            self._last = now

    def lap(self, name: str) -> None:
        """The time since the last lap (or step, or the start) is step ``name``."""
        now = time.perf_counter()
        self._add(name, now - self._last)
        self._last = now

    def as_dict(self) -> dict[str, float]:
        return {**self.steps, "total_s": round(time.perf_counter() - self._started, 3)}
