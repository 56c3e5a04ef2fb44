"""Address settings: which ID cache size applies to which address.

Users already know Artemis' ``<address-settings>``, so the configuration reads the same way:
a match pattern per entry, ``#`` for any number of words, ``*`` for exactly one, words
separated by ``.``, and the most specific match wins. The YAML file is validated once, at
the edge, and every mistake is reported with where it is and what was expected.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

import yaml

DEFAULT_ID_CACHE_SIZE = 20000
"""Artemis' default ``id-cache-size``."""

ANY_WORDS = "#"
ONE_WORD = "*"
WORD_SEPARATOR = "."

# The keys an address-settings entry may carry. Later features (time windows, per-sender
# windows, ...) add theirs here, so a typo is always caught instead of silently ignored.
ENTRY_KEYS = {"id_cache_size"}
TOP_LEVEL_KEYS = {"address_settings"}


class ConfigError(ValueError):
    """A configuration mistake, phrased for the person who wrote the file."""


@dataclass(frozen=True)
class AddressSetting:
    id_cache_size: int


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
    """The validated address settings; ``id_cache_size(address)`` is all the engine asks."""

    entries: Mapping[str, AddressSetting] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ordered = sorted(self.entries, key=specificity)
        object.__setattr__(self, "_ordered", tuple(ordered))
        object.__setattr__(self, "_cache", {})

    def setting_for(self, address: str) -> AddressSetting:
        cached = self._cache.get(address)
        if cached is not None:
            return cached
        found = AddressSetting(id_cache_size=DEFAULT_ID_CACHE_SIZE)
        for pattern in self._ordered:
            if pattern_matches(pattern, address):
                found = self.entries[pattern]
                break
        self._cache[address] = found
        return found

    def id_cache_size(self, address: str) -> int:
        return self.setting_for(address).id_cache_size

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {p: {"id_cache_size": s.id_cache_size} for p, s in sorted(self.entries.items())}

    def fingerprint(self) -> str:
        canonical = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    # Settings travel to Spark's Python workers inside closures: keep pickling to the data.
    def __reduce__(self):
        return (AddressSettings, (dict(self.entries),))


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
        raise ConfigError(f"{source}: the top level must be a mapping with 'address_settings'")
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
        _reject_unknown_keys(body, ENTRY_KEYS, where)
        size = body.get("id_cache_size", DEFAULT_ID_CACHE_SIZE)
        if isinstance(size, bool) or not isinstance(size, int):
            raise ConfigError(f"{where}: id_cache_size must be a whole number, got {size!r}")
        if size < 0:
            raise ConfigError(f"{where}: id_cache_size must be >= 0 (0 turns detection off), got {size}")
        entries[pattern] = AddressSetting(id_cache_size=size)
    return AddressSettings(entries)


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
