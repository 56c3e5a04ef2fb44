"""The window every cache has in one batch, and what it inherits from the parent (docs/semantics.md
§5, §8.1, §8.5): decided once on the driver, from the config, the parent's manifest and the
addresses the batch checks. Few rows; every Spark step and the kernel read it from here.

A cache takes the window of the addresses that use it: in a batch, those of its keyed messages;
otherwise those among its entries that still map to it (all addresses of one cache share a window,
config.py makes sure of it). A cache no address maps to any more keeps its window, so that moving
its addresses back finds it as it was, as the reference model's ``_carried`` does.

A cache keeps its parent's entries only under the same policy: another policy starts it empty
(§8.5), its counter continuing, and its time too unless it comes from ``count``, which has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from msgdedup.config import APAMA, COUNT, TIME, AddressSetting, AddressSettings
from msgdedup.keys import bridge_cache_name


@dataclass(frozen=True)
class CacheWindow:
    """One cache in one batch: its window, and where it starts from."""

    name: str
    setting: AddressSetting
    address: str
    """The address the manifest names it by (the first that used it)."""
    last_seq: int = 0
    clock_us: int | None = None
    """The cache's time (§8.4) before the batch; None for ``count`` (it has none) and new caches."""
    carried: bool = False
    """The parent's entries still count (same policy), after the window's own rules (§8.5)."""
    inherited: bool = False
    """The parent has it (else only this batch's keyed lines name it)."""

    @property
    def policy(self) -> str:
        return self.setting.policy

    @property
    def timed(self) -> bool:
        """Its acceptances enter at an instant and it keeps a time (§8.4): a time or Apama cache."""
        return self.policy != COUNT

    @property
    def floor_size(self) -> int | None:
        """The count limit (count: id_cache_size, time: its optional cap); None: no count limit."""
        return None if self.policy == APAMA else self.setting.id_cache_size


def record(setting: AddressSetting) -> dict:
    """A window as the manifest records it per cache."""
    out: dict = {"policy": setting.policy, "id_cache_size": setting.id_cache_size}
    if setting.policy == APAMA:
        out.update(per_source_window=setting.per_source_window, expiry_seconds=setting.expiry_seconds)
    if setting.policy == TIME:
        out["duplicate_window_us"] = setting.duplicate_window_us
    return out


def setting_of(recorded: Mapping) -> AddressSetting:
    """The window a manifest recorded (manifests before policies existed record count only)."""
    return AddressSetting(
        id_cache_size=recorded.get("id_cache_size"), policy=recorded.get("policy", COUNT),
        per_source_window=recorded.get("per_source_window"), expiry_seconds=recorded.get("expiry_seconds"),
        duplicate_window_us=recorded.get("duplicate_window_us"))


def caches_of(address: str, bridge: bool, settings: AddressSettings) -> str | None:
    """The cache a keyed message of ``address`` is checked in (keys.py, §8.1), None when its
    address does not check."""
    setting = settings.setting_for(address)
    if not setting.checks:
        return None
    domain = setting.domain_of(address)
    return bridge_cache_name(domain) if bridge else domain


def _maps_to(name: str, address: str, settings: AddressSettings) -> bool:
    domain = settings.setting_for(address).domain_of(address)
    return name in (domain, bridge_cache_name(domain))


def resolve(settings: AddressSettings, parent: Mapping[str, Mapping], keyed: Iterable[tuple[str, bool]]
            ) -> dict[str, CacheWindow]:
    """Every cache of the batch: the parent's (``parent``: its manifest's ``caches``) and those
    the batch's keyed messages use (``keyed``: distinct (address, is a bridge id))."""
    used: dict[str, str] = {}
    for address, bridge in sorted(keyed):
        name = caches_of(address, bridge, settings)
        if name is not None:
            used.setdefault(name, address)
    windows = {}
    for name, info in parent.items():
        before = setting_of(info)
        # the addresses of its entries (none: it is empty); manifests before domains existed name
        # a cache after its one address
        addresses = tuple(info["addresses"]) if "addresses" in info else (info["address"],)
        address = used.get(name) or next((a for a in addresses if _maps_to(name, a, settings)), None)
        setting = settings.setting_for(address) if address is not None else before
        carried = setting.policy == before.policy
        clock = info.get("clock_us") if setting.policy != COUNT else None  # count caches record none
        windows[name] = CacheWindow(name, setting, info["address"], info["last_seq"], clock, carried, True)
    for name, address in used.items():
        if name not in windows:
            windows[name] = CacheWindow(name, settings.setting_for(address), address)
    return dict(sorted(windows.items()))


def of_policy(windows: Mapping[str, CacheWindow], policy: str) -> list[str]:
    return sorted(name for name, w in windows.items() if w.policy == policy)


def window_text(recorded: Mapping) -> str:
    """A cache's window as the review pages show it, from its manifest record."""
    setting = setting_of(recorded)
    if setting.policy == APAMA:
        expiry = f"then {setting.expiry_seconds} s" if setting.expiry_seconds else "no time queue"
        return f"apama: {setting.per_source_window} per sender, {expiry}"
    if setting.policy == TIME:
        seconds = setting.duplicate_window_us / 1_000_000
        cap = f", at most {setting.id_cache_size} keys" if setting.id_cache_size is not None else ""
        return f"time: {seconds:g} s{cap}"
    return f"count: last {setting.id_cache_size} keys"
