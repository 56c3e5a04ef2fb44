"""Dedup a raw batch and gate it with GX in one Spark application (``spark_apps/process_batch.py``).

Why one application: the DAG used to run ``dedup_batch.py`` and ``gx_gate.py`` as two
spark-submits per partition and paid JVM and Python-worker start-up twice. The gate only needs a
SparkSession, so it runs in the dedup's session, right after the commit. It still reads the
*committed* outputs rather than the engine's frames: it audits exactly what consumers will read.

Both steps keep their own error handling and one-line messages (``dedup_batch: …``,
``gx_gate: …``), so a log reads the same as with the two standalone commands, which stay
available to users. Exit codes: 0 committed and gate passed; 2 user error (of either step);
3 gate failed (the batch is committed but must not be published); 1 internal error.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from msgdedup import exit_codes
from msgdedup.config import AddressSettings, load_settings
from msgdedup.engine import batch
from msgdedup.layout import validate_batch_id
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.quality import GateResult, GateSettings, gate

log = logging.getLogger(__name__)

PROG = "process_batch"


def build_parser():
    """The batch command's arguments, unchanged: the DAG passes the same list to either app."""
    parser = batch.build_parser()
    parser.prog = PROG
    parser.description = ("Deduplicate one raw message batch into the warehouse, then validate the "
                          "committed batch with Great Expectations, in one Spark application.")
    return parser


def recorded_seconds(document: dict | None) -> float | None:
    """``timings.total_s`` of a manifest or gate result, if that step recorded one."""
    timings = (document or {}).get("timings")
    value = timings.get("total_s") if isinstance(timings, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def _gate_document(spark: SparkSession, result: GateResult) -> dict | None:
    """The gate's result.json as written: its recorded timings are not on GateResult."""
    try:
        text = HadoopFS(spark).read_text(result.result_path, missing_ok=True)
        return json.loads(text) if text else None
    except Exception:  # noqa: BLE001 - timings are informative; never fail a gated batch over them
        log.warning("could not read %s for its timings", result.result_path, exc_info=True)
        return None


def timings_line(batch_id: str, steps: dict[str, Any]) -> str:
    """One line with each step's seconds, so a task log shows where the application's time went."""
    def s(key: str) -> str:
        value = steps.get(key)
        return "–" if value is None else f"{value:.1f}"

    return (f"{PROG}: batch {batch_id} timings (s): spark session {s('session_s')}, "
            f"dedup {s('dedup_s')} (engine recorded {s('engine_recorded_s')}), "
            f"gate {s('gate_s')} (gate recorded {s('gate_recorded_s')}), total {s('total_s')}")


def run_steps(spark: SparkSession, args, settings, gate_settings: GateSettings,
              steps: dict[str, Any], cancelled: Callable[[], bool] | None = None) -> int:
    """The two steps, apart from ``main`` so the session is stopped whatever a step raises.
    ``cancelled``: see ``batch.run_batch``."""
    started = time.monotonic()
    try:
        manifest = batch.run_batch(spark, args.input, args.warehouse, args.batch_id, settings,
                                   invalidate_later=args.invalidate_later, cancelled=cancelled)
    except Exception as error:  # noqa: BLE001 - same mapping and one-line message as dedup_batch.py
        return batch.report_error(error, batch.exit_code(error))
    steps["dedup_s"] = round(time.monotonic() - started, 3)
    steps["engine_recorded_s"] = recorded_seconds(manifest)
    print(batch.summary_line(args.batch_id, manifest), flush=True)

    started = time.monotonic()
    code, result = gate.gate_and_report(spark, args.warehouse, args.batch_id, gate_settings)
    if result is not None:
        steps["gate_s"] = round(time.monotonic() - started, 3)
        steps["gate_recorded_s"] = recorded_seconds(_gate_document(spark, result))
    return code


@dataclass(frozen=True)
class Request:
    """One batch to process: the parsed arguments and the settings read from ``--config``."""

    args: argparse.Namespace
    settings: AddressSettings
    gate_settings: GateSettings


def prepare(argv: list[str] | None) -> Request | int:
    """Parse and validate the arguments before any JVM starts: the request, or the exit code of a
    user error (its one-line message printed). argparse's own errors exit 2 as usual
    (``SystemExit``)."""
    args = build_parser().parse_args(argv)
    try:
        validate_batch_id(args.batch_id)
        settings = load_settings(args.config)
        return Request(args, settings, GateSettings.from_config(args.config))
    except batch.USER_ERRORS as error:  # before any JVM starts, as dedup_batch.py
        return batch.report_error(error, exit_codes.USER_ERROR)


def run_in_session(spark: SparkSession, request: Request, session_s: float | None = None,
                   cancelled: Callable[[], bool] | None = None) -> int:
    """Both steps in ``spark``, which stays open: ``main`` stops it, the batch service
    (:mod:`msgdedup.batch_service`) runs its next request in it, and says with ``cancelled``
    when its client went away (``batch.run_batch`` then commits nothing)."""
    started = time.monotonic()
    steps: dict[str, Any] = {"session_s": session_s}
    code = run_steps(spark, request.args, request.settings, request.gate_settings, steps, cancelled)
    steps["total_s"] = round(time.monotonic() - started + (session_s or 0), 3)
    if "gate_s" in steps:
        print(timings_line(request.args.batch_id, steps), flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    request = prepare(argv)
    if isinstance(request, int):
        return request
    started = time.monotonic()
    gate.preload_gx()  # Great Expectations' import runs while the JVM starts
    spark = batch.spark_session(f"{PROG} {request.args.batch_id}")
    session_s = round(time.monotonic() - started, 3)
    try:
        return run_in_session(spark, request, session_s)
    finally:
        spark.stop()
