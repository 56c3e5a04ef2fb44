"""The parse's first pass finds the keys with the census (batch._census_with_keys), where every
address is its own cache and the driver ranks the units: its census and the rows it hands the
ranks must be what the census pass and the key columns' pass give (parsing.census, then
parsing.with_cache_keys), line for line, with Apama caches' senders too, and where it may not run
(a domain, detection off, a batch decided on the driver, ranks that do not fit it) the engine
must not take it.

The engine-vs-model property tests run it too (the plans decided in Spark, on their configs
without a domain or a size 0, own Apama caches among them); these pin its inputs on lines the
generated batches seldom hold.
"""

from __future__ import annotations

import pytest

from msgdedup.config import APAMA, AddressSettings, parse_settings
from msgdedup.engine import parsing, transforms, unit_ranks
from msgdedup.engine import windows as cache_windows
from msgdedup.engine.batch import _census_with_keys, _domain_frame, _domains, _names_by_hash, _parse
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.engine.planning import DRIVER_DECIDE_LINES_CONF, DRIVER_READ_BYTES_CONF, RANKS_HEAP_SHARE_CONF
from msgdedup.engine.reading import list_input_files

LINES = [
    b'{"message_id":"k1","address":"orders","received_at":1,"properties":{"_AMQ_DUPL_ID":"k"}}',
    b'{"message_id":"k2","address":"orders","received_at":2,"properties":{"_AMQ_BRIDGE_DUP":"b"}}',
    b'{"message_id":"k3","address":"orders","received_at":3,'
    b'"properties":{"_AMQ_DUPL_ID":"p","_AMQ_BRIDGE_DUP":"q"}}',  # the bridge's id first
    b'{"message_id":"k4","address":"plain","received_at":4}',  # no key: its address still counts
    b'{"message_id":"k5","address":"bad","received_at":"never","properties":{"_AMQ_DUPL_ID":"k"}}',  # invalid
    b'{"message_id":"k6","address":"billing","received_at":5,"txn_id":"T1","properties":{"_AMQ_DUPL_ID":""}}',
    b'{"message_id":"k6","address":"billing","received_at":6,"txn_id":"T1","properties":{"_AMQ_DUPL_ID":"k"}}',
    b"not json",
    b"",
]
# A line the JVM's strict pass leaves to Python (an escaped key: parsing.fast_parse).
SLOW = b'{"message_id":"s1","address":"sl\\u006fw","received_at":7,"properties":{"_AMQ_DUPL_ID":"z"}}'


@pytest.fixture
def in_spark(spark):
    """Batches read, parsed and decided in Spark (not on the driver), their units ranked there."""
    spark.conf.set(DRIVER_READ_BYTES_CONF, "-1")
    spark.conf.set(DRIVER_DECIDE_LINES_CONF, "-1")
    yield spark
    spark.conf.unset(DRIVER_READ_BYTES_CONF)
    spark.conf.unset(DRIVER_DECIDE_LINES_CONF)


def _batch(root, *files: list[bytes]):
    root.mkdir()
    for index, lines in enumerate(files):
        (root / f"part-{index}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return root


def _run(spark, root, settings):
    kept = []
    files = list_input_files(HadoopFS(spark), str(root))
    staging = str(root.parent / "staging")  # where the census's rows pass through files
    parsed, lines, addresses, keyed, _, found = _parse(spark, HadoopFS(spark), files, settings, kept, staging)
    return parsed, lines, addresses, keyed, found


def _two_passes(spark, parsed, settings):
    """What the census pass and the key columns' pass give of ``parsed``."""
    seen = parsing.census(parsed).first()
    valid = transforms.split_valid(parsed)[0]
    keys = parsing.with_cache_keys(valid, _domain_frame(spark, _domains(set(seen["addresses"]), settings)))
    return seen, keys.select(*transforms.KEY_COLUMNS), keys.select(*unit_ranks.columns([])).toArrow()


def _same_as_two_passes(spark, root, settings):
    parsed, lines, addresses, keyed, found = _run(spark, root, settings)
    assert found is not None, "own caches, ranked on the driver: the census finds the keys"
    seen, keys, rows = _two_passes(spark, parsed, settings)
    assert (lines, addresses, keyed) == (seen["lines"], set(seen["addresses"]), set(map(tuple, seen["keyed"])))
    assert found.keys.columns == transforms.KEY_COLUMNS
    assert found.keys.toArrow().sort_by("row_id").to_pylist() == keys.toArrow().sort_by("row_id").to_pylist()
    assert found.rows.column_names == unit_ranks.COLLECTED
    assert found.rows.sort_by("row_id").to_pylist() == rows.sort_by("row_id").to_pylist()
    return lines, addresses, keyed, found


def test_the_first_pass_finds_what_the_census_and_the_key_columns_pass_find(in_spark, tmp_path):
    settings = parse_settings({"address_settings": {"#": {"id_cache_size": 3}, "orders": {"id_cache_size": 5}}})
    lines, addresses, keyed, found = _same_as_two_passes(in_spark, _batch(tmp_path / "raw", LINES, LINES[:3]), settings)
    assert lines == len(LINES) + 3
    assert addresses == {"orders", "plain", "billing"}
    assert keyed == {("orders", False), ("orders", True), ("billing", False)}
    assert found.rows.num_rows == 6 + 3  # the valid lines of both files


def test_lines_left_to_python_are_counted_and_keyed_as_the_others(in_spark, tmp_path):
    lines, addresses, keyed, found = _same_as_two_passes(
        in_spark, _batch(tmp_path / "raw", [*LINES, SLOW], [SLOW.replace(b"s1", b"s2")]), AddressSettings())
    assert lines == len(LINES) + 2
    assert "slow" in addresses and ("slow", False) in keyed
    assert found.rows.num_rows == 6 + 2


APAMA_ENTRY = {"policy": "apama", "per_source_window": 2, "expiry_seconds": 3}


@pytest.mark.parametrize("config, sequential", [
    ({"#": APAMA_ENTRY}, {"orders", "billing", "slow"}),  # "plain" has no key: no cache
    ({"#": {"id_cache_size": 3}, "orders": APAMA_ENTRY}, {"orders"}),
    ({"#": {"id_cache_size": 3}, "elsewhere": APAMA_ENTRY}, set()),  # an Apama entry, no Apama cache
])
def test_with_an_apama_entry_the_first_pass_finds_the_senders_too(in_spark, tmp_path, config, sequential):
    """The census collects every keyed message's sender hash before the caches' policies are
    known; ``of_sequential`` keeps those of the Apama caches' messages, as the key columns' pass
    collects them once the caches are known (``unit_ranks.columns``)."""
    settings = parse_settings({"address_settings": config})
    assert settings.own_caches and settings.has_apama
    parsed, lines, addresses, keyed, found = _run(in_spark, _batch(tmp_path / "raw", LINES, [SLOW]), settings)
    assert found is not None and unit_ranks.SENDER in found.rows.column_names
    apama = cache_windows.of_policy(cache_windows.resolve(settings, {}, keyed), APAMA)
    assert {cache.removeprefix(parsing.BRIDGE_CACHE_PREFIX) for cache in apama} == sequential
    by_hash = _names_by_hash(in_spark, sorted(apama), unit_ranks.cache_hash(), "cache") or {}
    got = unit_ranks.of_sequential(found.rows, [h for h, name in by_hash.items() if name in apama])
    seen = parsing.census(parsed).first()
    valid = transforms.split_valid(parsed)[0]
    keys = parsing.with_cache_keys(valid, _domain_frame(in_spark, _domains(set(seen["addresses"]), settings)))
    expected = keys.select(*unit_ranks.columns(apama)).toArrow()
    assert got.column_names == expected.column_names
    assert got.sort_by("row_id").to_pylist() == expected.sort_by("row_id").to_pylist()
    if sequential:
        assert 0 < got[unit_ranks.SENDER].null_count < got.num_rows  # keyless messages have no sender


@pytest.mark.parametrize("config", [
    {"orders": {"domain": "shop", "id_cache_size": 5}},
    {"plain": {"id_cache_size": 0}},
])
def test_no_first_pass_finds_keys_where_an_address_is_not_its_own_cache(in_spark, tmp_path, config):
    settings = parse_settings({"address_settings": config})
    assert not settings.own_caches
    assert _run(in_spark, _batch(tmp_path / "raw", LINES), settings)[-1] is None


def test_the_first_pass_finds_keys_only_where_the_driver_ranks_a_batch_decided_in_spark(spark, in_spark):
    assert AddressSettings().own_caches and parse_settings({"address_settings": {"#": {"id_cache_size": 9}}}).own_caches
    assert _census_with_keys(in_spark, 1_000_000, AddressSettings())
    in_spark.conf.set(RANKS_HEAP_SHARE_CONF, "0")
    try:
        assert not _census_with_keys(in_spark, 1_000_000, AddressSettings())
    finally:
        in_spark.conf.unset(RANKS_HEAP_SHARE_CONF)
    in_spark.conf.unset(DRIVER_DECIDE_LINES_CONF)
    try:
        assert not _census_with_keys(in_spark, 10, AddressSettings())  # decided on the driver
    finally:
        in_spark.conf.set(DRIVER_DECIDE_LINES_CONF, "-1")
