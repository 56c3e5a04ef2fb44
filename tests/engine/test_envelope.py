"""The input envelope (spec §1): what is a valid message, and how keys are spelled."""

import json

import pytest

from msgdedup.config import parse_settings
from msgdedup.envelope import InvalidLine, parse_line
from msgdedup.keys import cache_key


def _parse(doc):
    return parse_line(json.dumps(doc).encode())


def test_timestamps_in_every_accepted_form_give_the_same_instant():
    forms = ["2026-11-21T05:00:01Z", "2026-11-21T06:00:01+01:00", "2026-11-21T05:00:01.000000+00:00", 1795237201000]
    instants = {_parse({"message_id": "m", "address": "a", "received_at": f}).received_at_us for f in forms}
    assert instants == {1795237201000000}


def test_numbers_compare_as_their_decimal_form():
    settings = parse_settings(None)
    for value, key in [(7, "7"), ("7", "7"), (7.0, "7"), (1.5, "1.5")]:
        message = _parse({"message_id": "m", "address": "a", "received_at": 1, "properties": {"_AMQ_DUPL_ID": value}})
        assert cache_key(message.address, message.properties, settings).key == key


def test_bridge_id_wins_and_has_its_own_cache():
    message = _parse({"message_id": "m", "address": "a", "received_at": 1,
                      "properties": {"_AMQ_DUPL_ID": "p", "_AMQ_BRIDGE_DUP": "b"}})
    ck = cache_key(message.address, message.properties, parse_settings(None))
    assert (ck.cache, ck.key) == ("BRIDGE.a", "b")


def test_detection_off_and_keyless_are_not_checked():
    keyless = _parse({"message_id": "m", "address": "a", "received_at": 1})
    assert cache_key(keyless.address, keyless.properties, parse_settings(None)) is None
    off = _parse({"message_id": "m", "address": "a", "received_at": 1, "properties": {"_AMQ_DUPL_ID": "k"}})
    detection_off = parse_settings({"address_settings": {"a": {"id_cache_size": 0}}})
    assert cache_key(off.address, off.properties, detection_off) is None


def test_nulls_in_optional_fields_mean_absent():
    message = _parse({"message_id": "m", "address": "a", "received_at": 1, "txn_id": None, "properties": None})
    assert message.txn_id is None and message.properties == {}


@pytest.mark.parametrize("raw,error", [
    (b'{"message_id":"m","address":"a","received_at":NaN}', "not valid JSON: NaN is not a JSON number"),
    (b'{"message_id":"m","address":"","received_at":1}', "address must not be empty"),
    (b'{"message_id":"m","address":"a","received_at":true}', "received_at must be an ISO-8601 string"),
    (b'{"message_id":"m","address":"a","received_at":99999999999999999}', "out of range"),
    (b'{"message_id":"m","address":"a","received_at":1,"seq":true}', "seq must be an integer, got boolean"),
    (b'{"message_id":"m","address":"a","received_at":1,"txn_id":5}', "txn_id must be a string, got number"),
    (b'{"message_id":"m","address":"a","received_at":1,"properties":[]}', "properties must be an object"),
    (b"   ", "empty line"),
])
def test_invalid_lines(raw, error):
    with pytest.raises(InvalidLine, match=error):
        parse_line(raw)


def test_an_unpaired_surrogate_escape_is_an_invalid_line_not_a_crash():
    # json.loads accepts it, but no Parquet or Arrow string can hold the result.
    with pytest.raises(InvalidLine, match="unpaired UTF-16 surrogate"):
        parse_line(b'{"message_id":"m\\ud800","address":"a","received_at":1}')
    paired = parse_line(b'{"message_id":"m\\ud83d\\ude00","address":"a","received_at":1}')
    assert paired.message_id == "m\U0001F600"


@pytest.mark.parametrize("field,value,reason", [
    ("x_extra", "1e400", "not valid JSON: number 1e400 is out of range"),
    ("properties", '{"_AMQ_DUPL_ID": -1e999}', "not valid JSON: number -1e999 is out of range"),
    ("seq", "9" * 5000, "not valid JSON: a number with more than 4300 digits"),
    ("address", '"b", "address": "c"', "not valid JSON: duplicate key 'address'"),
])
def test_numbers_beyond_their_type_and_repeated_keys_are_refused(field, value, reason):
    """Before, 1e400 became inf (stored as "Infinity"), 5,000 digits raised ValueError (a failed
    batch), and a repeated key silently kept its last copy."""
    raw = f'{{"message_id": "m", "received_at": 1, "address": "a", "{field}": {value}}}'.encode()
    with pytest.raises(InvalidLine) as error:
        parse_line(raw)
    assert str(error.value) == reason
