"""The worked example of the semantics (docs/semantics.md §7), on the model and on Spark."""

from msgdedup.config import parse_settings
from msgdedup.engine.batch import run_batch
from msgdedup.engine.planning import (
    DRIVER_DECIDE_LINES_CONF, DRIVER_KERNEL_ROWS_CONF, DRIVER_READ_BYTES_CONF, SMALL_INPUT_BYTES_CONF,
)
from msgdedup.reference_model import ReferenceModel

from tests.engine.support import message, model_view, outcome_view, write_batch

SETTINGS = parse_settings({"address_settings": {"a": {"id_cache_size": 3}}})

EXAMPLE = [
    message("m1", "a", 1, key="x"),
    message("m2", "a", 2),
    message("m3", "a", 3, key="x"),
    message("m4", "a", 4, key="y"),
    message("m5", "a", 5, key="z"),
    message("m6", "a", 6, key="w"),
    message("m7", "a", 7, key="x"),
    message("m8", "a", 8, key="w", txn="T1"),
    message("m9", "b", 9, key="q", txn="T1"),
    message("m10", "b", 10, key="q"),
    message("m11", "a", 11, bridge="x"),
]

EXPECTED_OUTCOME = {
    "m1": ("delivered", None), "m2": ("delivered", None), "m3": ("duplicate", "m1"),
    "m4": ("delivered", None), "m5": ("delivered", None), "m6": ("delivered", None),
    "m7": ("delivered", None), "m8": ("duplicate", "m6"), "m9": ("transaction_rejected", "m8"),
    "m10": ("delivered", None), "m11": ("delivered", None),
}
EXPECTED_CACHES = {"a": ["z", "w", "x"], "b": ["q"], "BRIDGE.a": ["x"]}


def _outcomes(view):
    got = {row[2]: ("delivered", None) for row in view["delivered"]}
    got.update({row[2]: (row[3], row[4]) for row in view["dropped"]})
    return got


def _caches(view):
    caches = {}
    for cache, key, _seq, *_ in sorted(view["snapshot"], key=lambda e: (e[0], e[2])):
        caches.setdefault(cache, []).append(key)
    return caches


def test_reference_model_gives_the_worked_example(tmp_path):
    lines = write_batch(tmp_path / "raw", {"part-0.jsonl": EXAMPLE})
    view = model_view(ReferenceModel().run_batch("2026-11-21T05", lines, SETTINGS))
    assert _outcomes(view) == EXPECTED_OUTCOME
    assert _caches(view) == EXPECTED_CACHES


def test_engine_gives_the_worked_example(spark, tmp_path):
    write_batch(tmp_path / "raw", {"part-0.jsonl": EXAMPLE})
    manifest = run_batch(spark, str(tmp_path / "raw"), str(tmp_path / "wh"), "2026-11-21T05", SETTINGS)
    view = outcome_view(tmp_path / "wh", "2026-11-21T05")
    assert _outcomes(view) == EXPECTED_OUTCOME
    assert _caches(view) == EXPECTED_CACHES
    # delivered messages on a carry their acceptance sequence: x=1, y=2, z=3, w=4, x=5
    seqs = {row[2]: row[5] for row in view["delivered"] if row[3] == "a"}
    assert seqs == {"m1": 1, "m4": 2, "m5": 3, "m6": 4, "m7": 5}
    counts = manifest["counts"]
    assert (counts["input_lines"], counts["delivered"], counts["dropped"], counts["quarantined"]) == (11, 8, 3, 0)
    assert counts["by_address"]["b"] == {"delivered": 1, "duplicate": 0, "transaction_rejected": 1}


def test_every_plan_commits_the_same_batch_and_the_session_keeps_its_settings(spark, tmp_path):
    """planning.py: a small batch is read and decided on the driver; a small input decided in
    Spark runs without adaptive execution (in a session of its own), its contested units through
    the kernel on the driver; a large one is read by Spark, with the session's settings and the
    kernel in a Spark task. All three commit the same batch, down to the snapshot's fingerprint
    (a re-run may take another plan than the run it repeats), and the caller's session is left
    as it was."""
    write_batch(tmp_path / "raw", {"part-0.jsonl": EXAMPLE})
    before = {key: spark.conf.get(key) for key in ("spark.sql.adaptive.enabled", "spark.sql.shuffle.partitions")}
    views, fingerprints = {}, set()
    for plan, bounds in (("driver", {}), ("small", {DRIVER_DECIDE_LINES_CONF: "-1"}),
                         ("large", {DRIVER_DECIDE_LINES_CONF: "-1", DRIVER_READ_BYTES_CONF: "-1",
                                    SMALL_INPUT_BYTES_CONF: "-1", DRIVER_KERNEL_ROWS_CONF: "-1"})):
        for key, value in bounds.items():
            spark.conf.set(key, value)
        try:
            committed = run_batch(spark, str(tmp_path / "raw"), str(tmp_path / plan), "2026-11-21T05", SETTINGS)
        finally:
            for key in bounds:
                spark.conf.unset(key)
        views[plan] = outcome_view(tmp_path / plan, "2026-11-21T05")
        fingerprints.add(committed["snapshot_fingerprint"])
        assert {key: spark.conf.get(key) for key in before} == before
    assert views["driver"] == views["small"] == views["large"]
    assert _outcomes(views["large"]) == EXPECTED_OUTCOME
    assert len(fingerprints) == 1
