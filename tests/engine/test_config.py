"""Address settings: Artemis matching, most specific wins, and a clear message for every mistake."""

import pytest

from msgdedup.config import DEFAULT_ID_CACHE_SIZE, ConfigError, load_settings, parse_settings, pattern_matches


@pytest.mark.parametrize("pattern,address,matches", [
    ("#", "a", True), ("#", "orders.eu.paris", True),
    ("orders.*", "orders.eu", True), ("orders.*", "orders", False), ("orders.*", "orders.eu.paris", False),
    ("orders.#", "orders", True), ("orders.#", "orders.eu.paris", True), ("orders.#", "ordersx", False),
    ("*.eu", "orders.eu", True), ("a.#.z", "a.z", True), ("a.#.z", "a.b.c.z", True), ("a.#.z", "a.b.c", False),
    ("orders.eu", "orders.eu", True), ("orders.eu", "orders.us", False),
])
def test_artemis_wildcards(pattern, address, matches):
    assert pattern_matches(pattern, address) is matches


def test_most_specific_match_wins():
    settings = parse_settings({"address_settings": {
        "#": {"id_cache_size": 1}, "orders.#": {"id_cache_size": 2}, "orders.*": {"id_cache_size": 3},
        "orders.eu": {"id_cache_size": 4}, "*.eu": {"id_cache_size": 5},
    }})
    assert settings.id_cache_size("orders.eu") == 4          # exact beats wildcards
    assert settings.id_cache_size("orders.us") == 3          # '*' beats '#'
    assert settings.id_cache_size("orders.us.west") == 2
    assert settings.id_cache_size("billing.eu") == 5
    assert settings.id_cache_size("other") == 1


def test_defaults_without_config():
    assert load_settings(None).id_cache_size("anything") == DEFAULT_ID_CACHE_SIZE
    assert parse_settings({"address_settings": {"a": {"id_cache_size": 0}}}).id_cache_size("a") == 0


@pytest.mark.parametrize("document,message", [
    ({"adress_settings": {}}, "unknown key(s) adress_settings"),
    ({"address_settings": {"#": {"id_cache_sise": 5}}}, "unknown key(s) id_cache_sise"),
    ({"address_settings": {"#": {"id_cache_size": -1}}}, "id_cache_size must be >= 0"),
    ({"address_settings": {"#": {"id_cache_size": "big"}}}, "id_cache_size must be a whole number"),
    ({"address_settings": {"#": {"id_cache_size": True}}}, "id_cache_size must be a whole number"),
    ({"address_settings": {"orders.#x": {"id_cache_size": 1}}}, "must stand alone as a whole word"),
    ({"address_settings": {"orders..eu": {"id_cache_size": 1}}}, "has an empty word"),
    ({"address_settings": {"": {"id_cache_size": 1}}}, "must be a non-empty string"),
    ({"address_settings": {"#": 5}}, "must be a mapping"),
    ({"address_settings": ["#"]}, "must be a mapping of match"),
    (["address_settings"], "top level must be a mapping"),
])
def test_every_mistake_is_reported(document, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_settings(document, source="cfg.yaml")


def test_yaml_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("address_settings: {#: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(str(bad))
    good = tmp_path / "good.yaml"
    good.write_text('address_settings:\n  "#": {id_cache_size: 20000}\n  "orders.*": {id_cache_size: 50000}\n')
    settings = load_settings(str(good))
    assert settings.id_cache_size("orders.eu") == 50000 and settings.id_cache_size("x") == 20000
    assert settings.fingerprint() == load_settings(str(good)).fingerprint()
