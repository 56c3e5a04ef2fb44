"""The window-miss audit of docs/semantics.md §9 on the reference model: its examples, its edges,
and a property against a brute-force reading of the definition. Pure Python."""

from __future__ import annotations

from hypothesis import given, settings as hsettings, strategies as st

from msgdedup.config import AUDIT_HORIZON_MULTIPLE, parse_settings
from msgdedup.reference_model import ReferenceModel, window_audit

from tests.engine.support import message, write_batch


def sized(size: int):
    """A count window with the audit on at its default horizon (``window_audit:`` with no keys)."""
    return parse_settings({"address_settings": {"#": {"id_cache_size": size}}, "window_audit": None})


def run(tmp_path, batches, settings):
    model, results = ReferenceModel(), []
    for index, envelopes in enumerate(batches):
        batch_id = f"2026-11-21T{index + 5:02d}"
        lines = write_batch(tmp_path / f"raw{index}", {"part-0.jsonl": envelopes})
        results.append(model.run_batch(batch_id, lines, settings))
    return results


def misses(result) -> list[tuple]:
    return [(m["message_id"], m["previous_message_id"], m["needed"], m["missed_by"]) for m in result.window_misses]


def test_a_resend_one_acceptance_too_late_is_a_miss_by_one(tmp_path):
    """§7's example, rows 1-7: m7 repeats x four acceptances after m1, with a window of 3."""
    stream = [message("m1", key="x", at=1), message("m4", key="y", at=4), message("m5", key="z", at=5),
              message("m6", key="w", at=6), message("m7", key="x", at=7)]
    [result] = run(tmp_path, [stream], sized(3))
    assert misses(result) == [("m7", "m1", 4, 1)]
    assert window_audit(result) == {"a": {"misses": 1, "max_missed_by": 1, "id_cache_size": 3,
                                          "recommended_id_cache_size": 4}}


def test_a_duplicate_inside_the_window_is_no_miss(tmp_path):
    [result] = run(tmp_path, [[message("m1", key="x", at=1), message("m2", key="x", at=2)]], sized(3))
    assert misses(result) == []
    assert window_audit(result)["a"] == {"misses": 0, "max_missed_by": 0, "id_cache_size": 3,
                                         "recommended_id_cache_size": 3}


def test_misses_carry_across_batches_with_the_batch_they_were_first_delivered_in(tmp_path):
    first = [message("m1", key="x", at=1), message("m2", key="y", at=2)]
    second = [message("m3", key="z", at=1), message("m4", key="x", at=2)]
    results = run(tmp_path, [first, second], sized(1))
    assert misses(results[1]) == [("m4", "m1", 3, 2)]
    assert results[1].window_misses[0]["previous_batch_id"] == "2026-11-21T05"


def test_a_transaction_is_looked_up_before_its_keys_enter(tmp_path):
    """L is the counter before the unit: d enters before x within T, yet x needed only 3."""
    stream = [message("m1", key="x", at=1), message("m2", key="y", at=2), message("m3", key="z", at=3),
              message("m4", key="d", at=4, txn="T"), message("m5", key="x", at=5, txn="T")]
    [result] = run(tmp_path, [stream], sized(2))
    assert misses(result) == [("m5", "m1", 3, 1)]


def test_a_rejected_transaction_holds_no_miss(tmp_path):
    stream = [message("m1", key="x", at=1), message("m2", key="y", at=2), message("m3", key="z", at=3),
              message("m4", key="x", at=4, txn="T"), message("m5", key="z", at=5, txn="T")]
    [result] = run(tmp_path, [stream], sized(2))
    assert {r["message_id"] for r in result.dropped} == {"m4", "m5"}
    assert misses(result) == []


def test_a_resend_beyond_the_horizon_is_not_counted(tmp_path):
    size = 2
    horizon = size * (1 + AUDIT_HORIZON_MULTIPLE)
    fillers = [message(f"f{i}", key=f"k{i}", at=2 + i) for i in range(horizon)]
    inside = run(tmp_path / "in", [[message("m1", key="x", at=1), *fillers[:horizon - 1],
                                    message("m2", key="x", at=100)]], sized(size))[0]
    assert misses(inside) == [("m2", "m1", horizon, horizon - size)]
    beyond = run(tmp_path / "out", [[message("m1", key="x", at=1), *fillers, message("m2", key="x", at=100)]],
                 sized(size))[0]
    assert misses(beyond) == []


def test_forgotten_at_the_end_of_a_batch(tmp_path):
    """Across batches the record keeps only what the horizon can still reach."""
    size = 1
    fillers = [message(f"f{i}", key=f"k{i}", at=2 + i) for i in range(size * (1 + AUDIT_HORIZON_MULTIPLE))]
    results = run(tmp_path, [[message("m1", key="x", at=1), *fillers], [message("m2", key="x", at=1)]], sized(size))
    assert misses(results[1]) == []
    assert all(e.key != "x" for e in results[1].caches["a"].left)


def test_the_recommendation_holds_99_percent_of_the_misses(tmp_path):
    # 100 misses of needed 2 and one of needed 5: 99% of 101 misses is 100, all of needed 2
    stream, at = [], 0
    for i in range(100):
        stream += [message(f"a{i}", key=f"x{i}", at=at), message(f"b{i}", key=f"y{i}", at=at + 1),
                   message(f"c{i}", key=f"x{i}", at=at + 2)]
        at += 3
    stream += [message("p", key="p", at=at), *[message(f"q{i}", key=f"q{i}", at=at + 1 + i) for i in range(4)],
               message("p2", key="p", at=at + 10)]
    [result] = run(tmp_path, [stream], sized(1))
    audit = window_audit(result)["a"]
    assert audit["misses"] == 101 and audit["max_missed_by"] == 4
    assert audit["recommended_id_cache_size"] == 2


def test_the_audit_changes_no_outcome_and_no_snapshot(tmp_path):
    stream = [message(f"m{i}", key=f"k{i % 5}", at=i) for i in range(30)]
    [result] = run(tmp_path, [stream], sized(3))
    assert len(result.window_misses) == 25  # every resend after the first five, each 5 apart
    assert {m["needed"] for m in result.window_misses} == {5}
    assert len(result.delivered) == 30 and not result.dropped
    assert [e["dedup_key"] for e in result.snapshot_entries()] == ["k2", "k3", "k4"]


# -- property: the definition read by brute force ---------------------------------------------------
@st.composite
def streams(draw):
    """Batches of single messages on two addresses with few keys, so resends come at all distances."""
    batches = draw(st.lists(st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 7)), max_size=25),
                            min_size=1, max_size=3))
    return [[message(f"b{b}m{i}", address, at=i, key=f"k{key}") for i, (address, key) in enumerate(batch)]
            for b, batch in enumerate(batches)]


@hsettings(max_examples=60, deadline=None)
@given(stream=streams(), size=st.integers(1, 4))
def test_misses_are_the_deliveries_of_a_key_accepted_within_the_horizon_but_outside_the_window(
        tmp_path_factory, stream, size):
    """Without transactions a unit is one message, so L = its own cache_seq - 1 and a miss is a
    delivery whose key was delivered before on its cache, more than ``size`` and at most
    ``size × (1 + multiple)`` acceptances earlier."""
    results = run(tmp_path_factory.mktemp("audit"), stream, sized(size))
    earlier: dict[tuple, int] = {}
    for result in results:
        expected = []
        for d in sorted(result.delivered, key=lambda d: (d["cache"], d["cache_seq"])):
            previous = earlier.get((d["cache"], d["dedup_key"]))
            needed = None if previous is None else d["cache_seq"] - previous
            if needed is not None and size < needed <= size * (1 + AUDIT_HORIZON_MULTIPLE):
                expected.append((d["message_id"], needed))
            earlier[(d["cache"], d["dedup_key"])] = d["cache_seq"]
        got = sorted((m["message_id"], m["needed"]) for m in result.window_misses)
        assert got == sorted(expected)


def test_a_key_a_shrink_dropped_stays_left_when_the_window_grows(tmp_path):
    """§5/§9: the window shrinks to 1 (x leaves), then grows to 4: x does not come back, so its
    resend is delivered, a miss the window as it is now would have caught (missed_by <= 0)."""
    model = ReferenceModel()
    first = write_batch(tmp_path / "r1", {"p.jsonl": [message("m1", key="x", at=1), message("m2", key="y", at=2)]})
    model.run_batch("2026-11-21T05", first, sized(1))
    second = write_batch(tmp_path / "r2", {"p.jsonl": [message("m3", key="x", at=1)]})
    result = model.run_batch("2026-11-21T06", second, sized(4))
    assert [r["message_id"] for r in result.delivered] == ["m3"]
    assert misses(result) == [("m3", "m1", 2, -2)]
    assert window_audit(result)["a"]["recommended_id_cache_size"] == 4


# -- the horizon is configurable; 0 turns the audit off -----------------------------------------------
def test_a_longer_horizon_reaches_further_and_zero_turns_the_audit_off(tmp_path):
    stream = [message("m1", key="x", at=1), *[message(f"f{i}", key=f"k{i}", at=2 + i) for i in range(20)],
              message("m2", key="x", at=50)]
    audited = {h: run(tmp_path / str(h), [stream], parse_settings(
        {"address_settings": {"#": {"id_cache_size": 2}}, "window_audit": {"horizon": h}}))[0] for h in (4, 10, 0)}
    unset = run(tmp_path / "unset", [stream], parse_settings({"address_settings": {"#": {"id_cache_size": 2}}}))[0]
    assert misses(audited[4]) == []  # needed 21 > 2 x (1 + 4)
    assert unset.audit_horizon == 0 and window_audit(unset) == {}, "off unless the config asks for it"
    assert misses(audited[10]) == [("m2", "m1", 21, 19)]
    assert misses(audited[0]) == [] and window_audit(audited[0]) == {}
    assert not audited[0].caches["a"].left
    def outcome(result):  # it never changes an outcome
        return [(r["message_id"], r["cache_seq"]) for r in result.delivered], result.dropped
    assert outcome(audited[0]) == outcome(audited[10])


# -- time windows: needed and missed_by in microseconds -------------------------------------------------
def timed(window: str, cap: int | None = None, horizon: int | None = None):
    entry = {"policy": "time", "duplicate_window": window, **({"id_cache_size": cap} if cap else {})}
    document = {"address_settings": {"#": entry}, "window_audit": None if horizon is None else {"horizon": horizon}}
    return parse_settings(document)


def test_a_time_window_miss_is_measured_in_time(tmp_path):
    """x comes back 15 s after it entered a 10 s window: needed 15 s, missed by 5 s."""
    stream = [message("m1", key="x", at=1), message("m2", key="y", at=5), message("m3", key="x", at=16)]
    [result] = run(tmp_path, [stream], timed("PT10S"))
    assert misses(result) == [("m3", "m1", 15_000_000, 5_000_000)]
    assert window_audit(result)["a"] == {"misses": 1, "max_missed_by_us": 5_000_000,
                                         "duplicate_window_us": 10_000_000,
                                         "recommended_duplicate_window_us": 15_000_000}


def test_a_time_window_key_still_queued_but_expired_is_a_miss(tmp_path):
    """Nothing was accepted between m1 and m2, so x is still queued when m2 looks it up 20 s later;
    it has expired all the same, and m2 is a miss."""
    [result] = run(tmp_path, [[message("m1", key="x", at=1), message("m2", key="x", at=21)]], timed("PT10S"))
    assert [r["message_id"] for r in result.delivered] == ["m1", "m2"]
    assert misses(result) == [("m2", "m1", 20_000_000, 10_000_000)]


def test_a_key_the_cap_evicted_needs_no_longer_window(tmp_path):
    """With a cap of 1, y evicts x within the window: the miss has missed_by <= 0 (the cap, not the
    window, let it through) and the recommended window is the current one."""
    stream = [message("m1", key="x", at=1), message("m2", key="y", at=2), message("m3", key="x", at=3)]
    [result] = run(tmp_path, [stream], timed("PT10S", cap=1))
    assert misses(result) == [("m3", "m1", 2_000_000, -8_000_000)]
    assert window_audit(result)["a"]["recommended_duplicate_window_us"] == 10_000_000


def test_a_time_window_remembers_for_its_reach_in_time(tmp_path):
    """Horizon 1 on a 10 s window: a key is remembered for 20 s after it entered."""
    inside = [message("m1", key="x", at=1), message("m2", key="y", at=15), message("m3", key="x", at=21)]
    beyond = [message("m1", key="x", at=1), message("m2", key="y", at=15), message("m3", key="x", at=22)]
    assert misses(run(tmp_path / "in", [inside], timed("PT10S", horizon=1))[0]) == [
        ("m3", "m1", 20_000_000, 10_000_000)]
    assert misses(run(tmp_path / "out", [beyond], timed("PT10S", horizon=1))[0]) == []


def test_a_time_window_record_is_forgotten_by_time_across_batches(tmp_path):
    first = [message("m1", key="x", at=1), message("m2", key="y", at=30)]
    second = [message("m3", key="z", at=45), message("m4", key="x", at=50)]
    results = run(tmp_path, [first, second], timed("PT10S", horizon=4))
    assert [e.key for e in results[0].caches["a"].left] == ["x"]
    assert misses(results[1]) == [("m4", "m1", 49_000_000, 39_000_000)]
    assert {e.key for e in results[1].caches["a"].left} == {"x", "y"}
    later = run(tmp_path / "late", [first, [message("m3", key="z", at=59 * 60)]], timed("PT10S", horizon=4))
    assert not later[1].caches["a"].left
