"""Which cache a message is checked against, and with which key.

A bridge resend carries the id the bridge added (``_AMQ_BRIDGE_DUP``) and is checked in a cache of
its own, ``BRIDGE.<address>``, so that a producer's id and a bridge's id can never collide. A
message with neither property is not checked, and neither is one whose address has detection
turned off (``id_cache_size: 0``).
"""

from __future__ import annotations

from dataclasses import dataclass

from msgdedup.config import AddressSettings
from msgdedup.envelope import BRIDGE_DUPLICATE_ID_PROPERTY, DUPLICATE_ID_PROPERTY

BRIDGE_CACHE_PREFIX = "BRIDGE."


@dataclass(frozen=True)
class CacheKey:
    cache: str
    key: str
    id_cache_size: int


def bridge_cache_name(address: str) -> str:
    return BRIDGE_CACHE_PREFIX + address


def cache_key(address: str, properties: dict, settings: AddressSettings) -> CacheKey | None:
    """The (cache, key) a message is checked with, or None when it is not checked."""
    size = settings.id_cache_size(address)
    if size == 0:
        return None
    if BRIDGE_DUPLICATE_ID_PROPERTY in properties:
        return CacheKey(bridge_cache_name(address), properties[BRIDGE_DUPLICATE_ID_PROPERTY], size)
    if DUPLICATE_ID_PROPERTY in properties:
        return CacheKey(address, properties[DUPLICATE_ID_PROPERTY], size)
    return None
