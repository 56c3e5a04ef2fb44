"""Wall time and peak memory of a command, counted over its whole process tree.

A Spark app is not one process: spark-submit execs a JVM, which starts the Python driver and
Python workers (pyspark daemon and its forks). Their memory only means something summed, so a
sampler thread adds up the resident memory of every live process under the root(s) every
``interval`` seconds and keeps the maximum. Short-lived workers between two samples can be
missed: the figure is a sampled peak, good to the few percent that matter here, not an exact
high-water mark.

Summed RSS counts a page once per process that maps it, so processes that run one program (the
forked Python workers share most of the daemon's pages) count their PSS (a page shared by n
processes counts 1/n in each), and a process that shares its parent's whole address space is left
out: a child the JVM has spawned but not yet exec'd (``posix_spawn`` clones the address space) is
the JVM seen twice. Hadoop spawns ``chmod`` that way for the files a batch stages (a 1M batch:
some twenty times, while the JVM is at its largest), the likeliest cause of the extra 1.4 GiB, one
JVM's worth, that summed RSS showed in four of the eight 1M rows of the bench of November 26
(docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class ProcessMemory:
    """One process of a tree, as ``tree_rss`` samples it."""

    pid: int
    ppid: int
    exe: str
    rss: int
    resident: int  # PSS where the kernel reports it, else RSS


def distinct_resident(processes: Iterable[ProcessMemory]) -> int:
    """The resident bytes of ``processes`` summed, leaving out a child that shares its parent's
    address space: same program and the same resident set to the page as its parent (a clone
    before exec), which two processes with address spaces of their own practically never have."""
    by_pid = {p.pid: p for p in processes}
    total = 0
    for p in by_pid.values():
        parent = by_pid.get(p.ppid)
        if parent is not None and (parent.exe, parent.rss) == (p.exe, p.rss):
            continue
        total += p.resident
    return total


def _pss(proc: psutil.Process, rss: int) -> int:
    """The process's PSS; nothing for a process that has exited since it was listed, its RSS where
    there are no smaps to read.

    An exited process holds no memory of its own any more, and the pages it shared are back in
    its siblings' PSS only if they are read after it left: counting its RSS instead counted a
    forked child's shared pages a second time (a 200 MiB parent measured at 321 MiB, CI of
    November 26). Counting nothing can only make one sample low, which a peak over samples
    absorbs."""
    try:
        return proc.memory_full_info().pss
    except psutil.NoSuchProcess:  # also a zombie
        return 0
    except (psutil.Error, AttributeError):
        return rss


def tree_rss(roots: Iterable[int]) -> int:
    """Resident bytes of the processes ``roots`` and all their descendants, each page counted once
    (``distinct_resident``).

    PSS is read only for processes that run the same program as another one of the tree (the
    Python driver, daemon and its forked workers): processes of different programs share little
    but libraries, and reading a 1.5 GiB JVM's PSS makes the kernel walk its page tables, some
    25 ms a sample, which took a tenth of a core from the measured application."""
    seen: dict[int, tuple[psutil.Process, int, int, str]] = {}
    for pid in roots:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in procs:
            if proc.pid in seen:
                continue
            try:
                with proc.oneshot():
                    seen[proc.pid] = (proc, proc.ppid(), proc.memory_info().rss, proc.exe())
            except psutil.Error:
                pass
    programs = Counter(exe for _, _, _, exe in seen.values())
    return distinct_resident(
        ProcessMemory(pid, ppid, exe, rss, _pss(proc, rss) if programs[exe] > 1 else rss)
        for pid, (proc, ppid, rss, exe) in seen.items())


class PeakSampler:
    """Background thread: max over time of ``tree_rss(roots())``; use as a context manager."""

    def __init__(self, roots: Callable[[], Iterable[int]], interval: float = 0.2) -> None:
        self.roots, self.interval = roots, interval
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        rss = tree_rss(list(self.roots()))
        self.samples += 1
        self.peak = max(self.peak, rss)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Measurement:
    """One measured command. ``returncode`` 0 is success for every app but the GX gate (3 = failed gate)."""

    command: list[str]
    wall_s: float
    peak_rss_bytes: int
    returncode: int
    samples: int
    log: str | None = None
    output_tail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


# A demo prints its generated admin password; the tail goes into the committed results.
_PASSWORD = re.compile(r"(password:[ \t]*)\S+")  # on its own line only


def redact(text: str) -> str:
    """``text`` without the passwords a command printed (``password: ***``)."""
    return _PASSWORD.sub(r"\1***", text)


def measure(command: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
            log_path: str | Path | None = None, interval: float = 0.2,
            timeout: float | None = None) -> Measurement:
    """Run ``command`` to completion; wall time from start to exit, sampled peak RSS of its tree.

    Output goes to ``log_path`` (a file, so a chatty JVM can never block on a full pipe); its last
    lines are kept in the measurement for error reports.
    """
    log_file = Path(log_path) if log_path else None
    if log_file:
        log_file.parent.mkdir(parents=True, exist_ok=True)
    out = log_file.open("wb") if log_file else subprocess.DEVNULL
    try:
        start = time.perf_counter()
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        with PeakSampler(lambda: [proc.pid], interval) as sampler:
            try:
                returncode = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)  # our own session: exactly the tree we started
                returncode = proc.wait()
        wall = time.perf_counter() - start
    finally:
        if log_file:
            out.close()
    tail = ""
    if log_file and log_file.exists():
        lines = log_file.read_text(errors="replace").splitlines()
        tail = redact("\n".join(lines[-15:]))
    return Measurement(command=[str(c) for c in command], wall_s=round(wall, 3),
                       peak_rss_bytes=sampler.peak, returncode=returncode, samples=sampler.samples,
                       log=str(log_file) if log_file else None, output_tail=tail)


def event_log_conf(directory: Path) -> list[str]:
    """spark-submit arguments that make the application write its event log into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    # Spark 4 writes rolling, zstd-compressed logs by default: one plain JSON-lines file is countable.
    return ["--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir=file://{directory}",
            "--conf", "spark.eventLog.rolling.enabled=false", "--conf", "spark.eventLog.compress=false"]


def spark_jobs(directory: Path) -> int | None:
    """Spark jobs the applications whose event logs are in ``directory`` ran (one
    ``SparkListenerJobStart`` event each); None if there is no event log."""
    logs = [p for p in directory.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))]
    if not logs:
        return None
    marker = '"Event":"SparkListenerJobStart"'
    return sum(line.count(marker) for p in logs for line in p.open(encoding="utf-8", errors="replace"))


def recorded_seconds(path: Path) -> float | None:
    """``timings.total_s`` of a manifest or gate result (the app's own account, no JVM start-up)."""
    try:
        timings = json.loads(path.read_text()).get("timings")
    except (OSError, ValueError, AttributeError):
        return None
    value = timings.get("total_s") if isinstance(timings, dict) else None
    return float(value) if isinstance(value, (int, float)) else None
