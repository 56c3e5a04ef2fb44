"""The JVM fast path of parsing agrees with envelope.parse_line on every line it takes.

Lines are generated around the envelope's edges (types, nulls, escapes, timestamps, trailing
junk, duplicate keys, unknown fields, bad UTF-8) and every one goes through Spark once; each is
then compared with the Python decoder, the definition of a valid line.
"""

from __future__ import annotations

import json
import random
import pytest
from pyspark.sql import functions as F

from msgdedup.engine import parsing
from msgdedup.envelope import InvalidLine, parse_line

CURATED = [
    '{"message_id":"m1","address":"a","received_at":"2026-11-21T05:00:00Z"}',
    '{"message_id":"m1","address":"a","received_at":"2026-11-21T05:00:00.5+01:30","seq":-3}',
    '{"message_id":"m1","address":"a","received_at":1795219200000,"properties":{"_AMQ_DUPL_ID":"k","n":42}}',
    '{"message_id":"m1","address":"a","received_at":1795219200000,"properties":{}}',
    '  {"message_id" : "m1" , "address":"a.b.c","received_at":1,"body":"x\\n\\"y\\"\\\\z\\/"}  ',
    '{"message_id":"m1","address":"a","received_at":1}{"x":1}',
    '{"message_id":"m1","address":"a","received_at":1} x',
    '{"message_id":"m1","address":"a","received_at":1}\u2028',
    '{"message_id":"m1","address":"a","received_at":"2026-11-21T05:00:00Z\u2028"}',
    '{"message_id":"m1","address":"a","received_at":1,"message_id":"m2"}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"k":"a","k":"b"}}',
    '{"message_id":"m1","address":"a","received_at":1,"extra":"kept"}',
    '{"message_id":"m1","address":"a","received_at":1,"txn_id":null}',
    '{"message_id":"","address":"a","received_at":1}',
    '{"message_id":"m1","address":"a","received_at":1,"seq":1.0}',
    '{"message_id":"m1","address":"a","received_at":1,"seq":9223372036854775808}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"n":1.50}}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"n":NaN}}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"n":true}}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"a>b":"x"}}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"we ird":"x"}}',
    '{"message_id":"m\\ud800","address":"a","received_at":1}',
    '{"message_id":"m\\u00e9","address":"a","received_at":1}',
    '{"message_id":"m1","address":"a","received_at":"2026-02-30T05:00:00Z"}',
    '{"message_id":"m1","address":"a","received_at":"2026-11-21T24:00:00Z"}',
    '{"message_id":"m1","address":"a","received_at":"2026-11-21T05:00:00"}',
    '{"message_id":"m1","address":"a","received_at":"2026-11-21 05:00:00Z"}',
    '{"message_id":"m1","address":"a","received_at":"2026-11-21T05:00:00-17:59"}',
    '{"message_id":"m1","address":"a","received_at":"0999-11-21T05:00:00Z"}',
    '{"message_id":"m1","address":"a","received_at":253402300800000}',
    '{"message_id":"m1","address":"a","received_at":-62135596800000}',
    '{"message_id":"m1","address":"a","received_at":true}',
    '{"message_id":1,"address":"a","received_at":1}',
    '{"message_id":"m1","address":["a"],"received_at":1}',
    '{"message_id":"m1","received_at":1}',
    "{'message_id':'m1'}",
    "[1, 2]",
    "",
    "   ",
    '\ufeff{"message_id":"m1","address":"a","received_at":1}',
    '{"message_id":"m\té","address":"a","received_at":1}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"z":"1","a":2,"m":-0}}',
    '{"message_id":"m1",\n"address":"a",\r"received_at":1}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"x":{}}}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"n":999999999999999999}}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"n":-9999999999999999999}}',
    '{"message_id":"m1","address":"a","received_at":1,"body":"a\x00b"}',
    '{"message_id":"m1","address":"a","received_at":1}\x00',
    '{"message_id":"m1","address":"a","received_at":1}}',
    '{"message_id":"m1","address":"a","received_at":1,}',
    '{"message_id":"m1","address":"a","received_at":01}',
    '{"message_id":"m1","address":"a","received_at":1,"seq":-0}',
    '{"message_id":"m1","address":"a","received_at":1,"properties":{"":""}}',
    '{"message_id":"😀","address":"a","received_at":1,"body":"\\\\u0041"}',
]

FIELDS = {
    "message_id": ['"m"', '"ID:1-2"', '""', "7", "null"],
    "address": ['"orders"', '"a.b"', '"x y"', "1", "{}"],
    "received_at": ['"2026-11-21T05:00:00Z"', '"2026-11-21T05:00:00.123456+02:00"',
                    '"2026-11-21T05:00:00.1234567Z"', "1795219200000", "1.5e12", '"yesterday"', "-1"],
    "properties": ['{"_AMQ_DUPL_ID":"k1"}', '{"_AMQ_BRIDGE_DUP":"b","_AMQ_DUPL_ID":"k"}',
                   '{"_AMQ_DUPL_ID":123456789012345678}', '{"_AMQ_DUPL_ID":-0}', '{"x":[1]}', "[]", "null"],
    "txn_id": ['"t1"', "5", "null"],
    "source_id": ['"p1"', "false"],
    "seq": ["0", "42", "-7", "3.5", '"1"', "1e2"],
    "body": ['"hello"', '"tab\\tbackslash\\\\"', '"é ü 😀"', '"\\u0041"', '""', "{}"],
    "other": ['"x"', "1"],
}


def _generated(rng: random.Random, n: int) -> list[bytes]:
    lines = []
    for _ in range(n):
        names = ["message_id", "address", "received_at"]
        names += [f for f in ("properties", "txn_id", "source_id", "seq", "body", "other") if rng.random() < 0.4]
        names = [f for f in names if rng.random() < 0.97]
        rng.shuffle(names)
        # mostly well-formed values, so that both paths see plenty of valid lines
        members = [f'"{f}":{FIELDS[f][0] if rng.random() < 0.6 else rng.choice(FIELDS[f])}' for f in names]
        line = "{" + ",".join(members) + "}"
        if rng.random() < 0.05:
            line = line[: rng.randrange(len(line))]
        if rng.random() < 0.03:
            line += rng.choice([" ", "x", "}", "\t"])
        raw = line.encode()
        if rng.random() < 0.01:
            raw = raw.replace(b'"m"', b'"\xff"')
        lines.append(raw)
    return lines


def _python_view(raw: bytes) -> dict:
    try:
        m = parse_line(raw)
    except InvalidLine as error:
        return {"error": str(error)}
    return {
        "error": None, "message_id": m.message_id, "address": m.address,
        "received_us": m.received_at_us, "properties": list(m.properties.items()), "txn_id": m.txn_id,
        "source_id": m.source_id, "seq": m.seq, "body": m.body, "extra_fields": dict(m.extra_fields),
    }


def _spark_rows(spark, raws: list[bytes]):
    lines = spark.createDataFrame(
        [(raw, 0, "f.jsonl", i + 1, None) for i, raw in enumerate(raws)],
        "raw binary, file_index int, source_file string, line_number long, read_error string")
    fast = parsing.fast_parse(lines).cache()
    parsed = parsing.parsed_lines(fast, parsing.slow_parse(fast.filter("slow")))
    slow_lines = {r.line_number for r in fast.filter("slow").select("line_number").collect()}
    # received_at as micros: PySpark cannot turn 0001-01-01T00:00Z into a local datetime
    parsed = parsed.withColumn("received_at", F.unix_micros("received_at"))
    # as entries, in the map's order (collect() would give a dict, sorted by PySpark)
    parsed = parsed.withColumn("properties", F.map_entries("properties"))
    rows = {r.line_number: r for r in parsed.collect()}
    fast.unpersist()
    return rows, slow_lines


def _spark_view(row) -> dict:
    if row.error is not None:
        return {"error": row.error}
    return {
        "error": None, "message_id": row.message_id, "address": row.address,
        "received_us": row.received_us, "properties": [tuple(entry) for entry in row.properties or ()],
        "txn_id": row.txn_id,
        "source_id": row.source_id, "seq": row.seq, "body": row.body, "extra_fields": dict(row.extra_fields or {}),
    }


@pytest.mark.parametrize("seed", [1, 2])
def test_fast_path_agrees_with_the_envelope(spark, seed):
    raws = [line.encode() for line in CURATED] + _generated(random.Random(seed), 1500)
    rows, slow = _spark_rows(spark, raws)
    assert len(rows) == len(raws)
    for number, raw in enumerate(raws, start=1):
        assert _spark_view(rows[number]) == _python_view(raw), raw
        assert rows[number].received_at == rows[number].received_us
    fast_valid = [n for n in rows if n not in slow]
    assert all(rows[n].error is None for n in fast_valid)
    # the test means something only if both paths carry many lines
    assert len(fast_valid) > 200 and len(slow) > 200


def test_typical_lines_take_the_fast_path(spark):
    """Lines as exporters (and our own generators) write them never need a Python worker."""
    from msgdedup.bench.workload import Workload, write_batch
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        write_batch(Path(tmp), 0, Workload(messages=400, addresses=5, files=1))
        raws = [line.rstrip(b"\n") for p in sorted(Path(tmp).glob("*.jsonl")) for line in p.open("rb")]
    raws += [json.dumps({"message_id": "m", "address": "a", "received_at": "2026-11-21T05:00:00.250+00:00",
                         "properties": {"_AMQ_DUPL_ID": "k"}, "txn_id": "t", "body": "b"}).encode()]
    rows, slow = _spark_rows(spark, raws)
    assert not slow
    assert all(r.error is None for r in rows.values())


# Pieces of lines near the grammar's edges, glued at random: mostly lines only the envelope can
# decide (or refuse), some the JVM decoder takes.
_LINE_PIECES = ['{', '}', ',', ':', ' ', '\t', '\r', '\n', '"', '\\', '\\"', '\\n', '\\u0041', '\\x', '\x01', '\x00',
                '<', '>', 'é', '\ufeff', '"message_id"', '"a"', '"b\\\\"', '0', '-', '-0', '01', '7', '9' * 18,
                '9' * 19, '1.5', 'null', 'true', '[]', '"seq"', '"properties"', '"received_at"', '"body"',
                '"message_i\\u0064"', '"x"']


def test_lines_near_the_grammars_edges_agree_with_the_envelope(spark):
    """The JVM decoder (msgdedup.jvm.EnvelopeFields) against the envelope on lines glued from
    the pieces above, and on the curated lines with a piece put in at every few characters."""
    rng = random.Random(5)
    lines = list(CURATED) + [json.dumps({"message_id": "m", "address": "a", "received_at": 1,
                                         "properties": {"k": "v", "n": 3}, "body": "x\\\"y"})]
    lines += ["".join(rng.choice(_LINE_PIECES) for _ in range(rng.randint(1, 30))) for _ in range(6000)]
    lines += [line[:cut] + piece + line[cut:] for line in CURATED[:6] for piece in _LINE_PIECES
              for cut in range(0, len(line), 5)]
    raws = [line.encode("utf-8", errors="surrogatepass") for line in lines]
    rows, slow = _spark_rows(spark, raws)
    for number, raw in enumerate(raws, start=1):
        assert _spark_view(rows[number]) == _python_view(raw), raw
    # the comparison means something only if the fast path takes many of them
    assert len(raws) - len(slow) > 300
