"""The scale check: one 10-million-message batch, half of it on one hot address, through the
batch command with Spark's default memory settings, on this machine.

It proves the design claim rather than a speed: nothing proportional to the batch is collected to
the driver and the per-address logic streams, so the run completes and the books balance. It
prints wall time, CPU time and the peak RSS of the whole process tree.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
from pathlib import Path

from msgdedup.bench.measure import measure
from msgdedup.bench.workload import Workload, write_batch

ROOT = Path(__file__).resolve().parents[3]
BATCH_ID = "2026-11-21T00"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--hot-share", type=float, default=0.5)
    parser.add_argument("--work", default="/tmp/msgdedup-scale")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    work = Path(args.work)
    raw, warehouse = work / "raw", work / "warehouse"
    if not (raw / "_SUCCESS").exists():
        print(f"generating {args.messages:,} messages (hot share {args.hot_share}) in {raw} ...", flush=True)
        write_batch(raw, 0, Workload(messages=args.messages, hot_share=args.hot_share, files=16))
    shutil.rmtree(warehouse, ignore_errors=True)
    print("running the batch command (Spark default memory settings) ...", flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = measure(
        [str(ROOT / ".venv/bin/spark-submit"), "--master", args.master, "--conf", "spark.ui.enabled=false",
         str(ROOT / "spark_apps/dedup_batch.py"), "--input", str(raw), "--warehouse", str(warehouse),
         "--batch-id", BATCH_ID],
        log_path=work / "dedup_batch.log")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        print(result.output_tail)
        print(f"scale check FAILED: exit code {result.returncode}")
        return 1
    counts = json.loads((warehouse / "runs" / f"{BATCH_ID}.json").read_text())["counts"]
    balanced = counts["input_lines"] == counts["delivered"] + counts["dropped"] + counts["quarantined"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{counts['input_lines']:,} lines: {counts['delivered']:,} delivered, {counts['dropped']:,} dropped, "
          f"{counts['quarantined']:,} quarantined; books balance: {balanced}")
    print(f"wall {result.wall_s:.0f} s, CPU {cpu:.0f} s, peak RSS of the process tree "
          f"{result.peak_rss_bytes / 2**30:.2f} GiB")
    return 0 if balanced and counts["input_lines"] == args.messages else 1


if __name__ == "__main__":
    raise SystemExit(main())
