"""Large, realistic raw batches for scale checks and benchmarks.

What makes dedup expensive is shaped like production: producer retries a few hundred messages
after the original, a trickle of far duplicates from earlier batches, transactions (5% of the
messages, 2-5 messages each, sometimes over two addresses), bridge resends, keyless messages,
optionally one hot address carrying half of the traffic, and 16 senders (``source_id``) plus
one that fails and comes back: it sends in the first 30% of the batch, goes silent, and in the
last 30% resends its last ids (what Apama's per-sender windows are for, semantics.md §8.2).
Lines are formatted with plain string templates (not json.dumps) so that ten million of them take
seconds, not minutes.
"""

from __future__ import annotations

import argparse
import os
import random
from dataclasses import dataclass
from pathlib import Path

HOUR_MS = 3_600_000
RETURNING_SENDER = "p-back"
RESENT = 500  # how many of its last ids the returning sender resends
BASE_EPOCH_MS = 1_795_219_200_000  # 2026-11-21T00:00:00Z


@dataclass(frozen=True)
class Workload:
    messages: int = 1_000_000
    addresses: int = 200
    hot_share: float = 0.0          # share of traffic on address 0
    retry_rate: float = 0.03        # producer retries, 50-500 messages later
    far_rate: float = 0.005         # duplicates of keys from the previous batch
    bridge_rate: float = 0.01       # bridge resends (their own cache)
    keyless_rate: float = 0.02
    txn_share: float = 0.05
    files: int = 8
    seed: int = 7
    returning_sender: bool = True   # a sender that fails and resends its last ids much later


def _address(rng: random.Random, w: Workload) -> str:
    if w.hot_share and rng.random() < w.hot_share:
        return "orders.hot"
    return f"orders.a{rng.randrange(w.addresses):03d}"


def write_batch(directory: Path, batch_index: int, w: Workload) -> int:
    """Write batch number ``batch_index`` (0-based) of a stream; returns the lines written."""
    rng = random.Random(w.seed * 1_000_003 + batch_index)
    directory.mkdir(parents=True, exist_ok=True)
    start = BASE_EPOCH_MS + batch_index * HOUR_MS
    step = HOUR_MS / max(w.messages, 1)
    recent: list[tuple[str, str]] = []   # (address, key) of the last ~1000 messages
    handles = [open(directory / f"part-{i:03d}.jsonl", "w", encoding="utf-8") for i in range(w.files)]
    txn_left, txn_id, txn_address = 0, None, None
    sent_before_failing: list[tuple[str, str]] = []  # the returning sender's last ids
    fails_at, returns_at = int(w.messages * 0.3), int(w.messages * 0.7)
    try:
        for i in range(w.messages):
            at = int(start + i * step)
            roll = rng.random()
            sender = f"p{i % 16}"
            returning = w.returning_sender and i % 17 == 0
            if returning and i >= returns_at and sent_before_failing:
                sender = RETURNING_SENDER  # back: resends what it sent before failing, oldest first
                address, key = sent_before_failing.pop(0)
            elif roll < w.retry_rate and len(recent) > 50:
                address, key = recent[-rng.randint(50, min(500, len(recent)))]
            elif roll < w.retry_rate + w.far_rate and batch_index > 0:
                address = _address(rng, w)
                key = f"b{batch_index - 1}-{rng.randrange(w.messages)}"
            else:
                address, key = _address(rng, w), f"b{batch_index}-{i}"
            if txn_left == 0 and rng.random() < w.txn_share / 3.5:
                txn_left, txn_id = rng.randint(2, 5), f"tx-{batch_index}-{i}"
                txn_address = address
            props = f'{{"_AMQ_DUPL_ID":"{key}"}}'
            kind = rng.random()
            if kind < w.keyless_rate:
                props = "{}"
            elif kind < w.keyless_rate + w.bridge_rate:
                props = f'{{"_AMQ_BRIDGE_DUP":"br-{key}"}}'
            txn = ""
            if txn_left:
                # most transactions stay on one address; some span two
                if rng.random() < 0.7:
                    address = txn_address
                txn = f',"txn_id":"{txn_id}"'
                txn_left -= 1
            if returning and i < fails_at:
                sender = RETURNING_SENDER
                sent_before_failing = (sent_before_failing + [(address, key)])[-RESENT:]
            recent.append((address, key))
            if len(recent) > 1000:
                del recent[:500]
            handles[i % w.files].write(
                f'{{"message_id":"ID:{batch_index}-{i}","address":"{address}","received_at":{at},'
                f'"properties":{props}{txn},"source_id":"{sender}","seq":{i},"body":"payload-{i:010d}"}}\n'
            )
    finally:
        for handle in handles:
            handle.close()
    (directory / "_SUCCESS").write_text("")
    return w.messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write large raw batches for scale checks and benchmarks.")
    parser.add_argument("--out", required=True, help="directory; batch k goes to <out>/batch-<k>")
    parser.add_argument("--messages", type=int, default=Workload.messages)
    parser.add_argument("--batches", type=int, default=1)
    parser.add_argument("--addresses", type=int, default=Workload.addresses)
    parser.add_argument("--hot-share", type=float, default=0.0)
    parser.add_argument("--files", type=int, default=Workload.files)
    parser.add_argument("--seed", type=int, default=Workload.seed)
    args = parser.parse_args(argv)
    w = Workload(messages=args.messages, addresses=args.addresses, hot_share=args.hot_share,
                 files=args.files, seed=args.seed)
    for k in range(args.batches):
        n = write_batch(Path(args.out) / f"batch-{k:03d}", k, w)
        print(f"wrote {n} messages to {os.path.join(args.out, f'batch-{k:03d}')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
