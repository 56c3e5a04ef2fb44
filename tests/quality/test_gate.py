"""The gate on hand-written batches: it passes correct ones and names the broken invariant."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from msgdedup.quality import GateInputError, run_gate
from msgdedup.quality.gate import EXIT_USER_ERROR, GateSettings, main
from tests.quality.warehouse_fixture import (
    DELIVERED_DDL, DROPPED_DDL, delivered, dropped, two_batches, write_rows,
)

WINDOW = ("key_window", "expect_column_values_to_be_null", "duplicate_within_window")
PARTIAL_TXN = ("transactions", "expect_column_values_to_be_null", "partial_delivery")


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


@pytest.fixture()
def warehouse(pristine, tmp_path) -> Path:
    copy = tmp_path / "wh"
    shutil.copytree(pristine, copy)
    return copy


def test_correct_batch_passes_and_writes_summary_and_data_docs(spark, warehouse):
    result = run_gate(spark, str(warehouse), "B2", GateSettings())
    assert result.success, result.summary_line()
    assert failed(result) == set()
    summary = json.loads((warehouse / "quality" / "B2" / "result.json").read_text())
    assert summary["batch_id"] == "B2" and summary["run_id"] == "run-B2" and summary["success"] is True
    assert {e["suite"] for e in summary["expectations"]} == {
        "messages", "key_window", "transactions", "accounting", "id_cache"}
    assert all(e["success"] and e["sample_rows"] == [] for e in summary["expectations"])
    assert summary["data_docs_path"] == f"{warehouse}/quality/data_docs/index.html"
    assert Path(summary["data_docs_path"]).is_file()
    validations = warehouse / "quality" / "validations"
    assert {p.name for p in validations.iterdir() if p.is_dir()} >= {"key_window", "transactions"}


def test_injected_duplicate_delivery_fails_the_window_expectation(spark, warehouse):
    batch = warehouse / "delivered" / "batch_id=B2"
    copy = delivered("m9-dup", 9, "k6", 7, txn=None)
    write_rows(spark, str(batch), [copy], DELIVERED_DDL, mode="append")

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
    assert ("key_window", "expect_compound_columns_to_be_unique", "cache,cache_seq") in failed(result)
    assert PARTIAL_TXN not in failed(result)

    # The Data Docs page of the failed suite names the expectation and the offending rows.
    page = Path(window.data_docs_page)
    assert page.is_file() and "key_window" in str(page)
    html = page.read_text()
    assert "duplicate_within_window" in html and "m9-dup" in html and "k6" in html

    summary = json.loads((warehouse / "quality" / "B2" / "result.json").read_text())
    assert summary["success"] is False
    failed_names = {(e["suite"], e["expectation"]) for e in summary["expectations"] if not e["success"]}
    assert ("key_window", "expect_column_values_to_be_null") in failed_names


def test_half_delivered_transaction_fails_the_transaction_expectation(spark, warehouse):
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


def test_several_independent_corruptions_each_fail_their_own_expectation(spark, warehouse):
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
        ("messages", "expect_column_values_to_be_unique", "message_id"),
        ("messages", "expect_column_values_to_not_be_null", "address"),
    }
    assert outcome(result, "transactions", "partial_delivery").sample_rows[0]["duplicates_of_outside"] == 1
    oversized = next(e for e in result.expectations if e.suite == "id_cache" and not e.success)
    assert oversized.sample_rows == [{"cache": "orders.eu", "id_cache_size": 2, "entries": 3}]
    unique = next(e for e in result.expectations if e.expectation == "expect_column_values_to_be_unique")
    assert sorted((r["output"], r["message_id"]) for r in unique.sample_rows) == [
        ("delivered", "m7"), ("dropped", "m7")]
    no_address = outcome(result, "messages", "address")
    assert no_address.sample_rows == [{"output": "dropped", "source_file": "part-0.jsonl", "line_number": 7,
                                       "address": None}]


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
