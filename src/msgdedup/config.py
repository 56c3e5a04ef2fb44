"""Address settings: which duplicate-detection window applies to which address.

Users already know Artemis' ``<address-settings>``, so the configuration reads the same way:
a match pattern per entry, ``#`` for any number of words, ``*`` for exactly one, words
separated by ``.``, and the most specific match wins (the whole entry: settings are not merged
across matches). The YAML file is validated once, at the edge, and every mistake is reported
with where it is and what was expected.

Each entry picks a ``policy`` (docs/semantics.md §8):

- ``count`` (the default): Artemis' last ``id_cache_size`` accepted keys;
- ``apama``: Apama's per-sender queues (``per_source_window``) whose overflow expires by time
  (``expiry_seconds``);
- ``time``: NATS-style ``duplicate_window``, optionally capped by ``id_cache_size``.

``domain: NAME`` makes every address of the entry share the cache ``NAME`` (Apama's
dupDetectionDomainId); by default an address is its own domain, as before.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

import yaml

DEFAULT_ID_CACHE_SIZE = 20000
"""Artemis' default ``id-cache-size``."""

ANY_WORDS = "#"
ONE_WORD = "*"
WORD_SEPARATOR = "."

COUNT = "count"
APAMA = "apama"
TIME = "time"
POLICIES = (COUNT, APAMA, TIME)

DEFAULT_PER_SOURCE_WINDOW = 2000
"""Apama's default ``dupDetectionPerSourceExpiryWindowSize``."""
DEFAULT_EXPIRY_SECONDS = 120
"""Apama's default ``dupDetectionExpiryTimeSecs`` (2 minutes)."""
DEFAULT_DUPLICATE_WINDOW_US = 120 * 1_000_000
"""NATS JetStream's default ``duplicate_window`` (2 minutes), in microseconds like received_at."""
AUDIT_HORIZON_MULTIPLE = 4
"""docs/semantics.md §9: with ``window_audit:`` in the config, a cache remembers the keys that left
its window for this many more windows (acceptances for ``count``, time for ``time``) unless
``horizon`` says otherwise. Without it the audit is off: it costs more than 10% of a batch
(docs/benchmarks.md), so it is for the batches whose windows are being sized."""
AUDIT_OFF = 0
MAX_AUDIT_HORIZON = 1000
"""A horizon is a multiple of the window; beyond this the record is the whole history, not a window."""
AUDIT_COVERAGE = 0.99
"""§9: the recommended ``id_cache_size`` holds this share of a cache's window misses."""
MAX_WINDOW_SECONDS = 10000 * 366 * 86400
"""Longer than any two ``received_at`` can be apart (years 1 to 9999): a window beyond it is a
mistake, and refusing it keeps every instant arithmetic within 64 bits for the engine."""

# The keys each policy's entry may carry, so a typo or a key of another policy is always caught
# instead of silently ignored.
POLICY_KEYS = {
    COUNT: {"id_cache_size"},
    APAMA: {"per_source_window", "expiry_seconds"},
    TIME: {"duplicate_window", "id_cache_size"},
}
COMMON_KEYS = {"policy", "domain"}
ENTRY_KEYS = COMMON_KEYS | set().union(*POLICY_KEYS.values())
TOP_LEVEL_KEYS = {"address_settings", "window_audit"}
AUDIT_KEYS = {"horizon"}
BRIDGE_PREFIX = "BRIDGE."


class ConfigError(ValueError):
    """A configuration mistake, phrased for the person who wrote the file."""


@dataclass(frozen=True)
class AddressSetting:
    """One entry, normalised: the policy, its window and the domain (None: the address itself).

    ``id_cache_size`` keeps its old meaning for ``count``; for ``time`` it is the optional count
    cap (None: no cap) and for ``apama`` it is None. Times are whole microseconds, the unit of
    ``received_at``, so comparisons are exact.
    """

    id_cache_size: int | None = DEFAULT_ID_CACHE_SIZE
    policy: str = COUNT
    per_source_window: int | None = None
    expiry_seconds: int | None = None
    duplicate_window_us: int | None = None
    domain: str | None = None

    @property
    def window(self) -> tuple:
        """What the cache remembers; addresses sharing a domain must agree on it."""
        return (self.policy, self.id_cache_size, self.per_source_window, self.expiry_seconds,
                self.duplicate_window_us)

    @property
    def checks(self) -> bool:
        """False only for Artemis' ``id_cache_size: 0``, the one way to turn detection off."""
        return not (self.policy == COUNT and self.id_cache_size == 0)

    def domain_of(self, address: str) -> str:
        return self.domain if self.domain is not None else address

    def as_dict(self) -> dict[str, Any]:
        """The entry as written, normalised; a plain count entry stays ``{id_cache_size: N}``."""
        out: dict[str, Any] = {}
        if self.policy != COUNT:
            out["policy"] = self.policy
        if self.policy == APAMA:
            out["per_source_window"] = self.per_source_window
            out["expiry_seconds"] = self.expiry_seconds
        if self.policy == TIME:
            out["duplicate_window"] = _seconds_text(self.duplicate_window_us)
        if self.id_cache_size is not None:
            out["id_cache_size"] = self.id_cache_size
        if self.domain is not None:
            out["domain"] = self.domain
        return out


def _seconds_text(microseconds: int) -> int | float:
    seconds, rest = divmod(microseconds, 1_000_000)
    return seconds if rest == 0 else microseconds / 1_000_000


_ISO_DURATION = re.compile(
    r"P(?:(?P<weeks>\d+)W|(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:[.,]\d{1,6})?)S)?)?)"
)


def parse_duration_us(value: Any, where: str) -> int:
    """An ISO-8601 duration (``PT2M``, ``P1DT12H``, ``PT0.5S``) or a number of seconds, in us.

    Years and months are refused: they have no fixed length, and a window must have one.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{where} must be an ISO-8601 duration like PT2M or a number of seconds, got {value!r}")
    if isinstance(value, int):
        microseconds = value * 1_000_000
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be a finite number of seconds, got {value!r}")
        microseconds = round(value * 1_000_000)
    elif isinstance(value, str):
        text = value.strip().upper()
        match = _ISO_DURATION.fullmatch(text)
        if match is None or text == "P" or text.endswith("T"):  # the pattern lets these empty forms through
            raise ConfigError(
                f"{where} must be an ISO-8601 duration like PT2M, PT90S or P1DT2H "
                f"(days, hours, minutes, seconds; no years or months) or a number of seconds, got {value!r}"
            )
        parts = {k: v for k, v in match.groupdict().items() if v is not None}
        seconds_text = parts.get("seconds", "0").replace(",", ".")
        whole, _, fraction = seconds_text.partition(".")
        microseconds = (
            int(parts.get("weeks", 0)) * 7 * 86400 + int(parts.get("days", 0)) * 86400
            + int(parts.get("hours", 0)) * 3600 + int(parts.get("minutes", 0)) * 60 + int(whole)
        ) * 1_000_000 + int((fraction + "000000")[:6])
    else:
        raise ConfigError(f"{where} must be an ISO-8601 duration like PT2M or a number of seconds, got {value!r}")
    if microseconds <= 0:
        raise ConfigError(
            f"{where} must be longer than 0, got {value!r} "
            f"(to turn detection off use policy count with id_cache_size: 0)"
        )
    if microseconds > MAX_WINDOW_SECONDS * 1_000_000:
        raise ConfigError(f"{where} must be at most 10000 years, got {value!r}")
    return microseconds


def _words(text: str) -> list[str]:
    return text.split(WORD_SEPARATOR)


def validate_pattern(pattern: str) -> None:
    """Raise ConfigError unless ``pattern`` is a well-formed Artemis match."""
    if not isinstance(pattern, str) or pattern == "":
        raise ConfigError(f"address_settings: match {pattern!r} must be a non-empty string")
    for word in _words(pattern):
        if word == "":
            raise ConfigError(
                f"address_settings: match {pattern!r} has an empty word "
                f"(words are separated by single '{WORD_SEPARATOR}')"
            )
        if (ANY_WORDS in word or ONE_WORD in word) and word not in (ANY_WORDS, ONE_WORD):
            raise ConfigError(
                f"address_settings: match {pattern!r}: wildcards '#' and '*' must stand "
                f"alone as a whole word, found {word!r}"
            )


def pattern_matches(pattern: str, address: str) -> bool:
    """Artemis wildcard matching: ``#`` is zero or more words, ``*`` exactly one."""
    return _match_words(tuple(_words(pattern)), tuple(_words(address)))


@lru_cache(maxsize=65536)
def _match_words(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == ANY_WORDS:
        return any(_match_words(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head == ONE_WORD or head == words[0]) and _match_words(rest, words[1:])


def specificity(pattern: str) -> tuple:
    """Sort key: smaller is more specific.

    Artemis ranks a match without ``#`` above one with it, then one without ``*``, then the
    longer one. Ties are broken word by word (literal before ``*`` before ``#``) and finally by
    the pattern text, so the choice is always deterministic.
    """
    words = _words(pattern)
    rank = {ANY_WORDS: 2, ONE_WORD: 1}
    return (
        words.count(ANY_WORDS),
        words.count(ONE_WORD),
        -len(words),
        tuple(rank.get(w, 0) for w in words),
        pattern,
    )


@dataclass(frozen=True)
class AddressSettings:
    """The validated address settings; ``setting_for(address)`` is all the engine asks.

    ``audit_horizon`` is the window-miss audit's horizon (§9), in multiples of each window; 0 (the
    default): the audit is off. It never changes an outcome, so it is not part of ``fingerprint()``."""

    entries: Mapping[str, AddressSetting] = field(default_factory=dict)
    audit_horizon: int = AUDIT_OFF

    def __post_init__(self) -> None:
        ordered = sorted(self.entries, key=specificity)
        object.__setattr__(self, "_ordered", tuple(ordered))
        object.__setattr__(self, "_cache", {})
        declared: dict[str, tuple[str, AddressSetting]] = {}
        for pattern, setting in sorted(self.entries.items()):
            if setting.domain is not None:
                declared.setdefault(setting.domain, (pattern, setting))
        object.__setattr__(self, "_declared", declared)

    def matching_pattern(self, address: str) -> str | None:
        """The most specific entry matching ``address``, None for the defaults."""
        for pattern in self._ordered:
            if pattern_matches(pattern, address):
                return pattern
        return None

    def setting_for(self, address: str) -> AddressSetting:
        cached = self._cache.get(address)
        if cached is not None:
            return cached
        pattern = self.matching_pattern(address)
        found = AddressSetting(id_cache_size=DEFAULT_ID_CACHE_SIZE) if pattern is None else self.entries[pattern]
        if found.domain is None and address in self._declared:
            conflict = self.namesake_conflict(address)
            if conflict:
                # Only an address that is also a declared domain's name gets here, and only when a
                # wildcard or the default gave it another window: nothing at parse time could tell.
                raise ConfigError(conflict)
        self._cache[address] = found
        return found

    def namesake_conflict(self, domain: str) -> str | None:
        """An address named like a domain, in no other domain, is in that domain (Apama shares a
        cache by name); it must then have the domain's window."""
        pattern = self.matching_pattern(domain)
        own = AddressSetting(id_cache_size=DEFAULT_ID_CACHE_SIZE) if pattern is None else self.entries[pattern]
        declared_by, setting = self._declared[domain]
        if own.domain is not None or own.window == setting.window:
            return None
        return (f"address {domain!r} is its own domain and so shares cache {domain!r} with "
                f"{declared_by!r}, but not its window ({_describe(own)} vs {_describe(setting)}); "
                f"give {domain!r} domain: {domain} with the same window, or rename the domain")

    def id_cache_size(self, address: str) -> int:
        return self.setting_for(address).id_cache_size

    def domain(self, address: str) -> str:
        """The name of the cache an address's ``_AMQ_DUPL_ID`` keys are checked in."""
        return self.setting_for(address).domain_of(address)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {p: s.as_dict() for p, s in sorted(self.entries.items())}

    @property
    def own_caches(self) -> bool:
        """Whether every address checks its keys in a cache of its own (no ``domain``, no size 0):
        then an address's cache is known without matching it to an entry, so the engine can
        compute the keys before it knows the batch's addresses."""
        return all(s.domain is None and s.checks for s in self.entries.values())

    @property
    def has_apama(self) -> bool:
        """Whether an entry keeps an Apama cache (§8.2), whose messages the engine also sorts by
        their sender."""
        return any(s.policy == APAMA for s in self.entries.values())

    def fingerprint(self) -> str:
        canonical = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    # Settings travel to Spark's Python workers inside closures: keep pickling to the data.
    def __reduce__(self):
        return (AddressSettings, (dict(self.entries), self.audit_horizon))


def _reject_unknown_keys(mapping: dict, allowed: set[str], where: str) -> None:
    unknown = set(mapping) - allowed
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )


def parse_settings(document: Any, source: str = "config") -> AddressSettings:
    """Validate a parsed YAML/JSON document and build the settings."""
    if document is None:
        return AddressSettings()
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: the top level must be a mapping with 'address_settings' "
                          f"(and optionally 'window_audit')")
    _reject_unknown_keys(document, TOP_LEVEL_KEYS, source)
    raw_entries = document.get("address_settings") or {}
    if not isinstance(raw_entries, dict):
        raise ConfigError(f"{source}: address_settings must be a mapping of match -> settings")
    entries: dict[str, AddressSetting] = {}
    for pattern, body in raw_entries.items():
        validate_pattern(pattern)
        where = f"{source}: address_settings[{pattern!r}]"
        if not isinstance(body, dict):
            raise ConfigError(f"{where} must be a mapping like {{id_cache_size: 20000}}")
        entries[pattern] = _parse_entry(body, where)
    _check_domains(entries, source)
    return AddressSettings(entries, _parse_audit(document, document.get("window_audit"), source))


def _parse_audit(document: dict, body: Any, source: str) -> int:
    """``window_audit:`` turns the audit on; ``horizon: N``: how many more windows' worth of left
    keys a cache remembers (0: off again). Without it the audit is off."""
    where = f"{source}: window_audit"
    if "window_audit" not in document:
        return AUDIT_OFF
    body = {} if body is None else body
    if not isinstance(body, dict):
        raise ConfigError(f"{where} must be a mapping like {{horizon: {AUDIT_HORIZON_MULTIPLE}}}")
    _reject_unknown_keys(body, AUDIT_KEYS, where)
    horizon = _whole_number(body, "horizon", AUDIT_HORIZON_MULTIPLE, where, "0 turns the audit off")
    if horizon > MAX_AUDIT_HORIZON:
        raise ConfigError(f"{where}: horizon must be at most {MAX_AUDIT_HORIZON} windows, got {horizon}")
    return horizon


def _whole_number(body: dict, key: str, default: int | None, where: str, meaning: str) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: {key} must be a whole number, got {value!r}")
    if value < 0:
        raise ConfigError(f"{where}: {key} must be >= 0 ({meaning}), got {value}")
    return value


def _parse_entry(body: dict, where: str) -> AddressSetting:
    _reject_unknown_keys(body, ENTRY_KEYS, where)
    policy = body.get("policy", COUNT)
    if policy not in POLICIES:
        raise ConfigError(f"{where}: unknown policy {policy!r}; allowed: {', '.join(POLICIES)}")
    foreign = sorted(set(body) - COMMON_KEYS - POLICY_KEYS[policy])
    if foreign:
        owners = [p for p in POLICIES if foreign[0] in POLICY_KEYS[p]]
        raise ConfigError(
            f"{where}: {foreign[0]} belongs to policy {' or '.join(owners)}, not {policy} "
            f"(keys of policy {policy}: {', '.join(sorted(POLICY_KEYS[policy] | COMMON_KEYS))})"
        )
    domain = body.get("domain")
    if domain is not None:
        if not isinstance(domain, str) or domain == "":
            raise ConfigError(f"{where}: domain must be a non-empty string (a cache name), got {domain!r}")
        if ANY_WORDS in domain or ONE_WORD in domain:
            raise ConfigError(f"{where}: domain {domain!r} is a cache name, not a match: no '#' or '*'")
        if domain.startswith(BRIDGE_PREFIX):
            raise ConfigError(f"{where}: domain {domain!r} may not start with {BRIDGE_PREFIX!r} "
                              f"(that names the bridge cache of a domain)")
    if policy == COUNT:
        size = _whole_number(body, "id_cache_size", DEFAULT_ID_CACHE_SIZE, where, "0 turns detection off")
        return AddressSetting(id_cache_size=size, domain=domain)
    if policy == APAMA:
        per_source = _whole_number(body, "per_source_window", DEFAULT_PER_SOURCE_WINDOW, where,
                                   "0 disables the per-sender queues")
        expiry = _whole_number(body, "expiry_seconds", DEFAULT_EXPIRY_SECONDS, where,
                               "0 disables time expiry")
        if expiry > MAX_WINDOW_SECONDS:
            raise ConfigError(f"{where}: expiry_seconds must be at most {MAX_WINDOW_SECONDS} (10000 years), "
                              f"got {expiry}")
        if per_source == 0 and expiry == 0:
            # Apama leaves this undefined: remember nothing, or every id forever. See §8.2.
            raise ConfigError(
                f"{where}: per_source_window and expiry_seconds are both 0, which would remember "
                f"every id forever or none; set one of them (to turn detection off use policy "
                f"count with id_cache_size: 0)"
            )
        return AddressSetting(id_cache_size=None, policy=APAMA, per_source_window=per_source,
                              expiry_seconds=expiry, domain=domain)
    window = parse_duration_us(body.get("duplicate_window", DEFAULT_DUPLICATE_WINDOW_US // 1_000_000),
                               f"{where}: duplicate_window")
    cap = _whole_number(body, "id_cache_size", None, where, "a count cap on the time window")
    if cap == 0:
        raise ConfigError(
            f"{where}: id_cache_size 0 with policy time would forget every id at once; leave it out "
            f"for no count cap (to turn detection off use policy count with id_cache_size: 0)"
        )
    return AddressSetting(id_cache_size=cap, policy=TIME, duplicate_window_us=window, domain=domain)


def _check_domains(entries: dict[str, AddressSetting], source: str) -> None:
    """Every cache has one window: the entries naming a domain, and the address that has the
    domain's name (which is its own domain unless its entry says otherwise), must agree."""
    settings = AddressSettings(entries)
    declared: dict[str, tuple[str, AddressSetting]] = {}
    for pattern, setting in sorted(entries.items()):
        if setting.domain is None:
            continue
        first = declared.setdefault(setting.domain, (pattern, setting))
        if first[1].window != setting.window:
            raise ConfigError(
                f"{source}: addresses {first[0]!r} and {pattern!r} share domain {setting.domain!r} "
                f"but not its window ({_describe(first[1])} vs {_describe(setting)}); one cache has one window"
            )
    for domain in sorted(declared):
        if not _is_literal(settings.matching_pattern(domain)):
            continue  # matched by a wildcard or the default: checked if that address ever shows up
        conflict = settings.namesake_conflict(domain)
        if conflict:
            raise ConfigError(f"{source}: {conflict}")


def _is_literal(pattern: str | None) -> bool:
    return pattern is not None and ANY_WORDS not in _words(pattern) and ONE_WORD not in _words(pattern)


def _describe(setting: AddressSetting) -> str:
    return " ".join(f"{k}={v}" for k, v in setting.as_dict().items() if k != "domain") or "count"


def load_settings(path: str | None) -> AddressSettings:
    """Read and validate a YAML config file; ``None`` means the defaults."""
    if path is None:
        return AddressSettings()
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}".replace("\n", " ")) from None
    return parse_settings(document, source=path)
