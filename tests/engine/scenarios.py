"""Hypothesis strategies: random multi-batch message streams that stress the semantics.

Small caches, a small key alphabet (collisions), few distinct timestamps (ties broken by file and
line), three time formats for one instant, transactions over several addresses, bridge ids,
keyless messages, numeric keys that equal string keys, repeated message ids, malformed lines,
config changes between batches, and re-runs of earlier batches.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

ADDRESSES = ["a", "b", "orders.eu", "orders.us"]
KEYS = ["k0", "k1", "k2", "k3", "k4", "7"]
CONFIGS = [
    {"address_settings": {"#": {"id_cache_size": 3}}, "window_audit": {}},  # §9: the audit on (4 windows)
    {"address_settings": {"#": {"id_cache_size": 2}, "orders.*": {"id_cache_size": 4}},
     "window_audit": {"horizon": 1}},
    {"address_settings": {"#": {"id_cache_size": 1}, "a": {"id_cache_size": 0}}},
    {"address_settings": {"#": {"id_cache_size": 5}, "orders.#": {"id_cache_size": 1}}, "window_audit": {}},
]
COUNT_CONFIGS = range(len(CONFIGS))
CONFIGS += [
    # §8: domains, time windows and Apama queues, mixed (times in a batch span 0-6 s)
    {"address_settings": {"#": {"policy": "time", "duplicate_window": 2, "id_cache_size": 3},
                          "orders.*": {"domain": "orders", "id_cache_size": 2}},
     "window_audit": {"horizon": 2}},
    {"address_settings": {"#": {"policy": "apama", "per_source_window": 2, "expiry_seconds": 3},
                          "orders.*": {"policy": "time", "duplicate_window": 4, "domain": "orders"}},
     "window_audit": {"horizon": 3}},
    {"address_settings": {"#": {"id_cache_size": 3}, "b": {"policy": "time", "duplicate_window": 1},
                          "orders.#": {"policy": "apama", "per_source_window": 1, "expiry_seconds": 2,
                                       "domain": "orders"}},
     "window_audit": {"horizon": 0}},  # §9: the audit off
    {"address_settings": {"#": {"policy": "apama", "per_source_window": 0, "expiry_seconds": 4},
                          "a": {"policy": "apama", "per_source_window": 3, "expiry_seconds": 0, "domain": "ab"},
                          "b": {"policy": "apama", "per_source_window": 3, "expiry_seconds": 0, "domain": "ab"}}},
    {"address_settings": {"#": {"id_cache_size": 2, "domain": "all"}}},
    # Apama and count caches, every address its own: the parse's census finds the keys and the
    # senders (batch._find_keys, unit_ranks.of_sequential)
    {"address_settings": {"#": {"policy": "apama", "per_source_window": 2, "expiry_seconds": 3},
                          "orders.#": {"id_cache_size": 2}},
     "window_audit": {"horizon": 2}},
]
POLICY_CONFIGS = range(len(COUNT_CONFIGS) - 1, len(CONFIGS))  # with one count config, to switch policies
MALFORMED = [
    b"{not json",
    b"",
    b"[1, 2]",
    b'{"message_id": "x", "address": "a"}',
    b'{"message_id": 5, "address": "a", "received_at": 0}',
    b'{"message_id": "y", "address": "a", "received_at": "2026-11-21T05:00:00"}',
    b'{"message_id": "z", "address": "a", "received_at": 1, "properties": {"_AMQ_DUPL_ID": true}}',
    b'{"message_id": "\xff\xfe", "address": "a", "received_at": 1}',
]


def _timestamp(second: int, style: int):
    """One instant in three spellings: they must order as the same time."""
    if style == 0:
        return f"2026-11-21T05:00:{second:02d}Z"
    if style == 1:
        return f"2026-11-21T06:00:{second:02d}+01:00"
    return 1795237200000 + second * 1000  # epoch milliseconds of 2026-11-21T05:00:00Z


@st.composite
def envelope(draw, batch: int, index: int, earlier_ids: list[str]):
    kind = draw(st.sampled_from(["message"] * 14 + ["malformed", "repeat_id"]))
    if kind == "malformed":
        return draw(st.sampled_from(MALFORMED))
    message_id = f"b{batch}-m{index}"
    if kind == "repeat_id" and earlier_ids:
        message_id = draw(st.sampled_from(earlier_ids))
    doc = {
        "message_id": message_id,
        "address": draw(st.sampled_from(ADDRESSES)),
        "received_at": _timestamp(draw(st.integers(0, 6)), draw(st.integers(0, 2))),
    }
    properties = {}
    key_kind = draw(st.sampled_from(["dupl"] * 6 + ["none", "bridge", "both", "number"]))
    if key_kind in ("dupl", "both"):
        properties["_AMQ_DUPL_ID"] = draw(st.sampled_from(KEYS))
    if key_kind in ("bridge", "both"):
        properties["_AMQ_BRIDGE_DUP"] = draw(st.sampled_from(KEYS))
    if key_kind == "number":
        properties["_AMQ_DUPL_ID"] = 7  # the same key as the string "7"
    if properties:
        doc["properties"] = properties
    source = draw(st.sampled_from([None, None, "S1", "S2"]))  # Apama's senders (§8.2)
    if source is not None:
        doc["source_id"] = source
    if draw(st.integers(0, 9)) < 4:
        # txn ids repeat across batches on purpose: a transaction is scoped to its batch
        doc["txn_id"] = f"T{draw(st.integers(0, 2))}"
    if draw(st.integers(0, 9)) == 0:
        doc["x_custom"] = {"nested": [1, 2]}
    return json.dumps(doc).encode()


@st.composite
def batch_files(draw, batch: int):
    count = draw(st.integers(0, 40))
    lines: list[bytes] = []
    ids: list[str] = []
    for index in range(count):
        line = draw(envelope(batch, index, ids))
        lines.append(line)
        try:
            ids.append(json.loads(line)["message_id"])
        except Exception:
            pass
    n_files = draw(st.integers(1, 3))
    files: dict[str, list[bytes]] = {f"part-{i}.jsonl": [] for i in range(n_files)}
    for line in lines:
        files[f"part-{draw(st.integers(0, n_files - 1))}.jsonl"].append(line)
    return files


@st.composite
def operations(draw, max_batches: int = 3, max_runs: int = 4, configs: range = range(len(CONFIGS))):
    """A list of (batch index, config index) runs: new batches in order, plus re-runs."""
    n_batches = draw(st.integers(1, max_batches))
    batches = [draw(batch_files(b)) for b in range(n_batches)]
    runs = [(b, draw(st.sampled_from(configs))) for b in range(n_batches)]
    extra = draw(st.integers(0, max_runs - n_batches)) if max_runs > n_batches else 0
    for _ in range(extra):
        position = draw(st.integers(1, len(runs)))
        runs.insert(position, (draw(st.integers(0, n_batches - 1)), draw(st.sampled_from(configs))))
    return batches, runs
