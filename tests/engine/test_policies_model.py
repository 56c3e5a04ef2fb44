"""The policies of docs/semantics.md §8 on the reference model: each worked example of the spec is
a test here, and so is every choice the spec makes where the seed is silent. Pure Python."""

from __future__ import annotations

import pytest

from msgdedup.config import ConfigError, parse_settings
from msgdedup.reference_model import ReferenceModel

from tests.engine.support import message, write_batch

T0 = 1795237200_000_000  # 2026-11-21T05:00:00Z in µs: ``at`` of support.message counts from here


def run(tmp_path, batches, settings, model=None):
    """Run ``batches`` (lists of envelopes) in order; return the model and each batch's result."""
    model = model or ReferenceModel()
    results = []
    for index, envelopes in enumerate(batches):
        batch_id = f"2026-11-21T{len(model.committed) + 5:02d}"
        lines = write_batch(tmp_path / f"raw{batch_id}-{index}", {"part-0.jsonl": envelopes})
        results.append(model.run_batch(batch_id, lines, settings))
    return model, results


def outcomes(*results) -> dict:
    got = {}
    for result in results:
        got.update({r["message_id"]: ("delivered", None) for r in result.delivered})
        got.update({r["message_id"]: (r["reason"], r["duplicate_of"]) for r in result.dropped})
    return got


def queues(result, cache) -> dict:
    """An Apama cache as the spec draws it: each sender's queue and the shared time queue."""
    drawn: dict = {}
    for e in result.snapshot_entries():
        if e["cache"] == cache:
            where = "shared" if e["queue"] == "shared" else e["source_id"]
            drawn.setdefault(where, []).append((e["dedup_key"], (e["received_at_us"] - T0) // 1_000_000))
    return drawn


def keys(result, cache) -> list:
    rows = sorted((e for e in result.snapshot_entries() if e["cache"] == cache), key=lambda e: e["cache_seq"])
    return [(e["dedup_key"], (e["received_at_us"] - T0) // 1_000_000) if "received_at_us" in e else e["dedup_key"]
            for e in rows]


# -- §8.2 worked example: Apama ---------------------------------------------------------------------
APAMA = parse_settings({"address_settings": {"jms": {"policy": "apama", "per_source_window": 2, "expiry_seconds": 10}}})

APAMA_EXAMPLE = [
    message("m1", "jms", 0, key="a1", source_id="A"),
    message("m2", "jms", 1, key="a2", source_id="A"),
    message("m3", "jms", 2, key="b1", source_id="B"),
    message("m4", "jms", 3, key="a3", source_id="A"),
    message("m5", "jms", 4, key="a1", source_id="A"),
    message("m6", "jms", 5, key="a2", source_id="A"),
    message("m7", "jms", 20, key="a4", source_id="A"),
    message("m8", "jms", 21, key="a5", source_id="A"),
    message("m9", "jms", 22, key="a6", source_id="A"),
    message("m10", "jms", 23, key="a1", source_id="C"),
    message("m11", "jms", 24, key="b1", source_id="B"),
    message("m12", "jms", 25, key="b1", source_id="B"),
    message("m13", "jms", 26, key="n1"),
    message("m14", "jms", 27, key="a4", source_id="B", txn="T1"),
    message("m15", "jms", 28, key="b9", source_id="B", txn="T1"),
]
APAMA_OUTCOME = {
    "m1": ("delivered", None), "m2": ("delivered", None), "m3": ("delivered", None),
    "m4": ("delivered", None), "m5": ("duplicate", "m1"), "m6": ("duplicate", "m2"),
    "m7": ("delivered", None), "m8": ("delivered", None), "m9": ("delivered", None),
    "m10": ("delivered", None), "m11": ("duplicate", "m3"), "m12": ("duplicate", "m3"),
    "m13": ("delivered", None), "m14": ("duplicate", "m7"), "m15": ("transaction_rejected", "m14"),
}


def test_apama_worked_example(tmp_path):
    _, (result,) = run(tmp_path, [APAMA_EXAMPLE], APAMA)
    assert outcomes(result) == APAMA_OUTCOME
    assert queues(result, "jms") == {
        "A": [("a5", 21), ("a6", 22)],
        "C": [("a1", 23)],
        None: [("n1", 26)],
        "shared": [("a4", 20), ("b1", 24)],
    }


def test_apama_worked_example_step_by_step(tmp_path):
    """The 'queues after' column of the spec's table, row by row."""
    expected_after = {
        4: {"A": [("a2", 1), ("a3", 3)], "B": [("b1", 2)], "shared": [("a1", 0)]},
        6: {"A": [("a3", 3)], "B": [("b1", 2)], "shared": [("a1", 0), ("a2", 5)]},
        9: {"A": [("a5", 21), ("a6", 22)], "B": [("b1", 2)], "shared": [("a4", 20)]},
        11: {"A": [("a5", 21), ("a6", 22)], "C": [("a1", 23)], "shared": [("a4", 20), ("b1", 24)]},
    }
    for rows, drawn in expected_after.items():
        _, (result,) = run(tmp_path / str(rows), [APAMA_EXAMPLE[:rows]], APAMA)
        assert queues(result, "jms") == drawn, f"after row {rows}"


# -- §8.3 worked example: time window ---------------------------------------------------------------
TIME = parse_settings({"address_settings": {
    "nats": {"policy": "time", "duplicate_window": "PT10S", "id_cache_size": 3}}})

TIME_BATCH_1 = [
    message("m1", "nats", 0, key="x"),
    message("m2", "nats", 5, key="x"),
    message("m3", "nats", 10, key="x"),
    message("m4", "nats", 11, key="x"),
    message("m5", "nats", 12, key="y"),
    message("m6", "nats", 13, key="z"),
    message("m7", "nats", 14, key="w"),
    message("m8", "nats", 15, key="x"),
    message("m9", "nats", 16, key="w", txn="T1"),
    message("m10", "b", 17, key="q", txn="T1"),
]
TIME_BATCH_2 = [
    message("m11", "nats", 3, key="w"),
    message("m12", "nats", 4, key="v"),
    message("m13", "nats", 20, key="z"),
]
TIME_OUTCOME = {
    "m1": ("delivered", None), "m2": ("duplicate", "m1"), "m3": ("duplicate", "m1"),
    "m4": ("delivered", None), "m5": ("delivered", None), "m6": ("delivered", None),
    "m7": ("delivered", None), "m8": ("delivered", None), "m9": ("duplicate", "m7"),
    "m10": ("transaction_rejected", "m9"),
    "m11": ("duplicate", "m7"), "m12": ("delivered", None), "m13": ("delivered", None),
}


def test_time_worked_example(tmp_path):
    _, (first, second) = run(tmp_path, [TIME_BATCH_1, TIME_BATCH_2], TIME)
    assert outcomes(first, second) == TIME_OUTCOME
    assert keys(first, "nats") == [("z", 13), ("w", 14), ("x", 15)]
    assert keys(first, "b") == []
    # m11 and m12 come from a clock that went back: the cache's time stays at 15 (§8.4), so w@14 is
    # still in the window and v enters at 15; m13 at 20 finds z@13 gone... by count (cap 3), not time
    assert keys(second, "nats") == [("x", 15), ("v", 15), ("z", 20)]


def test_time_window_is_measured_from_the_acceptance_across_batches(tmp_path):
    settings = parse_settings({"address_settings": {"#": {"policy": "time", "duplicate_window": 60}}})
    _, (first, second) = run(tmp_path, [
        [message("m1", "a", 0, key="k")],
        [message("m2", "a", 60, key="k"), message("m3", "a", 61, key="k")],
    ], settings)
    assert outcomes(first, second) == {"m1": ("delivered", None), "m2": ("duplicate", "m1"),
                                       "m3": ("delivered", None)}


# -- §8.1 worked example: domains --------------------------------------------------------------------
DOMAINS = parse_settings({"address_settings": {
    "orders.eu": {"domain": "orders", "id_cache_size": 3},
    "orders.us": {"domain": "orders", "id_cache_size": 3},
}})


def test_domain_worked_example(tmp_path):
    _, (result,) = run(tmp_path, [[
        message("m1", "orders.eu", 1, key="o1"),
        message("m2", "orders.us", 2, key="o1"),
        message("m3", "billing", 3, key="o1"),
        message("m4", "orders.us", 4, bridge="o1"),
        message("m5", "orders.eu", 5, bridge="o1"),
    ]], DOMAINS)
    assert outcomes(result) == {"m1": ("delivered", None), "m2": ("duplicate", "m1"), "m3": ("delivered", None),
                                "m4": ("delivered", None), "m5": ("duplicate", "m4")}
    assert {r["message_id"]: r["cache"] for r in result.delivered} == {
        "m1": "orders", "m3": "billing", "m4": "BRIDGE.orders"}


def test_a_domain_spans_policies_other_than_count(tmp_path):
    settings = parse_settings({"address_settings": {
        "jms.*": {"policy": "apama", "domain": "jms", "per_source_window": 1, "expiry_seconds": 0}}})
    _, (result,) = run(tmp_path, [[
        message("m1", "jms.q1", 1, key="k", source_id="A"),
        message("m2", "jms.q2", 2, key="k", source_id="B"),
    ]], settings)
    assert outcomes(result) == {"m1": ("delivered", None), "m2": ("duplicate", "m1")}


# -- §8.2 choices where the seed is silent ------------------------------------------------------------
def test_a_hit_in_the_shared_queue_changes_nothing(tmp_path):
    """Rows 5 and 12 of the example: no refresh, no move, however often the id is resent."""
    _, (result,) = run(tmp_path, [APAMA_EXAMPLE[:4] + [
        message("r1", "jms", 4, key="a1", source_id="A"),
        message("r2", "jms", 5, key="a1", source_id="B"),
    ]], APAMA)
    assert queues(result, "jms")["shared"] == [("a1", 0)]


def test_a_hit_in_another_senders_queue_changes_nothing(tmp_path):
    _, (result,) = run(tmp_path, [[
        message("m1", "jms", 0, key="k", source_id="A"),
        message("m2", "jms", 1, key="k", source_id="B"),
    ]], APAMA)
    assert outcomes(result)["m2"] == ("duplicate", "m1")
    assert queues(result, "jms") == {"A": [("k", 0)]}


def test_a_rejected_transaction_moves_no_id(tmp_path):
    """The sender's own resend moves its id to the time queue, but not inside a transaction that
    is dropped: a rejected transaction changes no cache (§4)."""
    _, (result,) = run(tmp_path, [[
        message("m1", "jms", 0, key="k", source_id="A"),
        message("m2", "jms", 1, key="k", source_id="A", txn="T"),
    ]], APAMA)
    assert outcomes(result)["m2"] == ("duplicate", "m1")
    assert queues(result, "jms") == {"A": [("k", 0)]}


def test_both_apama_limits_at_zero_is_a_config_error():
    with pytest.raises(ConfigError, match="per_source_window and expiry_seconds are both 0"):
        parse_settings({"address_settings": {"#": {"policy": "apama", "per_source_window": 0,
                                                   "expiry_seconds": 0}}})


def test_no_expiry_keeps_exactly_the_per_sender_windows(tmp_path):
    """expiry_seconds 0: an id pushed out of its sender's queue is forgotten at once."""
    settings = parse_settings({"address_settings": {"#": {"policy": "apama", "per_source_window": 1,
                                                          "expiry_seconds": 0}}})
    _, (result,) = run(tmp_path, [[
        message("m1", "q", 0, key="k1", source_id="A"),
        message("m2", "q", 1, key="k2", source_id="A"),
        message("m3", "q", 2, key="k1", source_id="A"),
    ]], settings)
    assert outcomes(result)["m3"] == ("delivered", None)


def test_no_per_sender_queues_is_a_shared_time_window(tmp_path):
    settings = parse_settings({"address_settings": {"#": {"policy": "apama", "per_source_window": 0,
                                                          "expiry_seconds": 10}}})
    _, (result,) = run(tmp_path, [[
        message("m1", "q", 0, key="k1", source_id="A"),
        message("m2", "q", 10, key="k1", source_id="B"),
        message("m3", "q", 11, key="k2", source_id="B"),
        message("m4", "q", 12, key="k1", source_id="A"),
    ]], settings)
    assert outcomes(result) == {"m1": ("delivered", None), "m2": ("duplicate", "m1"),
                                "m3": ("delivered", None), "m4": ("delivered", None)}


def test_a_failed_sender_coming_back_hours_later_is_caught(tmp_path):
    """The seed's reason for per-sender queues: a busy sender cannot push a quiet one's ids out."""
    busy = [message(f"b{i}", "jms", 10 + i, key=f"busy{i}", source_id="BUSY") for i in range(50)]
    _, results = run(tmp_path, [
        [message("q1", "jms", 0, key="quiet1", source_id="QUIET")] + busy,
        [message("q1-again", "jms", 3599, key="quiet1", source_id="QUIET")],
    ], APAMA)
    assert outcomes(*results)["q1-again"] == ("duplicate", "q1")


def test_a_clock_going_back_across_batches(tmp_path):
    """§8.4: ids accepted from an earlier received_at enter at the cache's time, so they are not
    expired at once by newer ids already in the time queue."""
    settings = parse_settings({"address_settings": {"#": {"policy": "apama", "per_source_window": 0,
                                                          "expiry_seconds": 10}}})
    _, (first, second) = run(tmp_path, [
        [message("m1", "q", 100, key="k1")],
        [message("m2", "q", 5, key="k2"), message("m3", "q", 6, key="k2")],
    ], settings)
    assert outcomes(first, second)["m3"] == ("duplicate", "m2")
    assert queues(second, "q") == {"shared": [("k1", 100), ("k2", 100)]}


# -- §8.5 config changes between batches -----------------------------------------------------------
def _apama(per_source, expiry):
    return parse_settings({"address_settings": {"q": {"policy": "apama", "per_source_window": per_source,
                                                      "expiry_seconds": expiry}}})


def test_shrinking_a_per_sender_window_moves_the_oldest_to_the_time_queue(tmp_path):
    model, _ = run(tmp_path, [[message(f"m{i}", "q", i, key=f"k{i}", source_id="A") for i in range(4)]],
                   _apama(4, 1))
    _, (after,) = run(tmp_path / "2", [[message("late", "q", 10, key="z", source_id="B")]], _apama(2, 1), model)
    # k0 (0 s) and k1 (1 s) move to the time queue whose newest is k1: k0 is 1 s older, kept
    assert queues(after, "q") == {"A": [("k2", 2), ("k3", 3)], "B": [("z", 10)], "shared": [("k0", 0), ("k1", 1)]}


def test_shortening_an_expiry_drops_what_falls_out(tmp_path):
    model, _ = run(tmp_path, [[message(f"m{i}", "q", 10 * i, key=f"k{i}") for i in range(4)]], _apama(0, 60))
    _, (after,) = run(tmp_path / "2", [[]], _apama(0, 15), model)
    assert queues(after, "q") == {"shared": [("k2", 20), ("k3", 30)]}


def test_shortening_a_time_window_drops_what_falls_out(tmp_path):
    def window(seconds, cap=None):
        entry = {"policy": "time", "duplicate_window": seconds}
        if cap:
            entry["id_cache_size"] = cap
        return parse_settings({"address_settings": {"a": entry}})
    model, _ = run(tmp_path, [[message(f"m{i}", "a", 10 * i, key=f"k{i}") for i in range(5)]], window(60))
    _, (after,) = run(tmp_path / "2", [[]], window(25), model)
    assert keys(after, "a") == [("k2", 20), ("k3", 30), ("k4", 40)]
    _, (capped,) = run(tmp_path / "3", [[]], window(25, cap=1), model)
    assert keys(capped, "a") == [("k4", 40)]


def test_switching_policy_starts_the_cache_empty_with_its_counter(tmp_path):
    model, (first,) = run(tmp_path, [[message("m1", "a", 0, key="k"), message("m2", "a", 1, key="j")]],
                          parse_settings({"address_settings": {"a": {"id_cache_size": 5}}}))
    _, (second,) = run(tmp_path / "2", [[message("m3", "a", 2, key="k")]],
                       parse_settings({"address_settings": {"a": {"policy": "time"}}}), model)
    assert outcomes(second) == {"m3": ("delivered", None)}
    assert [r["cache_seq"] for r in second.delivered] == [3]
    assert keys(second, "a") == [("k", 2)]


def test_moving_an_address_to_another_domain_leaves_its_old_cache_as_it_was(tmp_path):
    model, (first,) = run(tmp_path, [[message("m1", "a", 0, key="k")]], parse_settings(None))
    moved = parse_settings({"address_settings": {"a": {"domain": "d"}}})
    _, (second,) = run(tmp_path / "2", [[message("m2", "a", 1, key="k")]], moved, model)
    assert outcomes(second) == {"m2": ("delivered", None)}
    assert {e["cache"] for e in second.snapshot_entries()} == {"a", "d"}
    _, (third,) = run(tmp_path / "3", [[message("m3", "a", 2, key="k")]], parse_settings(None), model)
    assert outcomes(third) == {"m3": ("duplicate", "m1")}


# -- the spec's config examples are valid configs ------------------------------------------------------
def test_the_yaml_examples_of_the_spec_parse():
    import re
    from pathlib import Path

    import yaml

    text = (Path(__file__).parents[2] / "docs" / "semantics.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2
    for block in blocks:
        parse_settings(yaml.safe_load(block))
    example = parse_settings(yaml.safe_load(blocks[0]))
    assert example.setting_for("jms.q").policy == "apama" and example.domain("orders.us") == "orders"
    assert example.setting_for("sqs.q").duplicate_window_us == 300_000_000
    copied = parse_settings(yaml.safe_load(blocks[1])).setting_for("orders")
    assert (copied.per_source_window, copied.expiry_seconds, copied.domain) == (500, 300, "orders-all")


def test_apama_worked_example_row_8(tmp_path):
    """The shared queue is ordered by instant, not by when keys moved into it."""
    _, (result,) = run(tmp_path, [APAMA_EXAMPLE[:8]], APAMA)
    assert queues(result, "jms") == {"A": [("a4", 20), ("a5", 21)], "B": [("b1", 2)],
                                     "shared": [("a1", 0), ("a3", 3), ("a2", 5)]}


def test_a_domain_some_addresses_leave_keeps_the_window_of_those_that_stay(tmp_path):
    before = parse_settings({"address_settings": {"a": {"domain": "d", "id_cache_size": 5},
                                                  "b": {"domain": "d", "id_cache_size": 5}}})
    after = parse_settings({"address_settings": {"a": {"domain": "e"}, "b": {"domain": "d", "id_cache_size": 1}}})
    model, _ = run(tmp_path, [[message("m1", "b", 0, key="k1"), message("m2", "a", 1, key="k2")]], before)
    _, (second,) = run(tmp_path / "2", [[]], after, model)
    assert [e["dedup_key"] for e in second.snapshot_entries() if e["cache"] == "d"] == ["k2"]
