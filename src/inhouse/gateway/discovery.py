"""Scaled pools' replicas from DNS: fixed slots, changing addresses.

A pool KEDA scales is a headless Service (`inhouse render`, the endpoints file's `discovery`):
its DNS name answers one address per ready pod. Handing that name to one HTTP client would put
every request on whichever pod the client connects to, so the gateway resolves it itself.

* Slots: the pool has `max_replicas` replica slots (the ScaledObject's `maxReplicaCount`), and
  its routing policy is built for that many (`PolicyContext.num_replicas` stays fixed); only
  each slot's address changes. A slot without an address is vacant: never routed to.
* Every `gateway.discovery.interval_s` the name is resolved (`resolve_dns`, on the event
  loop's resolver). `assign_slots` keeps every address that stays in its slot, empties the
  slots of addresses that vanished and puts new addresses into empty slots, lowest first; the
  order DNS answers in changes nothing. Addresses beyond the slots are left out (logged).
* Each slot whose address changed is handed to `on_change`: the gateway builds a new replica
  there (unhealthy until `health.healthy_after` 200s, its own connection pool), stops
  probing the one that left, and tells the routing policy to forget what it learnt there. A
  request in flight on a pod that left DNS runs on: the pod's own drain ends it.
* A failed lookup (an error, a timeout, or no address at all) changes nothing: the last known
  addresses stay (their probes judge them), and the outage is logged once, its end once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence

from inhouse.http1.upstream import authority
from inhouse.spec.endpoints import DiscoveryTarget

log = logging.getLogger("inhouse.gateway")

Resolver = Callable[[str, int], Awaitable[list[str]]]
RESOLVE_TIMEOUT_S = 5.0  # a lookup unanswered this long is a failure (the slots stay)


async def resolve_dns(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, sorted, without repeats: its IPv4 addresses when it
    has any (a dual-stack pod answers one of each, and is one replica), else its IPv6 ones."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    by_family: dict[int, set[str]] = {socket.AF_INET: set(), socket.AF_INET6: set()}
    for family, _, _, _, sockaddr in infos:
        if family in by_family:
            by_family[family].add(str(sockaddr[0]))
    return sorted(by_family[socket.AF_INET] or by_family[socket.AF_INET6])


def assign_slots(
    slots: Sequence[str | None], addresses: Sequence[str]
) -> tuple[list[str | None], list[str]]:
    """The slots after a lookup answered `addresses`, and the addresses no slot was free for.

    An address that stays keeps its slot; a slot whose address vanished is emptied; each new
    address takes the lowest empty slot, in the order given."""
    present = set(addresses)
    after = [address if address in present else None for address in slots]
    kept = {address for address in after if address is not None}
    free = [index for index, address in enumerate(after) if address is None]
    left_out: list[str] = []
    for address in dict.fromkeys(addresses):
        if address in kept:
            continue
        if free:
            after[free.pop(0)] = address
        else:
            left_out.append(address)
    return after, left_out


def engine_url(address: str, port: int) -> str:
    """`http://` URL of an engine at an IP address (IPv6 in brackets)."""
    return f"http://{authority(address, port)}"


class PoolDiscovery:
    """One scaled pool's slots, kept in step with its DNS name. Runs on the gateway's loop."""

    def __init__(
        self,
        pool: str,
        target: DiscoveryTarget,
        num_slots: int,
        on_change: Callable[[int, str | None], None],
        resolver: Resolver = resolve_dns,
        timeout_s: float = RESOLVE_TIMEOUT_S,
    ) -> None:
        self.pool = pool
        self.target = target
        self.slots: list[str | None] = [None] * num_slots
        self._on_change = on_change
        self._resolve = resolver
        self._timeout_s = timeout_s
        self._left_out: list[str] = []
        self.num_failed_lookups = 0  # in a row; 0 once the name resolves
        self._lookup: asyncio.Future[list[str]] | None = None  # one at a time, see `refresh`

    @property
    def num_addresses(self) -> int:
        """Slots that hold an address."""
        return sum(address is not None for address in self.slots)

    async def refresh(self) -> bool:
        """One lookup, its changes handed to `on_change` slot by slot; False when it failed
        (nothing changed)."""
        name = self.target.dns
        # NOTE: one lookup at a time. getaddrinfo runs on the loop's default executor and a
        # timeout here does not stop it: with an unreachable DNS server each call holds its
        # thread for the resolver's own timeouts (times the search domains), far beyond ours.
        # A new lookup every interval would fill the executor, where the long-prompt gate
        # counts big prompts' tokens; so a lookup still running is waited on, never doubled.
        if self._lookup is None or self._lookup.done():
            self._lookup = asyncio.ensure_future(self._resolve(name, self.target.port))
        lookup = self._lookup
        done, _ = await asyncio.wait({lookup}, timeout=self._timeout_s)
        if not done:
            self._fail(f"no answer in {self._timeout_s:g} s")
            return False
        self._lookup = None
        try:
            addresses = lookup.result()
        except (OSError, UnicodeError, TimeoutError) as exc:  # socket.gaierror is an OSError
            self._fail(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            return False
        if not addresses:
            self._fail("no address")
            return False
        if self.num_failed_lookups:
            log.info("pool %s: DNS name %s resolves again", self.pool, name)
        self.num_failed_lookups = 0
        after, left_out = assign_slots(self.slots, addresses)
        if left_out and left_out != self._left_out:
            log.warning(
                "pool %s: %s answers %d addresses, beyond the pool's %d replica slots; not "
                "routed to: %s (raise the pool's max_replicas)",
                self.pool, name, len(set(addresses)), len(self.slots), ", ".join(left_out),
            )  # fmt: skip
        self._left_out = left_out
        for index, address in enumerate(after):
            if address != self.slots[index]:
                self.slots[index] = address
                self._on_change(index, address)
        return True

    def _fail(self, why: str) -> None:
        self.num_failed_lookups += 1
        if self.num_failed_lookups == 1:  # logged once per outage
            known = self.num_addresses
            log.warning(
                "pool %s: cannot resolve %s (%s); keeping its %d known replica address(es) "
                "until it resolves again",
                self.pool, self.target.dns, why, known,
            )  # fmt: skip

    def close(self) -> None:
        """Stop waiting for a lookup still running (its thread ends with the resolver)."""
        if self._lookup is not None and not self._lookup.done():
            self._lookup.cancel()
        self._lookup = None

    async def run(self, interval_s: float) -> None:
        """`refresh` every `interval_s`, for ever (a task of the gateway's loop)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.refresh()
            except Exception:  # a bug must not stop discovery: the next lookup may do better
                log.exception("pool %s: discovery failed", self.pool)
