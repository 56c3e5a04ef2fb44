"""The worked examples of docs/semantics.md §8 on the Spark engine: the outcomes the spec's tables
give, and, batch by batch, exactly the reference model's outputs (snapshot entries with their
instants, senders and queues, counters and cache times)."""

from __future__ import annotations

from msgdedup.config import parse_settings
from msgdedup.engine.batch import run_batch
from msgdedup.reference_model import ReferenceModel

from tests.engine.support import message, model_view, outcome_view, write_batch
from tests.engine.test_policies_model import (
    APAMA, APAMA_EXAMPLE, APAMA_OUTCOME, DOMAINS, TIME, TIME_BATCH_1, TIME_BATCH_2, TIME_OUTCOME,
)


def _run_both(spark, tmp_path, batches, settings) -> dict:
    """Each batch through the engine and the model; the views must be equal. Returns outcomes.
    ``settings``: every batch's, or a list of them, one per batch (a config change between batches)."""
    model, got = ReferenceModel(), {}
    per_batch = settings if isinstance(settings, list) else [settings] * len(batches)
    for index, (envelopes, batch_settings) in enumerate(zip(batches, per_batch, strict=True)):
        batch_id = f"2026-11-21T{index + 5:02d}"
        raw = tmp_path / f"raw{index}"
        lines = write_batch(raw, {"part-0.jsonl": envelopes})
        expected = model.run_batch(batch_id, lines, batch_settings)
        run_batch(spark, str(raw), str(tmp_path / "wh"), batch_id, batch_settings)
        view = outcome_view(tmp_path / "wh", batch_id)
        assert view == model_view(expected), f"batch {batch_id}"
        got.update({row[2]: ("delivered", None) for row in view["delivered"]})
        got.update({row[2]: (row[3], row[4]) for row in view["dropped"]})
    return got


def test_engine_gives_the_apama_worked_example(spark, tmp_path):
    assert _run_both(spark, tmp_path, [APAMA_EXAMPLE], APAMA) == APAMA_OUTCOME
    queues = {}
    for _cache, key, _seq, _mid, _batch, _instant, source, queue in outcome_view(
            tmp_path / "wh", "2026-11-21T05")["snapshot"]:
        queues.setdefault("shared" if queue == "shared" else source, set()).add(key)
    assert queues == {"A": {"a5", "a6"}, "C": {"a1"}, None: {"n1"}, "shared": {"a4", "b1"}}


def test_engine_gives_the_time_worked_example_across_a_clock_going_back(spark, tmp_path):
    assert _run_both(spark, tmp_path, [TIME_BATCH_1, TIME_BATCH_2], TIME) == TIME_OUTCOME


def test_engine_gives_the_domain_worked_example(spark, tmp_path):
    got = _run_both(spark, tmp_path, [[
        message("m1", "orders.eu", 1, key="o1"),
        message("m2", "orders.us", 2, key="o1"),
        message("m3", "billing", 3, key="o1"),
        message("m4", "orders.us", 4, bridge="o1"),
        message("m5", "orders.eu", 5, bridge="o1"),
    ]], DOMAINS)
    assert got == {"m1": ("delivered", None), "m2": ("duplicate", "m1"), "m3": ("delivered", None),
                   "m4": ("delivered", None), "m5": ("duplicate", "m4")}


def test_an_emptied_cache_whose_address_stops_checking_is_carried_unchanged(spark, tmp_path):
    """§8.5: a cache no address uses any more is carried unchanged, its window and time too. Here
    cache ``a`` is emptied by a switch from apama to time, then its address stops checking: it
    stays a time cache at its time. The engine once gave it the window of the address its
    entries had named before the switch (count, size 0), forgetting its time (found by the
    engine-vs-model property test)."""
    apama, time, off = (parse_settings({"address_settings": s}) for s in (
        {"#": {"policy": "apama", "per_source_window": 2, "expiry_seconds": 3}},
        {"#": {"policy": "time", "duplicate_window": 2}},
        {"#": {"id_cache_size": 1}, "a": {"id_cache_size": 0}}))
    _run_both(spark, tmp_path, [[message("m1", "a", 1, key="k1")],
                                [message("m2", "b", 2, key="k2")],
                                [message("m3", "b", 3, key="k3"), message("m4", "a", 4, key="k1")]],
              [apama, time, off])
    assert outcome_view(tmp_path / "wh", "2026-11-21T07")["counters"]["a"] == (1, 1795237201000000)
