"""The gate on hand-written batches: it passes correct ones and names the broken invariant."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from msgdedup.engine.planning import DRIVER_DECIDE_LINES_CONF
from msgdedup.quality import GateInputError, run_gate
from msgdedup.exit_codes import USER_ERROR as EXIT_USER_ERROR
from msgdedup.quality import gate
from msgdedup.quality.gate import GateSettings, main
from msgdedup.quality.materialise import HASHES_HEAP_SHARE_CONF
from tests.quality.warehouse_fixture import (
    DELIVERED_DDL, DROPPED_DDL, ID_CACHE_DDL, delivered, dropped, entry, two_batches, write_rows,
)

WINDOW = ("key_window", "expect_column_values_to_be_null", "duplicate_within_window")
SHARED_SEQ = ("key_window", "expect_column_values_to_be_null", "shared_cache_seq")
PARTIAL_TXN = ("transactions", "expect_column_values_to_be_null", "partial_delivery")
DUPLICATE_ID = ("messages", "expect_column_values_to_be_null", "duplicate_message_id")
SNAPSHOT = ("id_cache", "expect_column_values_to_be_null", "snapshot_problem")


def failed(result) -> set[tuple[str, str, str]]:
    return {(e.suite, e.expectation, e.kwargs.get("column") or ",".join(
        e.kwargs.get("column_list") or [e.kwargs.get("column_A", ""), e.kwargs.get("column_B", "")]))
            for e in result.expectations if not e.success}


def outcome(result, suite: str, column: str):
    return next(e for e in result.expectations if e.suite == suite and e.kwargs.get("column") == column)


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory) -> Path:
    """The two correct batches, written once; each test corrupts its own copy."""
    root = tmp_path_factory.mktemp("hand") / "wh"
    two_batches(spark, root)
    return root


@pytest.fixture(params=["pandas", "spark", "mixed"])
def engine(request, spark):
    """The checked tables validated by GX on pandas frames in the driver (a small batch, as these
    are), on Spark frames (a batch too large to collect: its exceptions' repeated hashes found by
    aggregations in Spark too, not on the driver), or mixed: a batch checked in Spark whose tables
    of at most 4 rows (here accounting, id_cache and transactions) are collected from their cache
    and validated on pandas (as a large batch's few counts, caches and transactions are): every
    corruption fails either way."""
    if request.param != "pandas":
        spark.conf.set(DRIVER_DECIDE_LINES_CONF, "-1" if request.param == "spark" else "4")
    if request.param == "spark":
        spark.conf.set(HASHES_HEAP_SHARE_CONF, "0")
    yield request.param
    spark.conf.unset(DRIVER_DECIDE_LINES_CONF)
    spark.conf.unset(HASHES_HEAP_SHARE_CONF)


@pytest.fixture()
def warehouse(pristine, tmp_path) -> Path:
    copy = tmp_path / "wh"
    shutil.copytree(pristine, copy)
    return copy


def test_correct_batch_passes_and_writes_summary_and_data_docs(spark, engine, warehouse, monkeypatch):
    pool = f"{gate.VALIDATION_POOL}-{engine}-{warehouse.parent.name}"  # one this test alone uses
    monkeypatch.setattr(gate, "VALIDATION_POOL", pool)
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup("gx-gate-derive-id_cache"))
    result = run_gate(spark, str(warehouse), "B2", GateSettings())
    assert result.success, result.summary_line()
    assert failed(result) == set()
    # where the driver collected the outputs' hashes, that pass counted the snapshot's entries per
    # cache too, and the id_cache table was made on the driver without a Spark job of its own
    id_cache_jobs = set(tracker.getJobIdsForGroup("gx-gate-derive-id_cache")) - before
    assert bool(id_cache_jobs) == (engine == "spark")
    summary = json.loads((warehouse / "quality" / "B2" / "result.json").read_text())
    assert summary["batch_id"] == "B2" and summary["run_id"] == "run-B2" and summary["success"] is True
    assert {e["suite"] for e in summary["expectations"]} == {
        "lineage", "messages", "key_window", "transactions", "accounting", "id_cache"}
    assert all(e["success"] and e["sample_rows"] == [] for e in summary["expectations"])
    # a passing table is validated for its counts alone (checks.counted_format), and reports them
    counted = [e for e in summary["expectations"] if e["expectation"].startswith("expect_column_values")]
    assert counted and all(isinstance(e["observed"]["element_count"], int)
                           and e["observed"]["unexpected_count"] == 0 for e in counted)
    assert outcome(result, "key_window", "duplicate_within_window").observed["element_count"] > 0
    assert summary["data_docs_path"] == f"{warehouse}/quality/data_docs/index.html"
    assert Path(summary["data_docs_path"]).is_file()
    validations = warehouse / "quality" / "validations"
    assert {p.name for p in validations.iterdir() if p.is_dir()} >= {"key_window", "transactions"}
    # Seconds per step, for the bench and the pipeline (timings.total_s); steps within the total.
    timings = summary["timings"]
    assert {"read_s", "derive_s", "validate_s", "data_docs_s", "total_s"} <= set(timings)
    assert all(isinstance(v, float) and 0 <= v <= timings["total_s"] for v in timings.values())
    assert timings == result.timings
    if engine == "spark":
        # GX's queries ran in the validation pool (fair scheduling creates a pool when a job uses it).
        assert spark.sparkContext._jsc.sc().getPoolForName(pool).isDefined()


def test_data_docs_list_every_gated_batch(spark, warehouse):
    """The site is built once per gate run, for that run's results, and still indexes all batches."""
    first = run_gate(spark, str(warehouse), "B1")
    second = run_gate(spark, str(warehouse), "B2")
    assert first.success and second.success
    index = Path(second.data_docs_path).read_text()
    for result in (first, second):
        pages = {e.data_docs_page for e in result.expectations if e.suite != "lineage"}  # lineage: not GX
        assert len(pages) == 5 and all(Path(page).is_file() for page in pages)
        for page in pages:
            relative = Path(page).relative_to(Path(second.data_docs_path).parent).as_posix()
            assert relative in index, f"{relative} missing from the Data Docs index"


def _deliver_m9_again(spark, warehouse: Path) -> None:
    """B2 delivers m9's key k6 a second time (as m9-dup, with m9's cache_seq)."""
    write_rows(spark, str(warehouse / "delivered" / "batch_id=B2"), [delivered("m9-dup", 9, "k6", 7, txn=None)],
               DELIVERED_DDL, mode="append")


def test_injected_duplicate_delivery_fails_the_window_expectation(spark, engine, warehouse):
    _deliver_m9_again(spark, warehouse)

    result = run_gate(spark, str(warehouse), "B2")

    assert not result.success
    assert WINDOW in failed(result)
    window = outcome(result, "key_window", "duplicate_within_window")
    assert window.observed["unexpected_count"] == 1
    (sample,) = window.sample_rows
    assert {sample["message_id"], sample["prev_message_id"]} == {"m9", "m9-dup"}
    assert sample["dedup_key"] == "k6" and sample["cache"] == "orders.eu"
    assert "delivered again 0 accepted keys after" in sample["duplicate_within_window"]
    # The copy also breaks the accounting and the uniqueness of cache_seq, but no transaction.
    assert ("accounting", "expect_column_pair_values_to_be_equal", "declared,actual") in failed(result)
    accounting = next(e for e in result.expectations if e.suite == "accounting")
    assert {r["count"] for r in accounting.sample_rows} == {"input_lines", "delivered"}
    assert SHARED_SEQ in failed(result)
    shared = outcome(result, "key_window", "shared_cache_seq")
    assert sorted(r["message_id"] for r in shared.sample_rows) == ["m9", "m9-dup"]
    assert all(r["shared_cache_seq"].startswith(
        "orders.eu cache_seq 7 is used by 2 deliveries (message_id m9 to m9-dup)")
               for r in shared.sample_rows)
    assert failed(result) == {WINDOW, SHARED_SEQ, ("accounting", "expect_column_pair_values_to_be_equal",
                                                   "declared,actual")}

    # The Data Docs page of the failed suite names the expectation and the offending rows.
    page = Path(window.data_docs_page)
    assert page.is_file() and "key_window" in str(page)
    html = page.read_text()
    assert "duplicate_within_window" in html and "m9-dup" in html and "k6" in html

    summary = json.loads((warehouse / "quality" / "B2" / "result.json").read_text())
    assert summary["success"] is False
    failed_names = {(e["suite"], e["expectation"]) for e in summary["expectations"] if not e["success"]}
    assert ("key_window", "expect_column_values_to_be_null") in failed_names


def test_half_delivered_transaction_fails_the_transaction_expectation(spark, engine, warehouse):
    """Move m10 (of T2) from delivered to dropped as transaction_rejected: counts still add up."""
    delivered_dir = warehouse / "delivered" / "batch_id=B2"
    dropped_dir = warehouse / "dropped" / "batch_id=B2"
    kept = [row.asDict() for row in spark.read.parquet(str(delivered_dir)).where("message_id != 'm10'").collect()]
    dropped_rows = [row.asDict() for row in spark.read.parquet(str(dropped_dir)).collect()]
    moved = dropped("m10", 5, "k7", "transaction_rejected", "m9", txn="T2")
    write_rows(spark, str(delivered_dir), kept, DELIVERED_DDL)
    write_rows(spark, str(dropped_dir), dropped_rows + [moved], DROPPED_DDL)
    manifest_path = warehouse / "runs" / "B2.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["counts"].update(delivered=len(kept), dropped=len(dropped_rows) + 1)
    manifest_path.write_text(json.dumps(manifest))

    result = run_gate(spark, str(warehouse), "B2")

    assert not result.success
    assert failed(result) == {PARTIAL_TXN}
    partial = outcome(result, "transactions", "partial_delivery")
    assert partial.sample_rows == [{
        "txn_id": "T2", "delivered": 1, "transaction_rejected": 1, "duplicates_of_outside": 0,
        "partial_delivery": "transaction T2 partly delivered: 1 delivered, 1 transaction_rejected, "
                            "0 duplicate of a message outside the transaction",
    }]
    assert "T2 partly delivered" in Path(partial.data_docs_page).read_text()


def test_several_independent_corruptions_each_fail_their_own_expectation(spark, engine, warehouse):
    """In one batch: m10 of T2 dropped as a duplicate of m1 (another batch) while m9 stays
    delivered; m11 renamed m7 (now delivered and dropped); m13 without address; a manifest
    that shrinks the cache below the snapshot's size. Each is caught by its expectation only."""
    delivered_dir = warehouse / "delivered" / "batch_id=B2"
    dropped_dir = warehouse / "dropped" / "batch_id=B2"
    kept = [row.asDict() for row in spark.read.parquet(str(delivered_dir)).where("message_id != 'm10'").collect()]
    dropped_rows = [row.asDict() for row in spark.read.parquet(str(dropped_dir)).collect()]
    for row in dropped_rows:
        if row["message_id"] == "m11":
            row["message_id"] = "m7"
        if row["message_id"] == "m13":
            row["address"] = None
    write_rows(spark, str(delivered_dir), kept, DELIVERED_DDL)
    write_rows(spark, str(dropped_dir), dropped_rows + [dropped("m10", 5, "k1", "duplicate", "m1", txn="T2")],
               DROPPED_DDL)
    manifest_path = warehouse / "runs" / "B2.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["counts"].update(delivered=len(kept), dropped=len(dropped_rows) + 1)
    manifest["caches"]["orders.eu"]["id_cache_size"] = 2
    manifest_path.write_text(json.dumps(manifest))

    result = run_gate(spark, str(warehouse), "B2")

    assert failed(result) == {
        PARTIAL_TXN,
        ("id_cache", "expect_column_pair_values_a_to_be_greater_than_b", "id_cache_size,entries"),
        DUPLICATE_ID,
        ("messages", "expect_column_values_to_not_be_null", "address"),
    }
    assert outcome(result, "transactions", "partial_delivery").sample_rows[0]["duplicates_of_outside"] == 1
    oversized = next(e for e in result.expectations if e.suite == "id_cache" and not e.success)
    assert oversized.sample_rows == [{"cache": "orders.eu", "id_cache_size": 2, "entries": 3}]
    twice = outcome(result, "messages", "duplicate_message_id")
    assert twice.observed["unexpected_count"] == 2
    assert sorted((r["output"], r["message_id"], r["line_number"]) for r in twice.sample_rows) == [
        ("delivered", "m7", 2), ("dropped", "m7", 1)]
    assert {r["duplicate_message_id"] for r in twice.sample_rows} == {
        "message_id m7 is in 2 rows (1 delivered, 1 dropped); this one: delivered, part-0.jsonl line 2",
        "message_id m7 is in 2 rows (1 delivered, 1 dropped); this one: dropped, part-0.jsonl line 1"}
    no_address = outcome(result, "messages", "address")
    assert no_address.sample_rows == [{"output": "dropped", "source_file": "part-0.jsonl", "line_number": 7,
                                       "message_id": "m13", "address": None}]


def test_broken_sequence_numbers_and_snapshot_each_fail_their_own_expectation(spark, engine, warehouse):
    """In one batch: m8 delivered in a cache the manifest does not declare, m10 without its
    cache_seq, m9's cache_seq also given to another key's delivery, a snapshot that holds k5
    twice, and a message without message_id and received_at. Each names its rows."""
    delivered_dir = warehouse / "delivered" / "batch_id=B2"
    dropped_dir = warehouse / "dropped" / "batch_id=B2"
    rows = [row.asDict() for row in spark.read.parquet(str(delivered_dir)).collect()]
    for row in rows:
        if row["message_id"] == "m8":
            row["cache"] = "orders.ghost"
        if row["message_id"] == "m10":
            row["cache_seq"] = None
    rows.append(delivered("m14", 8, "k9", 7))
    write_rows(spark, str(delivered_dir), rows, DELIVERED_DDL)
    dropped_rows = [row.asDict() for row in spark.read.parquet(str(dropped_dir)).collect()]
    for row in dropped_rows:
        if row["message_id"] == "m12":
            row.update(message_id=None, received_at=None)
    write_rows(spark, str(dropped_dir), dropped_rows, DROPPED_DDL)
    write_rows(spark, str(warehouse / "id_cache" / "batch_id=B2"),
               [entry("k5", 6, "m8", "B2"), entry("k5", 7, "m9", "B2"), entry("k7", 8, "m10", "B2")], ID_CACHE_DDL)
    manifest_path = warehouse / "runs" / "B2.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["counts"].update(delivered=len(rows), input_lines=len(rows) + len(dropped_rows))
    manifest_path.write_text(json.dumps(manifest))

    result = run_gate(spark, str(warehouse), "B2")

    assert failed(result) == {
        ("key_window", "expect_column_values_to_not_be_null", "policy"),
        ("key_window", "expect_column_values_to_not_be_null", "cache_seq"),
        SHARED_SEQ, SNAPSHOT,
        ("messages", "expect_column_values_to_not_be_null", "message_id"),
        ("messages", "expect_column_values_to_not_be_null", "received_at"),
    }
    assert [r["message_id"] for r in outcome(result, "key_window", "policy").sample_rows] == ["m8"]
    assert [r["message_id"] for r in outcome(result, "key_window", "cache_seq").sample_rows] == ["m10"]
    shared = outcome(result, "key_window", "shared_cache_seq")
    assert sorted((r["message_id"], r["dedup_key"]) for r in shared.sample_rows) == [("m14", "k9"), ("m9", "k6")]
    assert "orders.eu cache_seq 7 is used by 2 deliveries" in shared.sample_rows[0]["shared_cache_seq"]
    (snapshot,) = outcome(result, "id_cache", "snapshot_problem").sample_rows
    assert snapshot["cache"] == "orders.eu"
    assert snapshot["snapshot_problem"] == "cache orders.eu holds 1 keys more than once"
    for column in ("message_id", "received_at"):
        (row,) = outcome(result, "messages", column).sample_rows
        assert (row["output"], row["line_number"], row[column]) == ("dropped", 6, None)


def test_uncommitted_batch_is_a_user_error(spark, warehouse):
    (warehouse / "runs" / "B2.json").unlink()
    with pytest.raises(GateInputError, match="not committed"):
        run_gate(spark, str(warehouse), "B2")
    with pytest.raises(GateInputError, match="bad batch id"):
        run_gate(spark, str(warehouse), "../B1")


def test_command_exit_codes_for_user_errors(spark, warehouse, capsys):
    """main() is what spark_apps/gx_gate.py runs (in-process here: it reuses this SparkSession)."""
    assert main(["--warehouse", str(warehouse), "--batch-id", "B9"]) == EXIT_USER_ERROR
    assert capsys.readouterr().err.strip() == (
        f"gx_gate: error: batch B9 is not committed in {warehouse} (no runs/B9.json)")
    bad_config = warehouse / "bad.yaml"
    bad_config.write_text("address_settings: {'#': {id_cache_size: -1}}\n")
    assert main(["--warehouse", str(warehouse), "--batch-id", "B2", "--config", str(bad_config)]) == EXIT_USER_ERROR
    assert "id_cache_size must be >= 0" in capsys.readouterr().err


LINEAGE = ("lineage", "expect_parent_to_be_latest_committed_batch", "parent")


def test_batch_built_on_a_parent_that_is_not_the_latest_fails_the_gate(spark, warehouse):
    """Another tool committed B1x between B1 and B2 after B2 was built on B1 (issue 9's lost batch)."""
    shutil.copytree(warehouse / "id_cache" / "batch_id=B1", warehouse / "id_cache" / "batch_id=B1x")
    b1x = json.loads((warehouse / "runs" / "B1.json").read_text())
    b1x.update(batch_id="B1x", run_id="run-B1x", parent={"batch_id": "B1", "snapshot_fingerprint": "x"})
    (warehouse / "runs" / "B1x.json").write_text(json.dumps(b1x))
    for name in ("delivered", "dropped", "quarantine"):
        shutil.copytree(warehouse / name / "batch_id=B1", warehouse / name / "batch_id=B1x")
    result = run_gate(spark, str(warehouse), "B2", GateSettings())
    assert not result.success
    assert failed(result) == {LINEAGE}
    summary = json.loads((warehouse / "quality" / "B2" / "result.json").read_text())
    assert summary["success"] is False
    (check,) = [e for e in summary["expectations"] if e["suite"] == "lineage"]
    assert check["observed"]["recorded_parent"] == "B1" and check["observed"]["latest_committed_before"] == "B1x"
    assert "the latest committed batch before it is B1x" in check["observed"]["observed_value"]
    assert "lineage.expect_parent_to_be_latest_committed_batch(parent)" in result.summary_line()


def test_batch_built_on_another_snapshot_of_its_parent_fails_the_gate(spark, warehouse):
    """B1 re-committed (another ID cache) after B2 was built on it, behind the engine's back."""
    b1 = json.loads((warehouse / "runs" / "B1.json").read_text())
    b1["snapshot_fingerprint"] = "re-committed"
    (warehouse / "runs" / "B1.json").write_text(json.dumps(b1))
    result = run_gate(spark, str(warehouse), "B2", GateSettings())
    assert failed(result) == {LINEAGE}
    assert "B1 was re-committed after B2" in outcome(result, "lineage", "parent").observed["observed_value"]


def _persisted_rdd_ids(spark) -> set[int]:
    return {int(rdd_id) for rdd_id in spark.sparkContext._jsc.getPersistentRDDs().keySet().toArray()}


def test_gating_batch_after_batch_in_one_session_leaves_nothing_behind(spark, engine, warehouse):
    """A long-lived driver gates many batches in one SparkSession: each gate must release what it
    cached (checked tables, small frames), register no temp view, leave no job group or scheduler
    pool set, and the second gate reuses the GX projects the first opened (on Spark frames, one
    per table validated at once)."""
    from msgdedup.quality import gate as gate_module

    def projects() -> dict:
        return {key: p for key, p in gate_module._PROJECTS.items() if key[-1] == str(warehouse / "quality")}

    persisted, views = _persisted_rdd_ids(spark), {t.name for t in spark.catalog.listTables()}
    first = run_gate(spark, str(warehouse), "B1")
    opened = projects()
    second = run_gate(spark, str(warehouse), "B2")

    assert first.success and second.success
    assert _persisted_rdd_ids(spark) <= persisted, "a gate left cached frames behind"
    assert {t.name for t in spark.catalog.listTables()} == views
    for key in ("spark.jobGroup.id", "spark.job.description", gate_module.SCHEDULER_POOL):
        assert spark.sparkContext.getLocalProperty(key) is None
    assert len(opened) == (1 if engine == "pandas" else gate_module.SPARK_VALIDATORS)
    reused = projects()
    assert reused.keys() == opened.keys() and all(reused[key] is opened[key] for key in opened)
    # Both batches' results were stored, and rendered through one context.
    for batch_id in ("B1", "B2"):
        assert (warehouse / "quality" / batch_id / "result.json").is_file()
    assert all(Path(e.data_docs_page).is_file() for e in second.expectations if e.suite != "lineage")


def test_a_gate_reusing_its_project_still_fails_a_corrupted_batch(spark, warehouse):
    """The reused project is not a cached verdict: a batch corrupted after a passing gate fails."""
    assert run_gate(spark, str(warehouse), "B2").success
    batch = warehouse / "delivered" / "batch_id=B2"
    write_rows(spark, str(batch), [delivered("m9-dup", 9, "k6", 7, txn=None)], DELIVERED_DDL, mode="append")
    result = run_gate(spark, str(warehouse), "B2")
    assert WINDOW in failed(result) and not result.success


def test_a_missing_output_or_parent_snapshot_is_a_user_error_naming_it(spark, warehouse):
    """The outputs are opened concurrently; the error still names the first missing one."""
    shutil.rmtree(warehouse / "id_cache" / "batch_id=B1")
    with pytest.raises(GateInputError, match="parent batch B1's id_cache snapshot is missing"):
        run_gate(spark, str(warehouse), "B2")
    shutil.rmtree(warehouse / "quarantine" / "batch_id=B2")
    shutil.rmtree(warehouse / "dropped" / "batch_id=B2")
    with pytest.raises(GateInputError, match=r"^dropped output missing: "):
        run_gate(spark, str(warehouse), "B2")


def _validation_jobs(spark, table: str) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(f"gx-gate-{table}"))


@pytest.mark.parametrize("engine", ["spark"], indirect=True)
def test_a_table_is_asked_for_samples_only_where_it_fails(spark, engine, warehouse, pristine, tmp_path):
    """GX asks each expectation's sample values and rows by queries of their own, even where no row
    is unexpected; the gate validates a table with its counts alone first (checks.counted_format)
    and as its checkpoint says (SUMMARY, with samples) only where that fails. So key_window, checked
    in Spark, costs more queries when it fails than when it passes, and its failure still names the
    rows."""
    before = _validation_jobs(spark, "key_window")
    assert run_gate(spark, str(warehouse), "B2").success
    passed = _validation_jobs(spark, "key_window") - before

    broken = tmp_path / "broken"
    shutil.copytree(pristine, broken)
    _deliver_m9_again(spark, broken)
    before = _validation_jobs(spark, "key_window")
    result = run_gate(spark, str(broken), "B2")
    failing = _validation_jobs(spark, "key_window") - before

    assert WINDOW in failed(result)
    (sample,) = outcome(result, "key_window", "duplicate_within_window").sample_rows
    assert {sample["message_id"], sample["prev_message_id"]} == {"m9", "m9-dup"}
    assert 0 < len(passed) < len(failing)


@pytest.mark.parametrize("engine", ["spark"], indirect=True)
def test_a_table_that_is_a_plain_scan_is_validated_without_being_cached_first(spark, engine, warehouse, pristine,
                                                                             tmp_path):
    """A passing batch's messages and key_window join only empty exceptions: each is a plain scan of
    the outputs, which GX's queries read as it is (materialise.Scanned), so no job computes either
    table before GX's own. Where a key is accepted again, the deliveries of that key are put next to
    their previous acceptances first (jobs of key_window's own), and the table is a plain scan
    again; it fails, is cached before GX asks it for samples, and its samples name both rows."""
    def derive_jobs(table: str) -> set[int]:
        return set(spark.sparkContext.statusTracker().getJobIdsForGroup(f"gx-gate-derive-{table}"))

    before = {table: derive_jobs(table) for table in ("messages", "key_window")}
    assert run_gate(spark, str(warehouse), "B2").success
    assert {table: derive_jobs(table) - jobs for table, jobs in before.items()} == {"messages": set(),
                                                                                    "key_window": set()}

    broken = tmp_path / "broken"
    shutil.copytree(pristine, broken)
    _deliver_m9_again(spark, broken)
    before = derive_jobs("key_window")
    result = run_gate(spark, str(broken), "B2")
    assert WINDOW in failed(result)
    assert derive_jobs("key_window") - before
    (sample,) = outcome(result, "key_window", "duplicate_within_window").sample_rows
    assert {sample["message_id"], sample["prev_message_id"]} == {"m9", "m9-dup"}
