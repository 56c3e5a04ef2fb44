"""Property tests of the policies of docs/semantics.md §8 on the reference model (pure Python).

- the time window against a second, history-based reading of its definition (no queue, no
  pruning, every acceptance kept), across batch boundaries and clocks that go back;
- Apama's per-sender promise (a sender's first resend of one of its last N ids is always caught)
  and the bounds of its queues;
- a stream cut into batches gives the outcome of the whole stream in one batch, for every policy
  and for mixes: the snapshot carries all a policy needs;
- a re-run leaves later batches standing; a config change applies the documented rules.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from msgdedup.config import parse_settings
from msgdedup.reference_model import ReferenceModel

from tests.engine.support import message, write_batch

SOURCES = [None, "A", "B", "C"]
KEYS = ["k0", "k1", "k2", "k3", "k4"]
US = 1_000_000


def _run_batches(tmp_path_factory, batches, config, model=None):
    model = model or ReferenceModel()
    directory = tmp_path_factory.mktemp("p")
    results = []
    for index, envelopes in enumerate(batches):
        batch_id = f"2026-11-21T{len(model.committed):02d}"
        lines = write_batch(directory / str(index), {"part-0.jsonl": envelopes})
        results.append(model.run_batch(batch_id, lines, config))
    return model, results


def _outcomes(results) -> dict:
    got = {}
    for result in results:
        got.update({r["message_id"]: ("delivered", None, r["cache_seq"])
                    for r in result.delivered})
        got.update({r["message_id"]: (r["reason"], r["duplicate_of"], None) for r in result.dropped})
    return got


@st.composite
def timed_batches(draw, max_batches=3, transactions=False, addresses=("a",), go_back=True):
    """Batches of envelopes in arrival order (times never decrease inside a batch; between batches
    they may go back when ``go_back``), unique message ids, optional transactions kept inside a
    batch."""
    batches, clock, counter = [], draw(st.integers(0, 30)), 0
    for b in range(draw(st.integers(1, max_batches))):
        if b and go_back:
            clock = max(0, clock - draw(st.sampled_from([0, 0, 3, 40])))
        envelopes = []
        for _ in range(draw(st.integers(0, 14))):
            clock = min(clock + draw(st.sampled_from([0, 1, 2, 5, 11])), 3599)
            counter += 1
            kind = draw(st.sampled_from(["key"] * 6 + ["none", "bridge"]))
            extra = {}
            source = draw(st.sampled_from(SOURCES))
            if source is not None:
                extra["source_id"] = source
            if transactions and draw(st.integers(0, 4)) == 0:
                extra["txn"] = f"T{b}-{draw(st.integers(0, 2))}"
            envelopes.append(message(
                f"m{counter}", draw(st.sampled_from(addresses)), clock,
                key=draw(st.sampled_from(KEYS)) if kind == "key" else None,
                bridge=draw(st.sampled_from(KEYS)) if kind == "bridge" else None, **extra))
        batches.append(envelopes)
    return batches


# -- time window: the queue equals the definition read over the whole history ---------------------
@settings(max_examples=80, deadline=None)
@given(batches=timed_batches(), window=st.integers(1, 20), cap=st.one_of(st.none(), st.integers(1, 4)))
def test_time_window_is_its_definition(tmp_path_factory, batches, window, cap):
    entry = {"policy": "time", "duplicate_window": window}
    if cap is not None:
        entry["id_cache_size"] = cap
    _, results = _run_batches(tmp_path_factory, batches, parse_settings({"address_settings": {"#": entry}}))

    # §8.3/§8.4 read literally: every acceptance ever, with the cache's time when it happened
    history: dict[str, list] = {}   # cache -> [(key, instant, seq, message_id)]
    clocks: dict[str, int] = {}
    want = {}
    for envelopes in batches:
        for env in envelopes:
            props = env.get("properties", {})
            cache, key = (("BRIDGE.a", props["_AMQ_BRIDGE_DUP"]) if "_AMQ_BRIDGE_DUP" in props
                          else ("a", props["_AMQ_DUPL_ID"]) if "_AMQ_DUPL_ID" in props else (None, None))
            if cache is None:
                want[env["message_id"]] = ("delivered", None, None)
                continue
            at = _seconds(env["received_at"])
            now = max(at, clocks.get(cache, at))
            accepted = history.setdefault(cache, [])
            last_seq = accepted[-1][2] if accepted else 0
            remembered = [a for a in accepted if a[0] == key and now - a[1] <= window
                          and (cap is None or last_seq - a[2] < cap)]
            if remembered:
                want[env["message_id"]] = ("duplicate", remembered[-1][3], None)
            else:
                clocks[cache] = now
                accepted.append((key, now, last_seq + 1, env["message_id"]))
                want[env["message_id"]] = ("delivered", None, last_seq + 1)
    assert _outcomes(results) == want
    # and the snapshot stays within the window (and the cap), never the history
    for result in results:
        for cache in {e["cache"] for e in result.snapshot_entries()}:
            instants = [e["received_at_us"] for e in result.snapshot_entries() if e["cache"] == cache]
            assert max(instants) - min(instants) <= window * US
            assert cap is None or len(instants) <= cap


def _seconds(received_at: str) -> int:
    minutes, seconds = received_at[14:16], received_at[17:19]
    return int(minutes) * 60 + int(seconds)


# -- apama: the per-sender promise and the queue bounds ----------------------------------------------
APAMA_WINDOWS = st.tuples(st.integers(0, 3), st.integers(0, 15)).filter(lambda w: w != (0, 0))


@settings(max_examples=80, deadline=None)
@given(batches=timed_batches(), windows=APAMA_WINDOWS)
def test_apama_catches_a_senders_first_resend_of_its_last_ids(tmp_path_factory, batches, windows):
    per_source, expiry = windows
    config = parse_settings({"address_settings": {"#": {"policy": "apama", "per_source_window": per_source,
                                                        "expiry_seconds": expiry}}})
    _, results = _run_batches(tmp_path_factory, batches, config)
    got = _outcomes(results)

    # (cache, sender) -> its last ``per_source`` accepted keys, oldest first, with their message
    # ids; an id resent by the same sender leaves the sender's queue (the seed), and an id pushed
    # out never comes back, even when a resend makes room
    accepted: dict[tuple, list] = {}
    for envelopes in batches:
        for env in envelopes:
            props = env.get("properties", {})
            cache, key = (("BRIDGE.a", props["_AMQ_BRIDGE_DUP"]) if "_AMQ_BRIDGE_DUP" in props
                          else ("a", props["_AMQ_DUPL_ID"]) if "_AMQ_DUPL_ID" in props else (None, None))
            if cache is None:
                continue
            mine = accepted.setdefault((cache, env.get("source_id")), [])
            held = [mid for k, mid in mine if k == key]
            outcome = got[env["message_id"]]
            if held:
                assert outcome == ("duplicate", held[0], None), (env, mine)
                mine[:] = [(k, mid) for k, mid in mine if k != key]
            elif outcome[0] == "delivered" and per_source:
                mine.append((key, env["message_id"]))
                del mine[:-per_source]

    for result in results:
        for cache in {e["cache"] for e in result.snapshot_entries()}:
            rows = [e for e in result.snapshot_entries() if e["cache"] == cache]
            for source in SOURCES:
                assert len([e for e in rows if e["queue"] == "sender" and e["source_id"] == source]) <= per_source
            shared = [e["received_at_us"] for e in rows if e["queue"] == "shared"]
            assert not shared or max(shared) - min(shared) <= expiry * US
            assert expiry or not shared


# -- every policy, mixed: a stream cut into batches is the stream in one batch -------------------------
MIXED = st.builds(
    lambda count, window, cap, apama, domain_policy: parse_settings({"address_settings": {
        "c": {"id_cache_size": count},
        "t": {"policy": "time", "duplicate_window": window, **({"id_cache_size": cap} if cap else {})},
        "j": {"policy": "apama", "per_source_window": apama[0], "expiry_seconds": apama[1]},
        "d.*": {"domain": "d", **domain_policy},
    }}),
    st.integers(0, 3), st.integers(1, 15), st.one_of(st.none(), st.integers(1, 3)), APAMA_WINDOWS,
    st.sampled_from([{"id_cache_size": 2}, {"policy": "time", "duplicate_window": 6},
                     {"policy": "apama", "per_source_window": 1, "expiry_seconds": 4}]),
)


@settings(max_examples=60, deadline=None)
@given(batches=timed_batches(transactions=True, addresses=("c", "t", "j", "d.x", "d.y"), go_back=False),
       config=MIXED)
def test_a_stream_cut_into_batches_is_the_stream_in_one_batch(tmp_path_factory, batches, config):
    whole = [env for envelopes in batches for env in envelopes]
    _, (one,) = _run_batches(tmp_path_factory, [whole], config)
    _, cut = _run_batches(tmp_path_factory, batches, config)
    assert _outcomes(cut) == _outcomes([one])
    assert _final_state(cut[-1]) == _final_state(one)


def _final_state(result) -> list:
    return sorted(tuple(sorted((k, v) for k, v in e.items() if k != "accepted_batch_id"))
                  for e in result.snapshot_entries())


# -- re-runs and config changes -----------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(batches=timed_batches(max_batches=2, transactions=True, addresses=("c", "t", "j", "d.x", "d.y")),
       config=MIXED)
def test_a_rerun_is_identical_and_leaves_later_batches_standing(tmp_path_factory, batches, config):
    model, results = _run_batches(tmp_path_factory, batches + [[]], config)
    directory = tmp_path_factory.mktemp("rerun")
    again = model.run_batch(results[0].batch_id, write_batch(directory, {"part-0.jsonl": batches[0]}), config)
    assert _outcomes([again]) == _outcomes([results[0]])
    assert _final_state(again) == _final_state(results[0])
    assert sorted(model.committed) == [r.batch_id for r in results] and not model.stale


@settings(max_examples=60, deadline=None)
@given(batches=timed_batches(max_batches=1, addresses=("j",)), before=APAMA_WINDOWS, after=APAMA_WINDOWS)
def test_an_apama_config_change_applies_the_seeds_rules(tmp_path_factory, batches, before, after):
    def config(windows):
        return parse_settings({"address_settings": {"j": {"policy": "apama", "per_source_window": windows[0],
                                                          "expiry_seconds": windows[1]}}})
    model, (first,) = _run_batches(tmp_path_factory, batches, config(before))
    _, (second,) = _run_batches(tmp_path_factory, [[]], config(after), model)
    for cache in ("j", "BRIDGE.j"):
        old = [e for e in first.snapshot_entries() if e["cache"] == cache]
        new = [e for e in second.snapshot_entries() if e["cache"] == cache]
        for source in SOURCES:
            queue = [e["dedup_key"] for e in old if e["queue"] == "sender" and e["source_id"] == source]
            kept = [e["dedup_key"] for e in new if e["queue"] == "sender" and e["source_id"] == source]
            assert kept == (queue[-after[0]:] if after[0] else [])  # a sender keeps its newest ids
        moved = {e["cache_seq"] for e in old} - {e["cache_seq"] for e in new if e["queue"] == "sender"}
        shared = [e for e in new if e["queue"] == "shared"]
        assert {e["cache_seq"] for e in shared} <= moved  # the rest went through the time queue
        if shared:
            newest = max(e["received_at_us"] for e in shared)
            candidates = [e for e in old if e["cache_seq"] in moved]
            assert {e["cache_seq"] for e in shared} == {
                e["cache_seq"] for e in candidates if newest - e["received_at_us"] <= after[1] * US}


@settings(max_examples=60, deadline=None)
@given(batches=timed_batches(max_batches=1, addresses=("t",)), before=st.integers(1, 30), after=st.integers(1, 30))
def test_a_time_window_change_keeps_what_is_still_inside(tmp_path_factory, batches, before, after):
    def config(window):
        return parse_settings({"address_settings": {"t": {"policy": "time", "duplicate_window": window}}})
    model, (first,) = _run_batches(tmp_path_factory, batches, config(before))
    _, (second,) = _run_batches(tmp_path_factory, [[]], config(after), model)
    for cache in {e["cache"] for e in first.snapshot_entries()}:
        old = [e for e in first.snapshot_entries() if e["cache"] == cache]
        clock = max(e["received_at_us"] for e in old)
        assert [e for e in second.snapshot_entries() if e["cache"] == cache] == [
            e for e in old if clock - e["received_at_us"] <= after * US]


@settings(max_examples=60, deadline=None)
@given(batches=timed_batches(transactions=True, addresses=("c", "t", "j", "d.x", "d.y")),
       configs=st.lists(MIXED, min_size=3, max_size=3))
def test_after_any_config_change_every_cache_is_within_its_new_window(tmp_path_factory, batches, configs):
    """Config changes (windows, and policy switches of the domain 'd') between every two batches:
    each snapshot is within the windows of its batch's config, and re-running gives it again."""
    model, directory = ReferenceModel(), tmp_path_factory.mktemp("changes")
    for index, envelopes in enumerate(batches):
        config, batch_id = configs[index], f"2026-11-21T{index:02d}"
        lines = write_batch(directory / str(index), {"part-0.jsonl": envelopes})
        result = model.run_batch(batch_id, lines, config)
        for name, cache in result.caches.items():
            rows = [e for e in result.snapshot_entries() if e["cache"] == name]
            if not rows:
                continue
            setting = config.setting_for(rows[0]["address"])
            assert setting.policy == {"Cache": "count", "TimeCache": "time", "ApamaCache": "apama"}[
                type(cache).__name__]
            if setting.policy == "count":
                assert len(rows) <= setting.id_cache_size
            elif setting.policy == "time":
                instants = [e["received_at_us"] for e in rows]
                assert max(instants) - min(instants) <= setting.duplicate_window_us
                assert setting.id_cache_size is None or len(rows) <= setting.id_cache_size
            else:
                for source in SOURCES:
                    queue = [e for e in rows if e["queue"] == "sender" and e["source_id"] == source]
                    assert len(queue) <= setting.per_source_window
                shared = [e["received_at_us"] for e in rows if e["queue"] == "shared"]
                assert not shared or max(shared) - min(shared) <= setting.expiry_seconds * US
        again = model.run_batch(batch_id, lines, config)
        assert _outcomes([again]) == _outcomes([result]) and _final_state(again) == _final_state(result)
