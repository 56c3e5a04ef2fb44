"""The sample generator writes complete, realistic partitions (checked with the real envelope parser)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from msgdedup.envelope import InvalidLine, parse_line
from msgdedup.config import POLICIES, parse_settings
from msgdedup.sample_data import DEMO_ADDRESS_SETTINGS, main, write_partitions


def test_partitions_have_every_kind_of_trouble(tmp_path):
    start = datetime(2026, 11, 20, 0, tzinfo=timezone.utc)
    result = write_partitions(tmp_path, start, hours=12, seed=3, messages_per_hour=120)
    assert [p["batch_id"] for p in result["partitions"]] == [f"2026-11-20T{h:02d}" for h in range(12)]
    kinds = result["kinds"]
    for kind in ("producer_retry", "redelivery", "transaction_replayed", "bridge_duplicate", "keyless", "malformed"):
        assert kinds.get(kind, 0) > 0, kind

    valid, errors, dupl_ids, bridge_ids = 0, [], Counter(), Counter()
    txn_addresses: dict[str, set] = {}
    for p in result["partitions"]:
        pdir = tmp_path / f"dt=2026-11-20/hour={p['batch_id'][-2:]}"
        assert (pdir / "_SUCCESS").is_file()
        for f in sorted(pdir.glob("*.jsonl")):
            for raw in f.read_bytes().splitlines():
                try:
                    m = parse_line(raw)
                except InvalidLine as exc:
                    errors.append(str(exc))
                    continue
                valid += 1
                assert m.received_at_us // 3_600_000_000 * 3600 == int(
                    datetime.strptime(p["batch_id"], "%Y-%m-%dT%H").replace(tzinfo=timezone.utc).timestamp()
                ), "a message is in the partition of its hour"
                if "_AMQ_BRIDGE_DUP" in m.properties:
                    bridge_ids[m.properties["_AMQ_BRIDGE_DUP"]] += 1
                elif "_AMQ_DUPL_ID" in m.properties:
                    dupl_ids[(m.address, m.properties["_AMQ_DUPL_ID"])] += 1
                if m.txn_id:
                    txn_addresses.setdefault(m.txn_id, set()).add(m.address)
    assert len(errors) == kinds["malformed"] and valid > 1000
    assert any(n > 1 for n in dupl_ids.values()) and any(n > 1 for n in bridge_ids.values())
    assert any(len(a) > 1 for a in txn_addresses.values()), "transactions span addresses"


def test_the_demo_settings_use_every_policy_and_a_domain():
    settings = parse_settings(DEMO_ADDRESS_SETTINGS)
    assert {s.policy for s in settings.entries.values()} == set(POLICIES)
    assert settings.domain("orders.eu") == settings.domain("orders.us") == "orders"


def test_the_demo_shows_a_too_small_count_window_and_a_too_small_time_window(tmp_path):
    """The demo's twelve hours under its settings, on the reference model: the window-miss audit
    (on in the demo) finds resends after the window on the count address and the time address."""
    from msgdedup.reference_model import RawLine, ReferenceModel, window_audit

    info = write_partitions(tmp_path, datetime(2026, 11, 20, tzinfo=timezone.utc), 12)
    settings, model, too_small = parse_settings(DEMO_ADDRESS_SETTINGS), ReferenceModel(), set()
    for partition in info["partitions"]:
        lines = [RawLine(f"file:{f}", n, raw) for f in sorted(Path(partition["path"]).glob("part-*.jsonl"))
                 for n, raw in enumerate(f.read_bytes().splitlines(), 1)]
        audit = window_audit(model.run_batch(partition["batch_id"], lines, settings))
        too_small |= {name for name, a in audit.items()
                      if a.get("recommended_id_cache_size", 0) > a.get("id_cache_size", 0)
                      or a.get("recommended_duplicate_window_us", 0) > a.get("duplicate_window_us", 0)}
    assert too_small == {"inventory.updates", "payments.eu"}


def test_cli_is_deterministic(tmp_path, capsys):
    args = ["--start", "2026-11-20T00", "--hours", "2", "--messages-per-hour", "30", "--seed", "5"]
    assert main(["--out", str(tmp_path / "a"), *args]) == 0
    assert main(["--out", str(tmp_path / "b"), *args]) == 0
    a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert a == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    for rel in a:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    assert "2026-11-20T01" in capsys.readouterr().out
