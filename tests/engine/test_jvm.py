"""The project's jar (msgdedup.jvm): built by make setup, added to a session on first use."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from msgdedup import jvm

LINE = b'{"message_id":"m1","address":"a","received_at":5,"properties":{"z":"1","a":-0},"seq":7}'


def test_a_session_gets_the_decoder_when_it_first_needs_it(spark):
    """Functions belong to a session (the engine plans small inputs in a session of its own,
    planning.py): each one registers the decoder on first use; the jar is the application's."""
    session = spark.newSession()
    assert not session.catalog.functionExists(jvm.ENVELOPE_FIELDS)
    lines = session.createDataFrame([(LINE,), (b'{"message_id":"m1"} x',)], "raw binary")
    rows = lines.select(jvm.envelope_fields(session, F.col("raw")).alias("f")).collect()
    assert session.catalog.functionExists(jvm.ENVELOPE_FIELDS)
    assert rows[0].f.asDict() == {
        "message_id": "m1", "address": "a", "received_iso": None, "received_ms": 5,
        "properties": {"z": "1", "a": "0"}, "txn_id": None, "source_id": None, "seq": 7, "body": None}
    assert rows[1].f is None  # trailing junk: the slow way
    assert any(url.endswith(f"/{jvm.JAR.name}") for url, in spark.sql("LIST JARS").collect())


def test_a_missing_jar_says_how_to_build_it(spark, monkeypatch, tmp_path):
    monkeypatch.setattr(jvm, "JAR", tmp_path / "msgdedup-jvm.jar")
    with pytest.raises(jvm.JarMissing, match="make setup"):
        jvm.envelope_fields(spark.newSession(), F.col("raw"))
