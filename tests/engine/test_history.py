"""State carried between batches (spec §5): parents, re-runs, the stale-history rule, shrinking."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from msgdedup.config import parse_settings
from msgdedup.engine.batch import StaleHistoryError, run_batch
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.engine.lease import WarehouseBusy
from msgdedup.engine.warehouse import Warehouse
from msgdedup.layout import BatchIdError

from tests.engine.support import manifest, message, outcome_view, read_output, write_batch

H5, H6, H7 = "2026-11-21T05", "2026-11-21T06", "2026-11-21T07"
SMALL = parse_settings({"address_settings": {"#": {"id_cache_size": 2}}})


def _committed(spark, warehouse):
    return Warehouse(HadoopFS(spark), str(warehouse)).committed_batches()


@pytest.fixture()
def three_batches(spark, tmp_path):
    write_batch(tmp_path / "r5", {"a.jsonl": [message("m1", key="x"), message("m2", key="y", at=2)]})
    write_batch(tmp_path / "r6", {"a.jsonl": [message("m3", key="x"), message("m4", key="z", at=2)]})
    write_batch(tmp_path / "r7", {"a.jsonl": [message("m5", key="y"), message("m6", key="x", at=2)]})
    wh = tmp_path / "wh"
    for batch_id, raw in ((H5, "r5"), (H6, "r6"), (H7, "r7")):
        run_batch(spark, str(tmp_path / raw), str(wh), batch_id, SMALL)
    return tmp_path, wh


def test_each_batch_starts_from_its_parent(three_batches):
    _, wh = three_batches
    assert manifest(wh, H6)["parent"]["batch_id"] == H5
    # m3 (x) hits m1 across batches; the window of 2 then holds [y, z]; m6 (x) is new again
    assert [(r["message_id"], r["duplicate_of"]) for r in read_output(wh, "dropped", H6)] == [("m3", "m1")]
    assert sorted(r["message_id"] for r in read_output(wh, "delivered", H7)) == ["m6"]
    assert [r["cache_seq"] for r in read_output(wh, "delivered", H7)] == [4]


def test_rerun_gives_identical_outputs_and_one_copy(spark, three_batches):
    root, wh = three_batches
    before = {b: outcome_view(wh, b) for b in (H5, H6, H7)}
    fingerprint = manifest(wh, H6)["snapshot_fingerprint"]
    run_batch(spark, str(root / "r6"), str(wh), H6, SMALL)
    after = {b: outcome_view(wh, b) for b in (H5, H6, H7)}
    assert after == before
    assert manifest(wh, H6)["snapshot_fingerprint"] == fingerprint
    assert len(read_output(wh, "delivered", H6)) == 1
    # the later batch still stands: the cache it started from is unchanged
    assert _committed(spark, wh) == [H5, H6, H7]
    assert not (wh / "_staging").exists() or not any((wh / "_staging").iterdir())


def test_rerun_that_changes_history_is_refused(spark, three_batches):
    root, wh = three_batches
    before = outcome_view(wh, H6)
    with pytest.raises(StaleHistoryError, match="--invalidate-later"):
        run_batch(spark, str(root / "r6"), str(wh), H6, parse_settings(None))
    assert outcome_view(wh, H6) == before
    assert _committed(spark, wh) == [H5, H6, H7]


def test_invalidate_later_marks_later_batches_stale_until_rerun(spark, three_batches):
    root, wh = three_batches
    # a cache of 1 on H5 leaves [y] instead of [x, y]: the history H6 and H7 were built on changes
    run_batch(spark, str(root / "r5"), str(wh), H5,
              parse_settings({"address_settings": {"#": {"id_cache_size": 1}}}), invalidate_later=True)
    assert _committed(spark, wh) == [H5]
    assert (wh / "runs" / f"{H6}.stale.json").exists() and (wh / "runs" / f"{H7}.stale.json").exists()
    # H7 waits while H6, before it, is stale: built on H5 now, it would skip H6's keys
    with pytest.raises(WarehouseBusy, match=f"earlier batch\\(es\\) {H6} are stale"):
        run_batch(spark, str(root / "r7"), str(wh), H7, parse_settings(None))
    assert (wh / "runs" / f"{H7}.stale.json").exists()
    run_batch(spark, str(root / "r6"), str(wh), H6, parse_settings(None))
    run_batch(spark, str(root / "r7"), str(wh), H7, parse_settings(None))
    assert _committed(spark, wh) == [H5, H6, H7]
    assert not (wh / "runs" / f"{H6}.stale.json").exists()
    # with the default (large) cache, m5 (y) and m6 (x) are now duplicates of batch H5's messages
    assert sorted(r["message_id"] for r in read_output(wh, "dropped", H7)) == ["m5", "m6"]


def test_first_run_of_an_older_batch_is_refused_when_it_changes_history(spark, tmp_path):
    write_batch(tmp_path / "r5", {"a.jsonl": [message("m1", key="x")]})
    write_batch(tmp_path / "r6", {"a.jsonl": [message("m2", key="y")]})
    run_batch(spark, str(tmp_path / "r6"), str(tmp_path / "wh"), H6)
    with pytest.raises(StaleHistoryError, match=f"older than committed batch\\(es\\) {H6}"):
        run_batch(spark, str(tmp_path / "r5"), str(tmp_path / "wh"), H5)
    assert _committed(spark, tmp_path / "wh") == [H6]


def test_shrinking_cache_keeps_the_newest_entries(spark, tmp_path):
    keys = ["k1", "k2", "k3", "k4", "k5"]
    write_batch(tmp_path / "r5", {"a.jsonl": [message(f"m{i}", key=k, at=i) for i, k in enumerate(keys)]})
    write_batch(tmp_path / "r6", {"a.jsonl": [message("n3", key="k3"), message("n5", key="k5", at=2),
                                              message("n4", key="k4", at=3)]})
    run_batch(spark, str(tmp_path / "r5"), str(tmp_path / "wh"),
              H5, parse_settings({"address_settings": {"#": {"id_cache_size": 5}}}))
    run_batch(spark, str(tmp_path / "r6"), str(tmp_path / "wh"),
              H6, parse_settings({"address_settings": {"#": {"id_cache_size": 2}}}))
    # after shrinking to 2 the cache is [k4, k5]: k3 is delivered again (and evicts k4)
    assert sorted(r["message_id"] for r in read_output(tmp_path / "wh", "delivered", H6)) == ["n3", "n4"]
    assert [(r["message_id"], r["duplicate_of"]) for r in read_output(tmp_path / "wh", "dropped", H6)] == [("n5", "m4")]
    info = manifest(tmp_path / "wh", H6)["caches"]["a"]
    assert (info["id_cache_size"], info["entries"], info["last_seq"]) == (2, 2, 7)


def test_a_warehouse_of_hourly_batches_refuses_other_ids(spark, tmp_path):
    """``zz`` sorts after every hour: committed, it would make every later hourly run stale."""
    write_batch(tmp_path / "r5", {"a.jsonl": [message("m1", key="x")]})
    run_batch(spark, str(tmp_path / "r5"), str(tmp_path / "wh"), H5)
    with pytest.raises(BatchIdError, match="holds hourly batch ids YYYY-MM-DDTHH"):
        run_batch(spark, str(tmp_path / "r5"), str(tmp_path / "wh"), "zz")
    assert _committed(spark, tmp_path / "wh") == [H5]
    assert not any((tmp_path / "wh" / "_staging").iterdir())


def _as_an_older_version_wrote_it(output: Path, dropped: list[str]) -> None:
    """Rewrite a committed Parquet output without ``dropped`` columns, as a version of the engine
    from before they existed wrote it (and without the checksums of the files it replaces)."""
    for part in output.glob("*.parquet"):
        table = pq.read_table(part)
        pq.write_table(table.drop_columns([c for c in dropped if c in table.column_names]), part)
    for checksum in output.glob(".*.crc"):
        checksum.unlink()


def test_a_parent_written_before_policies_and_the_audits_instants_is_read_as_then(spark, tmp_path):
    """A snapshot from before §8 has the first six columns only, a record of left keys from before
    time windows were audited has no instants: the batch after it reads the missing columns as
    null and gives what it gives after a parent with them."""
    settings_ = parse_settings({"address_settings": {"#": {"id_cache_size": 2}}, "window_audit": {}})
    write_batch(tmp_path / "r5", {"a.jsonl": [message("m1", key="k1", at=1), message("m2", key="k2", at=2),
                                               message("m3", key="k3", at=3)]})
    write_batch(tmp_path / "r6", {"a.jsonl": [message("n1", key="k3", at=1), message("n2", key="k1", at=2),
                                               message("n3", key="k4", at=3)]})
    views = []
    for name in ("now", "older"):
        wh = tmp_path / name
        run_batch(spark, str(tmp_path / "r5"), str(wh), H5, settings_)
        if name == "older":
            _as_an_older_version_wrote_it(wh / "id_cache" / f"batch_id={H5}", ["received_at_us", "source_id", "queue"])
            _as_an_older_version_wrote_it(wh / "left_keys" / f"batch_id={H5}", ["received_at_us"])
            assert "queue" not in pq.read_schema(next((wh / "id_cache" / f"batch_id={H5}").glob("*.parquet"))).names
        run_batch(spark, str(tmp_path / "r6"), str(wh), H6, settings_)
        views.append(outcome_view(wh, H6))
    assert views[0] == views[1]
    assert [r[2] for r in views[1]["dropped"]] == ["n1"] and dict(views[1]["window_audit"]["a"])["misses"] == 1
