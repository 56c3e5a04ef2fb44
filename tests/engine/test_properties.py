"""The main correctness proof: the Spark engine gives the reference model's outputs, message by
message, on random multi-batch streams (see scenarios.py for what they contain).

Two levels:
- the streaming kernel against the model, pure Python, hundreds of streams;
- the whole Spark engine (reading, ordering, units, decisions, snapshot carried through the
  warehouse, re-runs and invalidation) against the model, fewer but larger streams, because every
  batch is a real Spark run.
"""

from __future__ import annotations

import shutil

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgdedup import reference_model as model
from msgdedup.config import parse_settings
from msgdedup.engine import kernel
from msgdedup.engine.batch import run_batch
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.engine.warehouse import Warehouse
from msgdedup.reference_model import RawLine, ReferenceModel

from tests.engine.scenarios import CONFIGS, batch_files, operations
from tests.engine.support import model_view, outcome_view, write_batch

BATCH_IDS = [f"2026-11-21T{h:02d}" for h in range(24)]


# -- kernel vs model (fast) ------------------------------------------------------------------------
def _kernel_verdicts(lines: list[RawLine], config: dict) -> dict:
    """Feed the kernel the batch in the model's unit order (its parse, arrival order, message-id
    rule and units) and collect the kernel's verdicts."""
    settings_ = parse_settings(config)
    checked = []
    for line in lines:
        try:
            message = model.parse_line(line.raw)
        except model.InvalidLine:
            continue
        ck = model.cache_key(message.address, message.properties, settings_)
        checked.append(model.Checked(message, line, ck.cache if ck else None, ck.key if ck else None))
    checked.sort(key=lambda c: c.arrival)
    seen, messages = set(), []
    for c in checked:
        if c.message.message_id not in seen:
            seen.add(c.message.message_id)
            messages.append(c)
    rows = [
        {"phase": kernel.MESSAGE_PHASE, "row_id": i, "message_id": c.message.message_id,
         "txn_id": c.message.txn_id, "address": c.message.address, "cache": c.cache,
         "dedup_key": c.key, "cache_seq": None, "accepted_batch_id": None}
        for i, c in enumerate(unit_member for unit in model._units(messages) for unit_member in unit)
    ]
    by_row = {r["row_id"]: r["message_id"] for r in rows}
    stream = [pa.RecordBatch.from_pylist(rows[i:i + 7]) for i in range(0, len(rows), 7)] if rows else []
    verdicts = {}
    for out in kernel.decide(stream, settings_, "b", {}):
        for r in out.to_pylist():
            if r["record_type"] == kernel.VERDICT:
                verdicts[by_row[r["row_id"]]] = (r["outcome"] if r["outcome"] == kernel.DELIVERED else r["reason"],
                                                 r["duplicate_of"], r["cache_seq"])
    return verdicts


@settings(max_examples=300, deadline=None)
@given(files=batch_files(0), config_index=st.integers(0, len(CONFIGS) - 1))
def test_kernel_decides_like_the_model(tmp_path_factory, files, config_index):
    directory = tmp_path_factory.mktemp("k")
    lines = write_batch(directory, files)
    expected = ReferenceModel().run_batch("b", lines, parse_settings(CONFIGS[config_index]))
    want = {r["message_id"]: ("delivered", None, r["cache_seq"]) for r in expected.delivered}
    want.update({r["message_id"]: (r["reason"], r["duplicate_of"], None) for r in expected.dropped})
    assert _kernel_verdicts(lines, CONFIGS[config_index]) == want


# -- engine vs model (real Spark) -------------------------------------------------------------------
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=operations(max_batches=3, max_runs=4))
def test_engine_matches_the_model_on_multi_batch_streams(spark, tmp_path_factory, scenario):
    batches, runs = scenario
    root = tmp_path_factory.mktemp("scenario")
    warehouse = root / "wh"
    raw = [write_batch(root / f"raw{b}", files) for b, files in enumerate(batches)]
    oracle = ReferenceModel()
    for b, config_index in runs:
        batch_id = BATCH_IDS[b]
        settings_ = parse_settings(CONFIGS[config_index])
        expected = oracle.run_batch(batch_id, raw[b], settings_)
        run_batch(spark, str(root / f"raw{b}"), str(warehouse), batch_id, settings_, invalidate_later=True)
        assert outcome_view(warehouse, batch_id) == model_view(expected), f"batch {batch_id} (run {b}, config {config_index})"
        committed = Warehouse(HadoopFS(spark), str(warehouse)).committed_batches()
        assert committed == sorted(oracle.committed), "committed history differs from the model"
    shutil.rmtree(root, ignore_errors=True)
