"""Cost: all-in dollars per hour, per million tokens, per request, and break-even against APIs.

* Owned or bought hardware (`pricing: capex`), per node:
  `capex / (years · 8760 h) + power_kW · avg_power_fraction · PUE · $/kWh + ops/yr / 8760 h`.
  A plan pays whole nodes.
* Rented hardware (`pricing: hourly`): `GPUs · $/GPU-hour`.
* Per workload: a pool's $/h is split between the workloads it serves by the replica time each
  takes (prefill plus decode, from the analytic model), then between input and output tokens the
  same way. `$/1M tokens = $/h ÷ (tokens/s · 3600) · 10⁶`, at the workload's average rate.
* Duty cycle: the stack runs every hour of the month; traffic flows `active_hours_per_month`.
  Monthly tokens (and API spend) count active hours only; monthly cost counts all 730 hours.
  So each workload has two prices per request and per 1M tokens: at its average load in an
  active hour (`$/h ÷ requests/h`), and with the idle hours it pays for
  (`$/h · 730 ÷ requests a month`), the one a month's bill divides into.
* Break-even (capex): `capex ÷ (API $/month − (power + ops) $/month)`; rented hardware has no
  capex, so it is cheaper from the first month or never.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from inhouse.plan.requirements import HOURS_PER_MONTH, ApiPrice, HardwareOffer
from inhouse.spec.catalog import get_gpu

HOURS_PER_YEAR = 8760.0
# Default node draw: GPUs' TDP times this (a DGX H100 draws 10.2 kW for 5.6 kW of GPUs).
NODE_POWER_OVER_GPUS = 1.8


@dataclass(frozen=True, slots=True)
class NodeCost:
    """All-in $/hour of one node and its parts, with the arithmetic as text."""

    gpu: str
    gpus_per_node: int
    capex_usd_per_hour: float
    power_usd_per_hour: float
    ops_usd_per_hour: float
    rent_usd_per_hour: float
    arithmetic: str

    @property
    def usd_per_hour(self) -> float:
        return (
            self.capex_usd_per_hour
            + self.power_usd_per_hour
            + self.ops_usd_per_hour
            + self.rent_usd_per_hour
        )

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_hour / self.gpus_per_node


def power_kw(offer: HardwareOffer) -> float:
    if offer.power_kw_per_node is not None:
        return offer.power_kw_per_node
    return offer.gpus_per_node * get_gpu(offer.gpu).power_w * NODE_POWER_OVER_GPUS / 1000.0


def node_cost(offer: HardwareOffer) -> NodeCost:
    gpu = get_gpu(offer.gpu).name
    if offer.pricing == "hourly":
        assert offer.usd_per_gpu_hour is not None
        rent = offer.usd_per_gpu_hour * offer.gpus_per_node
        text = f"{offer.gpus_per_node} GPUs x ${offer.usd_per_gpu_hour:.2f}/GPU-h = ${rent:.2f}/h"
        return NodeCost(gpu, offer.gpus_per_node, 0.0, 0.0, 0.0, rent, text)
    assert offer.capex_usd_per_node is not None
    capex = offer.capex_usd_per_node / (offer.amortization_years * HOURS_PER_YEAR)
    kw = power_kw(offer)
    power = kw * offer.avg_power_fraction * offer.pue * offer.usd_per_kwh
    ops = offer.ops_usd_per_node_year / HOURS_PER_YEAR
    text = (
        f"capex ${offer.capex_usd_per_node:,.0f} / ({offer.amortization_years:g} y x 8,760 h) "
        f"= ${capex:.2f}/h; power {kw:g} kW x {offer.avg_power_fraction:g} average x PUE "
        f"{offer.pue:g} x ${offer.usd_per_kwh:g}/kWh = ${power:.2f}/h; ops "
        f"${offer.ops_usd_per_node_year:,.0f}/y / 8,760 h = ${ops:.2f}/h; "
        f"node all-in ${capex + power + ops:.2f}/h"
    )
    return NodeCost(gpu, offer.gpus_per_node, capex, power, ops, 0.0, text)


def nodes_needed(offer: HardwareOffer, num_gpus: int) -> int:
    return math.ceil(num_gpus / offer.gpus_per_node) if num_gpus else 0


def hardware_usd_per_hour(offer: HardwareOffer, num_gpus: int) -> float:
    """What `num_gpus` of this offer cost per hour: whole nodes if bought, GPUs if rented."""
    cost = node_cost(offer)
    if offer.pricing == "hourly":
        return cost.usd_per_gpu_hour * num_gpus
    return cost.usd_per_hour * nodes_needed(offer, num_gpus)


def usd_per_million(usd_per_hour: float, tokens_per_s: float) -> float | None:
    """`$/h ÷ (tokens/s · 3600) · 10⁶`: dollars per million tokens at a steady rate."""
    if tokens_per_s <= 0:
        return None
    return usd_per_hour / (tokens_per_s * 3600.0) * 1e6


@dataclass(frozen=True, slots=True)
class WorkloadCost:
    """A workload's share of the stack's cost at its average traffic."""

    name: str
    usd_per_hour: float
    input_usd_per_hour: float
    output_usd_per_hour: float
    requests_per_s: float
    input_tokens_per_s: float
    cached_tokens_per_s: float
    output_tokens_per_s: float
    active_hours_per_month: float

    def as_dict(self, apis: tuple[ApiPrice, ...]) -> dict[str, Any]:
        total_tps = self.input_tokens_per_s + self.output_tokens_per_s
        monthly = {
            "input_tokens": self.input_tokens_per_s * 3600 * self.active_hours_per_month,
            "cached_input_tokens": self.cached_tokens_per_s * 3600 * self.active_hours_per_month,
            "output_tokens": self.output_tokens_per_s * 3600 * self.active_hours_per_month,
            "requests": self.requests_per_s * 3600 * self.active_hours_per_month,
        }
        per_request = (
            self.usd_per_hour / (self.requests_per_s * 3600) if self.requests_per_s else None
        )
        # NOTE: the stack is paid for every hour of the month, traffic flows in the active
        # ones: a month's bill over a month's requests is the price a request really carries
        # (the code assistant's $0.00917 at load was $0.0304 with its 510 idle hours).
        month_usd = self.usd_per_hour * HOURS_PER_MONTH
        month_tokens = monthly["input_tokens"] + monthly["output_tokens"]
        return {
            "usd_per_hour": self.usd_per_hour,
            "usd_per_million_tokens": {
                "input": usd_per_million(self.input_usd_per_hour, self.input_tokens_per_s),
                "output": usd_per_million(self.output_usd_per_hour, self.output_tokens_per_s),
                "blended": usd_per_million(self.usd_per_hour, total_tps),
            },
            "usd_per_request": per_request,
            "usd_per_request_with_idle_hours": (
                month_usd / monthly["requests"] if monthly["requests"] else None
            ),
            "usd_per_million_tokens_with_idle_hours": (
                month_usd / month_tokens * 1e6 if month_tokens else None
            ),
            "at_average_load": {
                "requests_per_s": self.requests_per_s,
                "input_tokens_per_s": self.input_tokens_per_s,
                "cached_input_tokens_per_s": self.cached_tokens_per_s,
                "output_tokens_per_s": self.output_tokens_per_s,
            },
            "per_month": monthly,
            "api_usd_per_month": {api.name: api_monthly(api, monthly) for api in apis},
        }


def api_monthly(api: ApiPrice, monthly: dict[str, float]) -> float:
    """API spend for a month of tokens; cached input at the cached price where one is given."""
    cached = monthly["cached_input_tokens"] if api.cached_input_usd_per_million is not None else 0
    fresh = monthly["input_tokens"] - cached
    out = fresh * api.input_usd_per_million + monthly["output_tokens"] * api.output_usd_per_million
    if api.cached_input_usd_per_million is not None:
        out += cached * api.cached_input_usd_per_million
    return out / 1e6


def breakeven_months(
    capex_usd: float, opex_usd_per_month: float, api_usd_per_month: float
) -> float | None:
    """Months until owning beats the API (`None`: never; 0: from the first month)."""
    saving = api_usd_per_month - opex_usd_per_month
    if saving <= 0:
        return None
    return capex_usd / saving
