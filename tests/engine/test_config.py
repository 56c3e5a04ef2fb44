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


# -- policies and domains (issue 11) ---------------------------------------------------------------
from msgdedup.config import (  # noqa: E402
    APAMA, COUNT, TIME, AddressSetting, parse_duration_us,
)


def test_existing_configs_keep_their_exact_meaning_and_fingerprint():
    """A config without the new keys is the same data as before: same dict, same fingerprint."""
    settings = parse_settings({"address_settings": {"#": {"id_cache_size": 3}, "orders.*": {}}})
    assert settings.as_dict() == {"#": {"id_cache_size": 3}, "orders.*": {"id_cache_size": 20000}}
    assert settings.setting_for("x") == AddressSetting(id_cache_size=3)
    assert settings.setting_for("x").policy == COUNT and settings.domain("x") == "x"
    # the digest of the canonical JSON the engine has always written into its manifests
    assert settings.fingerprint() == __import__("hashlib").sha256(
        b'{"#":{"id_cache_size":3},"orders.*":{"id_cache_size":20000}}').hexdigest()
    assert parse_settings({"address_settings": {"#": {"policy": "count", "id_cache_size": 3}}}).fingerprint() \
        == parse_settings({"address_settings": {"#": {"id_cache_size": 3}}}).fingerprint()


def test_apama_defaults_are_apamas():
    setting = parse_settings({"address_settings": {"jms.#": {"policy": "apama"}}}).setting_for("jms.q")
    assert (setting.policy, setting.per_source_window, setting.expiry_seconds) == (APAMA, 2000, 120)
    assert setting.id_cache_size is None and setting.checks
    assert setting.as_dict() == {"policy": "apama", "per_source_window": 2000, "expiry_seconds": 120}
    off = parse_settings({"address_settings": {"#": {"policy": "apama", "per_source_window": 0}}})
    assert off.setting_for("a").per_source_window == 0 and off.setting_for("a").expiry_seconds == 120


@pytest.mark.parametrize("written,microseconds", [
    ("PT2M", 120_000_000), (120, 120_000_000), (0.5, 500_000), ("PT0.25S", 250_000), ("PT1,5S", 1_500_000),
    ("P1D", 86_400_000_000), ("P1DT2H3M4S", 93_784_000_000), ("P2W", 14 * 86_400_000_000), ("pt90s", 90_000_000),
])
def test_durations(written, microseconds):
    assert parse_duration_us(written, "w") == microseconds


def test_time_policy_window_and_cap():
    settings = parse_settings({"address_settings": {
        "nats.#": {"policy": "time", "duplicate_window": "PT2M"},
        "sqs.#": {"policy": "time", "duplicate_window": 300, "id_cache_size": 1000},
        "plain": {"policy": "time"},
    }})
    assert settings.setting_for("nats.s").duplicate_window_us == 120_000_000
    assert settings.setting_for("nats.s").id_cache_size is None
    assert settings.setting_for("sqs.q").id_cache_size == 1000
    assert settings.setting_for("plain").duplicate_window_us == 120_000_000  # NATS' default
    assert settings.as_dict()["nats.#"] == {"policy": "time", "duplicate_window": 120}
    assert settings.as_dict()["sqs.#"] == {"policy": "time", "duplicate_window": 300, "id_cache_size": 1000}
    # PT2M and 120 are the same window, so the same fingerprint
    assert parse_settings({"address_settings": {"a": {"policy": TIME, "duplicate_window": "PT2M"}}}).fingerprint() \
        == parse_settings({"address_settings": {"a": {"policy": TIME, "duplicate_window": 120}}}).fingerprint()


def test_domains_share_one_cache():
    settings = parse_settings({"address_settings": {
        "orders.eu": {"domain": "orders"}, "orders.us": {"domain": "orders"},
        "jms.*": {"policy": "apama", "domain": "jms", "expiry_seconds": 300},
        "jms.audit": {"policy": "apama", "expiry_seconds": 300},
    }})
    assert settings.domain("orders.eu") == settings.domain("orders.us") == "orders"
    assert settings.domain("orders") == "orders"  # the namesake address: its own domain, same window
    assert settings.domain("jms.q1") == settings.domain("jms.q2") == "jms"
    assert settings.domain("jms.audit") == "jms.audit"
    assert settings.domain("other") == "other"
    assert settings.as_dict()["orders.eu"] == {"id_cache_size": 20000, "domain": "orders"}


@pytest.mark.parametrize("entries,message", [
    ({"#": {"policy": "fifo"}}, "unknown policy 'fifo'; allowed: count, apama, time"),
    ({"#": {"per_source_window": 5}}, "per_source_window belongs to policy apama, not count"),
    ({"#": {"policy": "apama", "id_cache_size": 5}}, "id_cache_size belongs to policy count or time, not apama"),
    ({"#": {"policy": "time", "expiry_seconds": 5}}, "expiry_seconds belongs to policy apama, not time"),
    ({"#": {"policy": "count", "duplicate_window": 5}}, "duplicate_window belongs to policy time, not count"),
    ({"#": {"policy": "apama", "per_source_window": -1}}, "per_source_window must be >= 0"),
    ({"#": {"policy": "apama", "expiry_seconds": 1.5}}, "expiry_seconds must be a whole number"),
    ({"#": {"policy": "apama", "per_source_window": 0, "expiry_seconds": 0}}, "are both 0"),
    ({"#": {"policy": "time", "duplicate_window": "PT2X"}}, "must be an ISO-8601 duration"),
    ({"#": {"policy": "time", "duplicate_window": "P1M"}}, "no years or months"),
    ({"#": {"policy": "time", "duplicate_window": "PT"}}, "must be an ISO-8601 duration"),
    ({"#": {"policy": "time", "duplicate_window": "P1DT"}}, "must be an ISO-8601 duration"),
    ({"#": {"policy": "time", "duplicate_window": 0}}, "must be longer than 0"),
    ({"#": {"policy": "time", "duplicate_window": 1e-7}}, "must be longer than 0"),
    ({"#": {"policy": "time", "duplicate_window": "P99999999D"}}, "must be at most 10000 years"),
    ({"#": {"policy": "time", "duplicate_window": "120"}}, "must be an ISO-8601 duration"),
    ({"#": {"policy": "time", "duplicate_window": [1]}}, "must be an ISO-8601 duration"),
    ({"#": {"policy": "apama", "expiry_seconds": 10**15}}, "expiry_seconds must be at most"),
    ({"#": {"policy": "time", "duplicate_window": -5}}, "must be longer than 0"),
    ({"#": {"policy": "time", "duplicate_window": True}}, "must be an ISO-8601 duration"),
    ({"#": {"policy": "time", "duplicate_window": float("nan")}}, "must be a finite number"),
    ({"#": {"policy": "time", "id_cache_size": 0}}, "would forget every id at once"),
    ({"#": {"policy": "time", "id_cache_size": -3}}, "id_cache_size must be >= 0"),
    ({"#": {"domain": ""}}, "domain must be a non-empty string"),
    ({"#": {"domain": 7}}, "domain must be a non-empty string"),
    ({"#": {"domain": "orders.#"}}, "is a cache name, not a match"),
    ({"#": {"domain": "BRIDGE.x"}}, "may not start with 'BRIDGE.'"),
    ({"a": {"domain": "d", "id_cache_size": 3}, "b": {"domain": "d", "id_cache_size": 4}},
     "addresses 'a' and 'b' share domain 'd' but not its window"),
    ({"a": {"domain": "d"}, "b": {"domain": "d", "policy": "time"}}, "share domain 'd' but not its window"),
    ({"a": {"domain": "d", "policy": "apama"}, "b": {"domain": "d", "policy": "apama", "expiry_seconds": 5}},
     "share domain 'd' but not its window"),
    ({"a": {"domain": "d", "id_cache_size": 3}, "d": {"id_cache_size": 5}},
     "address 'd' is its own domain and so shares cache 'd' with 'a', but not its window"),
])
def test_every_policy_mistake_is_one_line(entries, message):
    with pytest.raises(ConfigError) as error:
        parse_settings({"address_settings": entries}, source="cfg.yaml")
    assert message in str(error.value) and "\n" not in str(error.value)
    assert str(error.value).startswith("cfg.yaml")


def test_a_wildcard_namesake_of_a_domain_is_refused_when_it_shows_up():
    """'#' matches an address named 'jms' too; parsing cannot know whether it will ever exist."""
    settings = parse_settings({"address_settings": {"jms.*": {"policy": "apama", "domain": "jms"}}})
    assert settings.domain("jms.q") == "jms"
    with pytest.raises(ConfigError, match="address 'jms' is its own domain and so shares cache 'jms' with 'jms.*'"):
        settings.domain("jms")


def test_namesake_address_in_another_domain_is_no_conflict():
    settings = parse_settings({"address_settings": {
        "a": {"domain": "d", "id_cache_size": 3}, "d": {"domain": "e", "id_cache_size": 9}}})
    assert settings.domain("a") == "d" and settings.domain("d") == "e"


def test_settings_still_pickle_to_their_data():
    import pickle
    settings = parse_settings({"address_settings": {"a": {"policy": "time", "duplicate_window": "PT5M",
                                                          "domain": "d"}}})
    again = pickle.loads(pickle.dumps(settings))
    assert again.as_dict() == settings.as_dict() and again.domain("a") == "d"


# -- the window-miss audit's horizon (issue 12, docs/semantics.md §9) -------------------------------
def test_the_audit_horizon_is_set_at_the_top_level_and_survives_pickling():
    import pickle

    from msgdedup.config import AUDIT_HORIZON_MULTIPLE

    default = parse_settings({"address_settings": {"#": {"id_cache_size": 3}}})
    assert default.audit_horizon == 0, "off unless asked for: it costs more than 10% of a batch"
    for document in ({"window_audit": None}, {"window_audit": {}}):
        assert parse_settings({"address_settings": {}, **document}).audit_horizon == AUDIT_HORIZON_MULTIPLE == 4
    for horizon in (0, 10):
        settings = parse_settings({"address_settings": {"#": {"id_cache_size": 3}},
                                   "window_audit": {"horizon": horizon}})
        assert settings.audit_horizon == horizon
        assert pickle.loads(pickle.dumps(settings)).audit_horizon == horizon
        assert settings.fingerprint() == default.fingerprint(), "no outcome depends on it"


@pytest.mark.parametrize("audit,message", [
    ({"horizon": -1}, "window_audit: horizon must be >= 0 (0 turns the audit off), got -1"),
    ({"horizon": "PT1H"}, "window_audit: horizon must be a whole number, got 'PT1H'"),
    ({"horizon": 1001}, "window_audit: horizon must be at most 1000 windows, got 1001"),
    ({"horison": 2}, "window_audit: unknown key(s) horison; allowed: horizon"),
    (4, "window_audit must be a mapping like {horizon: 4}"),
])
def test_every_audit_mistake_is_reported(audit, message):
    with pytest.raises(ConfigError) as caught:
        parse_settings({"address_settings": {}, "window_audit": audit}, source="cfg.yaml")
    assert str(caught.value) == f"cfg.yaml: {message}"
