"""The server's side: its model name, and prefix-cache counters from Prometheus `/metrics`.

vLLM counts prefix-cache queries and hits in tokens (`vllm:prefix_cache_queries_total`,
`vllm:prefix_cache_hits_total`; before 0.8 `vllm:gpu_prefix_cache_*`), cumulative since start.
The run's server-side hit rate is the delta of hits over the delta of queries, per engine and
over all engines given. Series are summed over their labels (engines, models).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from inhouse.bench.request_func import Target
from inhouse.errors import SpecError

QUERY_NAMES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
HIT_NAMES = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
SCRAPE_TIMEOUT_S = 5.0


def samples(text: str) -> Iterator[tuple[str, float]]:
    """Each sample of a Prometheus text exposition as (metric name, value), labels dropped;
    comments and lines without a number are skipped."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        brace, space = line.find("{"), line.find(" ")
        if brace >= 0 and (space < 0 or brace < space):
            name, rest = line[:brace], line[line.rfind("}") + 1 :]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            yield name, float(fields[0])
        except ValueError:
            continue


def parse_counters(text: str, names: Sequence[str]) -> dict[str, float]:
    """Sum of every sample of each metric name (labels ignored)."""
    sums: dict[str, float] = {}
    wanted = set(names)
    for name, value in samples(text):
        if name in wanted:
            sums[name] = sums.get(name, 0.0) + value
    return sums


def _first(sums: Mapping[str, float], names: Sequence[str]) -> float | None:
    for name in names:
        if name in sums:
            return sums[name]
    return None


async def scrape(url: str, client: httpx.AsyncClient) -> dict[str, Any]:
    try:
        response = await client.get(url)
    except httpx.HTTPError as exc:
        return {"url": url, "error": f"{type(exc).__name__}: {exc}"}
    if response.status_code != 200:
        return {"url": url, "error": f"HTTP {response.status_code}"}
    sums = parse_counters(response.text, (*QUERY_NAMES, *HIT_NAMES))
    queries, hits = _first(sums, QUERY_NAMES), _first(sums, HIT_NAMES)
    if queries is None or hits is None:
        return {"url": url, "error": "no vllm:prefix_cache_queries/hits counters"}
    return {"url": url, "queries": queries, "hits": hits}


async def scrape_all(urls: Sequence[str]) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S) as client:
        return [await scrape(url, client) for url in urls]


class ServerCounters:
    @staticmethod
    def delta(
        before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Per-engine and overall hit rates over the run, from two scrapes of the same URLs."""
        engines = []
        total_q = total_h = 0.0
        for b, a in zip(before, after, strict=True):
            if "error" in b or "error" in a:
                engines.append({"url": a["url"], "error": a.get("error") or b.get("error")})
                continue
            dq = a["queries"] - b["queries"]
            dh = a["hits"] - b["hits"]
            total_q += dq
            total_h += dh
            engines.append(
                {
                    "url": a["url"],
                    "query_tokens": dq,
                    "hit_tokens": dh,
                    "hit_rate": dh / dq if dq > 0 else None,
                }
            )
        measured = [e for e in engines if "error" not in e]
        return {
            "prefix_cache_hit_rate_server": total_h / total_q if measured and total_q else None,
            "engines": engines,
        }


async def fetch_model(target: Target) -> str:
    """The first model `/v1/models` lists (what `vllm bench serve` does without --model)."""
    url = f"{target.base_url}/v1/models"
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    try:
        async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S) as client:
            response = await client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        raise SpecError(
            f"cannot reach {url} ({type(exc).__name__}: {exc}); is the server up? "
            "Check --target, or pass --model to skip this lookup"
        ) from None
    if response.status_code == 401:
        raise SpecError(
            f"{url} answered HTTP 401: the server wants an API key; pass --api-key KEY or set "
            "INHOUSE_API_KEY (`inhouse up` prints the demo tenant's key)"
        )
    if response.status_code != 200:
        raise SpecError(f"{url} answered HTTP {response.status_code}; pass --model NAME")
    data = response.json().get("data") or []
    if not data:
        raise SpecError(f"{url} lists no model; pass --model NAME")
    return str(data[0]["id"])
