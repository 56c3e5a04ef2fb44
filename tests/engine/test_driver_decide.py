"""The driver's plan for small batches (engine/driver_decide.py) against the reference model, in
plain Python: hundreds of two-batch streams under every config, the second batch starting from
the model's snapshot of the first. The Spark engine runs the same plan in the engine-vs-model
tests (test_properties.py); this one reaches many more streams."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from msgdedup import reference_model as model
from msgdedup.config import APAMA, parse_settings
from msgdedup.engine import batch, driver_decide, manifest, transforms, windows
from msgdedup.engine.parsing import LINE_BITS
from msgdedup.reference_model import RawLine, ReferenceModel

from tests.engine.scenarios import CONFIGS, batch_files
from tests.engine.support import message, write_batch
from tests.engine.test_properties import _parent_caches

KEY_SCHEMA = pa.schema([("row_id", pa.int64()), ("message_id", pa.string()), ("address", pa.string()),
                        ("received_us", pa.int64()), ("txn_id", pa.string()), ("source_id", pa.string()),
                        ("cache", pa.string()), ("dedup_key", pa.string())])
def _keys(lines: list[RawLine], settings_) -> tuple[pa.Table, list[str]]:
    """The batch's valid lines as the engine collects them (transforms.KEY_COLUMNS), in file order."""
    files = sorted({line.source_file for line in lines})
    rows = []
    for line in lines:
        try:
            m = model.parse_line(line.raw)
        except model.InvalidLine:
            continue
        cache, key = model._cache_and_key(m, settings_)
        rows.append({"row_id": files.index(line.source_file) << LINE_BITS | line.line_number,
                     "message_id": m.message_id, "address": m.address, "received_us": m.received_at_us,
                     "txn_id": m.txn_id, "source_id": m.source_id, "cache": cache, "dedup_key": key})
    assert [c for c in KEY_SCHEMA.names] == transforms.KEY_COLUMNS
    return pa.Table.from_pylist(rows, schema=KEY_SCHEMA), files


def _decide(lines: list[RawLine], settings_, parent: model.BatchResult | None) -> driver_decide.Decision:
    return _decide_and_snapshot(lines, settings_, parent)[0]


def _decide_and_snapshot(lines: list[RawLine], settings_, parent: model.BatchResult | None
                         ) -> tuple[driver_decide.Decision, pa.Table]:
    """The batch's decision and its new ID cache (driver_decide.snapshot), as batch.py makes them."""
    keys, files = _keys(lines, settings_)
    keyed = {(a, c.startswith("BRIDGE.")) for a, c in zip(keys["address"].to_pylist(), keys["cache"].to_pylist(),
                                                          strict=True) if c is not None}
    caches = windows.resolve(settings_, _parent_caches(parent), keyed)
    apama = windows.of_policy(caches, APAMA)
    entries = snapshot = None
    if parent is not None:  # as batch.py reads them: the parent's carried entries, then those its keys meet
        snapshot = pa.Table.from_pylist(
            [{name: e.get(name) for name in transforms.SNAPSHOT_ARROW_SCHEMA.names} for e in parent.snapshot_entries()
             if caches[e["cache"]].carried], schema=transforms.SNAPSHOT_ARROW_SCHEMA)
        entries = driver_decide.entries_met(snapshot, driver_decide.batch_keys(keys), apama)
    decision = driver_decide.decide(keys, entries, caches, "b1", files)
    tally = batch._Tally(decision.tally)
    counters = manifest.cache_counters(caches, tally.accepted_per_cache(), tally.clocks(caches, decision.apama_clocks))
    return decision, driver_decide.snapshot(decision.verdicts, snapshot, apama, batch.snapshot_limits(counters),
                                            decision.apama_entries, "b1")


def _outcomes(decision: driver_decide.Decision) -> tuple[dict, list]:
    verdicts = decision.verdicts.to_pylist()
    by_id = {v["message_id"]: (v["reason"] or v["outcome"], v["duplicate_of"], v["cache_seq"])
             for v in verdicts if v["outcome"] != transforms.QUARANTINED}
    return by_id, sorted(v["error"] for v in verdicts if v["outcome"] == transforms.QUARANTINED)


@settings(max_examples=400, deadline=None)
@given(first=batch_files(0), second=batch_files(1), configs=st.tuples(*[st.integers(0, len(CONFIGS) - 1)] * 2))
def test_the_driver_decides_like_the_model(tmp_path_factory, first, second, configs):
    directory = tmp_path_factory.mktemp("d")
    oracle = ReferenceModel()
    parent = oracle.run_batch("b0", write_batch(directory / "0", first), parse_settings(CONFIGS[configs[0]]))
    lines = write_batch(directory / "1", second)
    settings_ = parse_settings(CONFIGS[configs[1]])
    expected = oracle.run_batch("b1", lines, settings_)
    decision, new_snapshot = _decide_and_snapshot(lines, settings_, parent)

    outcomes, copies = _outcomes(decision)
    want = {r["message_id"]: ("delivered", None, r["cache_seq"]) for r in expected.delivered}
    want.update({r["message_id"]: (r["reason"], r["duplicate_of"], None) for r in expected.dropped})
    assert outcomes == want
    assert copies == sorted(q["error"] for q in expected.quarantined if q["error"].startswith("duplicate message_id"))
    # the Apama caches' queues after the batch are the model's
    apama = {name for name, cache in expected.caches.items() if isinstance(cache, model.ApamaCache)}
    got = sorted((e["cache"], e["dedup_key"], e["cache_seq"], e["queue"]) for e in decision.apama_entries.to_pylist())
    assert got == sorted((e["cache"], e["dedup_key"], e["cache_seq"], e["queue"])
                         for e in expected.snapshot_entries() if e["cache"] in apama)
    # the tally counts every verdict once
    assert sum(r["count"] for r in decision.tally) == decision.verdicts.num_rows
    # the new ID cache, as the driver writes it, is the model's
    columns = transforms.SNAPSHOT_ARROW_SCHEMA.names
    assert sorted(new_snapshot.to_pylist(), key=repr) == sorted(
        ({name: e.get(name) for name in columns} for e in expected.snapshot_entries()), key=repr)


def test_a_transaction_is_one_unit_at_its_last_message(tmp_path):
    """A transaction holding a key seen before it is dropped whole at its last message; the
    copy of a message id is quarantined naming its first copy."""
    lines = write_batch(tmp_path, {"part-0.jsonl": [
        message("m1", key="k1", at=1),
        message("t1", key="k2", at=2, txn="T"),
        message("m2", key="k2", at=3),            # before T's last message: T is the later unit
        message("t2", key="k1", at=4, txn="T"),   # k1 already accepted: T is rejected whole
        message("m1", key="k9", at=5),            # a second line with message id m1
    ]})
    decision = _decide(lines, parse_settings({"address_settings": {"#": {"id_cache_size": 10}}}), None)
    outcomes, copies = _outcomes(decision)
    assert outcomes == {"m1": ("delivered", None, 1), "m2": ("delivered", None, 2),
                        "t1": ("duplicate", "m2", None), "t2": ("duplicate", "m1", None)}
    assert copies == [f"duplicate message_id 'm1' (first at {lines[0].source_file}:1)"]
    units = {v["row_id"]: v["unit_row"] for v in decision.verdicts.to_pylist()}
    assert units == {1: 1, lines[1].line_number: 4, 3: 3, 4: 4, 5: None}  # the copy has no unit
