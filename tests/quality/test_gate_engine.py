"""The gate on batches built by the real engine: it passes them, and catches corruptions of them
(a duplicate delivery appended, half a transaction moved to dropped) with the specific
expectation; the ``gx_gate.py`` command reports the same through its exit code."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from msgdedup.config import parse_settings
from msgdedup.engine.batch import run_batch
from msgdedup.quality import run_gate
from tests.engine.support import message
from tests.engine.test_policies_model import APAMA_EXAMPLE
from tests.spark_submit import SPARK_SUBMIT, user_env

ROOT = Path(__file__).resolve().parents[2]
GATE_APP = ROOT / "spark_apps" / "gx_gate.py"
H5, H6 = "2026-11-21T05", "2026-11-21T06"
SETTINGS = parse_settings({"address_settings": {"#": {"id_cache_size": 3}}})

WINDOW = ("key_window", "expect_column_values_to_be_null", "duplicate_within_window")
PARTIAL_TXN = ("transactions", "expect_column_values_to_be_null", "partial_delivery")
SNAPSHOT = ("id_cache", "expect_column_values_to_be_null", "snapshot_problem")


def msg(mid, at, key=None, txn=None, address="orders.eu"):
    doc = {"message_id": mid, "address": address, "received_at": f"2026-11-21T05:{at // 60:02d}:{at % 60:02d}Z"}
    if key is not None:
        doc["properties"] = {"_AMQ_DUPL_ID": key}
    if txn is not None:
        doc["txn_id"] = txn
    return doc


def write_input(directory: Path, lines: list) -> str:
    directory.mkdir(parents=True)
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    (directory / "part-0.jsonl").write_text(text)
    return str(directory)


# Hour 5: a within-transaction repeat (m5 repeats m3's key inside T1: dropped, T1 delivered),
# a duplicate (m6), an unchecked message, a bad line. Hour 6: keys from hour 5 inside and
# outside the window of 3, a transaction rejected whole because of one duplicate, and a
# transaction delivered except for a key it repeats.
HOUR5 = [
    msg("m1", 1, "k1"), msg("m2", 2, "k2"),
    msg("m3", 3, "k3", txn="T1"), msg("m4", 4, "k4", txn="T1"), msg("m5", 5, "k3", txn="T1"),
    msg("m6", 6, "k4"), msg("m7", 7), "{not json",
]
HOUR6 = [
    msg("n1", 1, "k1"),                                   # k1 pushed out by k2..k4: delivered
    msg("n2", 2, "k4"),                                   # k4 still held: duplicate
    msg("n3", 3, "k8", txn="T2"), msg("n4", 4, "k9", txn="T2"), msg("n5", 5, "k10", txn="T2"),
    msg("n6", 6, "k11", txn="T3"), msg("n7", 7, "k10", txn="T3"),  # k10 held: T3 rejected whole
    msg("n8", 8, "k1", address="billing"),
    msg("n9", 9, "k20", txn="T4"), msg("n10", 10, "k21", txn="T4"),
    msg("n11", 11, "k20", txn="T4"),                      # repeat inside T4: dropped, T4 delivered
]


@pytest.fixture(scope="module")
def engine_warehouse(spark, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("engine")
    warehouse = base / "wh"
    run_batch(spark, write_input(base / "raw5", HOUR5), str(warehouse), H5, SETTINGS)
    run_batch(spark, write_input(base / "raw6", HOUR6), str(warehouse), H6, SETTINGS)
    return warehouse


@pytest.fixture()
def warehouse_copy(engine_warehouse, tmp_path) -> Path:
    copy = tmp_path / "wh"
    shutil.copytree(engine_warehouse, copy)
    shutil.rmtree(copy / "quality", ignore_errors=True)
    return copy


def failed(result) -> set[tuple[str, str, str]]:
    def target(e):
        return e.kwargs.get("column") or ",".join(
            e.kwargs.get("column_list") or [e.kwargs.get("column_A", ""), e.kwargs.get("column_B", "")])
    return {(e.suite, e.expectation, target(e)) for e in result.expectations if not e.success}


def rows(spark, path: Path) -> tuple[list, object]:
    frame = spark.read.parquet(str(path))
    return frame.collect(), frame.schema


def rewrite(spark, path: Path, data: list, schema) -> None:
    """Replace an output directory's files (written beside it first: Spark reads lazily)."""
    scratch = path.with_name(path.name + ".new")
    spark.createDataFrame(data, schema).coalesce(1).write.parquet(str(scratch))
    shutil.rmtree(path)
    scratch.rename(path)


def test_engine_batches_pass_the_gate(spark, engine_warehouse):
    manifest = json.loads((engine_warehouse / "runs" / f"{H6}.json").read_text())
    assert manifest["parent"]["batch_id"] == H5
    assert manifest["counts"]["by_reason"] == {"duplicate": 3, "transaction_rejected": 1}

    result = run_gate(spark, str(engine_warehouse), H6)

    assert result.success, result.summary_line()
    summary = json.loads((engine_warehouse / "quality" / H6 / "result.json").read_text())
    assert summary["success"] is True and summary["run_id"] == manifest["run_id"]


def test_injected_duplicate_delivery_is_caught_by_the_window_expectation(spark, warehouse_copy):
    delivered_dir = warehouse_copy / "delivered" / f"batch_id={H6}"
    delivered, schema = rows(spark, delivered_dir)
    original = next(r for r in delivered if r.message_id == "n1")
    copies = [original.asDict(recursive=True) | {"message_id": f"n1-again-{i}", "line_number": 100 + i}
              for i in range(25)]
    spark.createDataFrame(copies, schema).coalesce(1).write.mode("append").parquet(str(delivered_dir))

    result = run_gate(spark, str(warehouse_copy), H6)

    assert not result.success
    assert WINDOW in failed(result)
    window = next(e for e in result.expectations if e.suite == "key_window" and e.kwargs.get("column") == WINDOW[2])
    # Every copy is a violation, but the driver only gets a bounded sample of them.
    assert window.observed["unexpected_count"] == 25
    assert len(window.sample_rows) == 20
    assert all(r["dedup_key"] == "k1" and r["message_id"].startswith("n1") for r in window.sample_rows)
    assert PARTIAL_TXN not in failed(result)
    html = Path(window.data_docs_page).read_text()
    assert "n1-again-" in html and "duplicate_within_window" in html


def test_half_delivered_transaction_is_caught_by_the_transaction_expectation(spark, warehouse_copy):
    delivered_dir = warehouse_copy / "delivered" / f"batch_id={H6}"
    dropped_dir = warehouse_copy / "dropped" / f"batch_id={H6}"
    delivered, delivered_schema = rows(spark, delivered_dir)
    dropped, dropped_schema = rows(spark, dropped_dir)
    moved = next(r for r in delivered if r.message_id == "n5")  # T2 = n3, n4, n5: all delivered
    as_dropped = {name: moved.asDict(recursive=True).get(name) for name in dropped_schema.names}
    as_dropped.update(reason="transaction_rejected", duplicate_of="n3")
    rewrite(spark, delivered_dir, [r for r in delivered if r.message_id != "n5"], delivered_schema)
    rewrite(spark, dropped_dir, dropped + [as_dropped], dropped_schema)
    manifest_path = warehouse_copy / "runs" / f"{H6}.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["counts"]["delivered"] -= 1
    manifest["counts"]["dropped"] += 1
    manifest_path.write_text(json.dumps(manifest))

    result = run_gate(spark, str(warehouse_copy), H6)

    assert failed(result) == {PARTIAL_TXN}
    (partial,) = [e for e in result.expectations if not e.success]
    assert partial.sample_rows[0]["txn_id"] == "T2"
    assert partial.sample_rows[0]["delivered"] == 2 and partial.sample_rows[0]["transaction_rejected"] == 1

    # The command a DAG runs: exit 3 and a one-line summary naming the failed expectation.
    code, console = gate_command("--warehouse", str(warehouse_copy), "--batch-id", H6)
    assert code == 3, console
    summary = [line for line in console.splitlines() if line.startswith("gx_gate:")]
    assert len(summary) == 1, console
    assert "gate failed" in summary[0]
    assert "transactions.expect_column_values_to_be_null(partial_delivery)" in summary[0]


def gate_command(*args) -> tuple[int, str]:
    """spark-submit merges the app's stderr into its console output: return both together."""
    env = user_env()
    command = [str(SPARK_SUBMIT), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=2", str(GATE_APP), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


# §8: a time window of 10 s (payments), an Apama cache (orders, one sender), the Apama worked example
# of §8.2 (jms) and an Apama cache without a shared queue (ops), over two hours.
POLICIES = parse_settings({"address_settings": {
    "orders.eu": {"policy": "apama", "per_source_window": 2, "expiry_seconds": 5},
    "payments.eu": {"policy": "time", "duplicate_window": 10},
    "jms": {"policy": "apama", "per_source_window": 2, "expiry_seconds": 10},  # as test_policies_model.APAMA
    "ops": {"policy": "apama", "per_source_window": 2, "expiry_seconds": 0}}})
TIMED5 = [msg("p1", 1, "x", address="payments.eu"), msg("p2", 5, "x", address="payments.eu"),
          msg("p3", 12, "x", address="payments.eu"),                   # 11 s after p1: delivered again
          msg("a1", 1, "a", address="orders.eu"), msg("a2", 2, "b", address="orders.eu"),
          msg("a3", 3, "c", address="orders.eu"), msg("a4", 4, "a", address="orders.eu"),
          *APAMA_EXAMPLE,                                              # m10: a1 again, 23 s after m1
          message("o1", "ops", 0, key="q1", source_id="S"), message("o2", "ops", 1, key="q2", source_id="S")]
TIMED6 = [msg("q1", 20, "x", address="payments.eu"),                   # 8 s after p3 (the clock: 12 s)
          msg("q2", 25, "y", address="payments.eu"), msg("b1", 30, "a", address="orders.eu"),
          message("o3", "ops", 2, key="q3", source_id="S"),            # S's queue: [q2 q3], q1 forgotten
          message("o4", "ops", 3, key="q1", source_id="S")]            # delivered again: q2, q3 since


def test_time_and_apama_batches_pass_and_a_narrower_declared_window_fails(spark, tmp_path):
    warehouse = tmp_path / "wh"
    run_batch(spark, write_input(tmp_path / "raw5", TIMED5), str(warehouse), H5, POLICIES)
    run_batch(spark, write_input(tmp_path / "raw6", TIMED6), str(warehouse), H6, POLICIES)
    manifest_path = warehouse / "runs" / f"{H5}.json"
    manifest = json.loads(manifest_path.read_text())
    assert {name: c["policy"] for name, c in manifest["caches"].items()} == {
        "orders.eu": "apama", "payments.eu": "time", "jms": "apama", "ops": "apama"}
    # p2, a4 (a in the shared queue) and the worked example's m5, m6, m11, m12, m14
    assert manifest["counts"]["by_reason"] == {"duplicate": 7, "transaction_rejected": 1}
    assert json.loads((warehouse / "runs" / f"{H6}.json").read_text())["counts"]["delivered"] == 3  # q2, o3, o4
    for batch_id in (H5, H6):
        assert run_gate(spark, str(warehouse), batch_id).success

    def declare(batch_id: str, cache: str, **window) -> list[dict]:
        """Declare a wider window than the engine applied: the gate must name what lies inside it."""
        path = warehouse / "runs" / f"{batch_id}.json"
        declared = json.loads(path.read_text())
        original = dict(declared["caches"][cache])
        declared["caches"][cache].update(window)
        path.write_text(json.dumps(declared))
        result = run_gate(spark, str(warehouse), batch_id)
        declared["caches"][cache] = original
        path.write_text(json.dumps(declared))
        assert failed(result) == {WINDOW}
        window_result = next(e for e in result.expectations
                             if e.suite == "key_window" and e.kwargs.get("column") == WINDOW[2])
        return window_result.sample_rows

    # p3, delivered 11 s after p1, lies inside a window of 11 s.
    (p3,) = declare(H5, "payments.eu", duplicate_window_us=11_000_000)
    assert p3["message_id"] == "p3" and "delivered again 11.000000 s" in p3["duplicate_within_window"]
    # m10 (a1 again, 23 s after m1, which A had resent and which had left the shared queue) lies
    # inside an expiry of 30 s.
    (m10,) = declare(H5, "jms", expiry_seconds=30)
    assert m10["message_id"] == "m10" and "delivered again 23.000000 s after m1" in m10["duplicate_within_window"]
    # o4 (q1 again from S, two keys of S later, q1's acceptance in the parent snapshot) is inside a
    # per-sender queue of 3.
    (o4,) = declare(H6, "ops", per_source_window=3)
    assert o4["message_id"] == "o4" and o4["duplicate_within_window"] == (
        f"ops key q1: o4 delivered again while sender S's queue still held it: the sender had 2 keys "
        f"accepted since o1 (batch {H5}), its per_source_window is 3")

    # Declaring a smaller per-sender window than the engine applied: the Apama snapshot of the next
    # batch holds two keys of the sender without source_id, and the gate says so.
    manifest_path = warehouse / "runs" / f"{H6}.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["caches"]["orders.eu"]["per_source_window"] = 1
    manifest_path.write_text(json.dumps(manifest))
    result = run_gate(spark, str(warehouse), H6)
    assert failed(result) == {SNAPSHOT}
    problem = next(e for e in result.expectations if e.suite == "id_cache" and e.kwargs.get("column") == SNAPSHOT[2])
    assert "Apama cache orders.eu holds 2 keys of sender" in problem.sample_rows[0]["snapshot_problem"]
