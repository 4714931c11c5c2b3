"""The requirements file: what `inhouse plan` sizes a stack for (schema version 1).

A requirements file states workloads (traffic, lengths, prefix reuse, multi-turn shape), their
SLOs, the models and quantizations allowed, the hardware on offer with its prices, API prices to
compare against, and the planner's own knobs. docs/plan.md documents every field.

This module holds the file and everything around the workloads; a workload itself (traffic,
lengths, SLOs, models) is in `workload_req.py`, whose names are re-exported here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from inhouse.errors import SpecError
from inhouse.plan.workload_req import (
    MAX_CHECK_DURATION_S,
    MAX_PREFIX_GROUPS,
    MAX_RATE_PER_S,
    MAX_SESSIONS,
    METRICS,
    MIN_BURSTINESS,
    UNSPLIT_KINDS,
    ModelChoice,
    MultiTurn,
    Slo,
    TokenLengths,
    Traffic,
    WorkloadKind,
    WorkloadReq,
    default_alarm_ms,
)
from inhouse.plan.workload_req import share_not_percent as _share_not_percent
from inhouse.routing.registry import policy_names
from inhouse.spec.base import SpecModel
from inhouse.spec.catalog import get_gpu
from inhouse.spec.errors_format import describe_validation_error
from inhouse.spec.quant import kv_dtype_bytes, normalize_quant

__all__ = [
    "HOURS_PER_MONTH",
    "MAX_CHECK_DURATION_S",
    "MAX_GPUS_PER_NODE",
    "MAX_KW_PER_NODE",
    "MAX_LOAD_MULTIPLE",
    "MAX_PREFIX_GROUPS",
    "MAX_PUE",
    "MAX_RATE_PER_S",
    "MAX_SESSIONS",
    "MAX_USD_PER_GPU_HOUR",
    "MAX_USD_PER_KWH",
    "MAX_USD_PER_MILLION_TOKENS",
    "MAX_USD_PER_NODE",
    "METRICS",
    "MIN_AMORTIZATION_YEARS",
    "MIN_BURSTINESS",
    "POOL_SUFFIXES",
    "REQUIREMENTS_VERSION",
    "ApiPrice",
    "HardwareOffer",
    "ModelChoice",
    "MultiTurn",
    "Planning",
    "Requirements",
    "Slo",
    "TokenLengths",
    "Traffic",
    "Usage",
    "WorkloadKind",
    "WorkloadReq",
    "default_alarm_ms",
    "parse_requirements",
]


REQUIREMENTS_VERSION = 1
# The cost sheet's month: the stack is paid for 8,760 h a year.
HOURS_PER_MONTH = 8760.0 / 12.0

# The planner's simulator checks report headroom: how the chosen stack holds at a few times its
# stated peak (2x, 3x). Past 10x the question is a new plan for a new peak, not this plan's
# headroom, and each check simulates `multiple` times the traffic: 300x took two minutes and
# 1e6 hung. (The hour a check may simulate, MAX_CHECK_DURATION_S, is in `workload_req.py`.)
MAX_LOAD_MULTIPLE = 10.0


# Ceilings on what a price or a power figure may be, each far past any real one (an H100 rents
# for a few dollars an hour; a GB200 NVL72 rack draws about 130 kW and costs a few million
# dollars). A stray run of digits (`pue: 1e308`) overflowed the node's $/h to infinity and was
# a traceback from the stack file's model; `capex_usd_per_node: 1e308` was a plan priced with
# 300 digits. Past these the number is a typo, not a price.
MAX_USD_PER_GPU_HOUR = 10_000.0
MAX_USD_PER_NODE = 1e8
MAX_KW_PER_NODE = 1000.0
MAX_PUE = 5.0
MAX_USD_PER_KWH = 10.0
MAX_USD_PER_MILLION_TOKENS = 10_000.0
# The pools the planner adds for a workload: its long-context pool and its fallback pool.
POOL_SUFFIXES = ("-long", "-fallback")
# GPUs in one node. The largest in the catalog's sources is a GB200 NVL72 rack (72 GPUs under
# one NVLink domain). Spare GPUs on an owned node become extra replicas one by one, so
# `gpus_per_node: 1000000000` hung `inhouse plan` filling the node.
MAX_GPUS_PER_NODE = 72
# Capex spread over less than a month is not amortization (`1e-300` priced a node at 1e305 $/h).
MIN_AMORTIZATION_YEARS = 1.0 / 12.0


def _at_most(limit: float, what: str) -> AfterValidator:
    """A ceiling whose message says what the field holds and that the value is a typo."""

    def check(value: float | None) -> float | None:
        if value is not None and value > limit:
            raise ValueError(
                f"{value:g} is more than {limit:g} {what}, far past any real one; "
                "check the number for stray digits"
            )
        return value

    return AfterValidator(check)


class HardwareOffer(SpecModel):
    """A GPU type on offer: owned or bought (capex) or rented (per GPU-hour)."""

    gpu: str
    gpus_per_node: int = Field(default=8, gt=0)
    max_nodes: int | None = Field(default=None, gt=0, description="null: as many as needed")
    pricing: Literal["capex", "hourly"]
    capex_usd_per_node: Annotated[
        float | None, Field(gt=0), _at_most(MAX_USD_PER_NODE, "dollars for one node")
    ] = None
    amortization_years: float = Field(default=3.0, gt=0)
    power_kw_per_node: Annotated[
        float | None,
        Field(gt=0, description="peak draw (default: 1.8x the GPUs' TDP)"),
        _at_most(MAX_KW_PER_NODE, "kW for one node"),
    ] = None
    avg_power_fraction: float = Field(default=0.7, gt=0, le=1)
    _power_share = field_validator("avg_power_fraction", mode="before")(_share_not_percent)
    pue: Annotated[float, Field(ge=1), _at_most(MAX_PUE, "for a PUE")] = 1.3
    usd_per_kwh: Annotated[float, Field(ge=0), _at_most(MAX_USD_PER_KWH, "dollars a kWh")] = 0.12
    ops_usd_per_node_year: Annotated[
        float, Field(ge=0), _at_most(MAX_USD_PER_NODE, "dollars a node-year")
    ] = 0.0
    usd_per_gpu_hour: Annotated[
        float | None, Field(gt=0), _at_most(MAX_USD_PER_GPU_HOUR, "dollars a GPU-hour")
    ] = None

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, name: str) -> str:
        try:
            get_gpu(name)
        except SpecError as exc:
            raise ValueError(str(exc)) from None
        return name

    @field_validator("gpus_per_node")
    @classmethod
    def _a_real_node(cls, gpus: int) -> int:
        if gpus > MAX_GPUS_PER_NODE:
            raise ValueError(
                f"{gpus:,} GPUs in one node is more than the {MAX_GPUS_PER_NODE} of the largest "
                "(a GB200 NVL72 rack); state the GPUs one server holds (8 in an HGX or DGX "
                "node) and the servers in max_nodes"
            )
        return gpus

    @field_validator("amortization_years")
    @classmethod
    def _a_month_at_least(cls, years: float) -> float:
        if years < MIN_AMORTIZATION_YEARS:
            raise ValueError(
                f"{years:g} years is less than a month; capex is spread over years (3 by "
                "default): write the years, or price the hardware `hourly`"
            )
        return years

    @model_validator(mode="after")
    def _priced(self) -> HardwareOffer:
        if self.pricing == "capex" and self.capex_usd_per_node is None:
            raise ValueError("pricing: capex needs capex_usd_per_node")
        if self.pricing == "hourly" and self.usd_per_gpu_hour is None:
            raise ValueError("pricing: hourly needs usd_per_gpu_hour")
        return self


_per_million = _at_most(MAX_USD_PER_MILLION_TOKENS, "dollars a million tokens")


class ApiPrice(SpecModel):
    name: str

    @field_validator("name")
    @classmethod
    def _one_table_cell(cls, name: str) -> str:
        # NOTE: the name is a cell of the memo's API table: a `|` or a line break split the row
        # (`a|b\nc` wrote a row of its own), and an empty name left a blank cell.
        bad = sorted({repr(c) for c in name if c == "|" or not c.isprintable()})
        if not name.strip() or bad:
            found = f" (has {', '.join(bad)})" if bad else ""
            raise ValueError(
                f"{name!r}{found} is not a one-line name; name the API on one line of printable "
                "characters, without `|` (e.g. gpt-4.1-class)"
            )
        return name

    input_usd_per_million: Annotated[float, Field(ge=0), _per_million]
    output_usd_per_million: Annotated[float, Field(ge=0), _per_million]
    cached_input_usd_per_million: Annotated[float | None, Field(ge=0), _per_million] = None


class Usage(SpecModel):
    """When traffic runs: the average rates hold for these hours, the rest is idle."""

    active_hours_per_day: float = Field(default=24.0, gt=0, le=24)
    active_days_per_month: float = Field(default=30.4, gt=0, le=31)

    @model_validator(mode="after")
    def _within_a_month(self) -> Usage:
        # NOTE: the stack is paid for 730 h a month (8,760 / 12); 24 h x 31 d counted 744 h of
        # API spend against it, and "rented only in active hours" cost more than 24/7.
        if self.active_hours_per_month > HOURS_PER_MONTH + 1e-9:
            raise ValueError(
                f"active_hours_per_day x active_days_per_month is "
                f"{self.active_hours_per_month:g} h, more than the {HOURS_PER_MONTH:g} h of an "
                "average month (8,760 h / 12) that the cost sheet counts; for traffic every "
                "hour use 24 and 30.4 (the defaults)"
            )
        return self

    @property
    def active_hours_per_month(self) -> float:
        return self.active_hours_per_day * self.active_days_per_month


def _headroom(multiple: float) -> float:
    if multiple > MAX_LOAD_MULTIPLE:
        raise ValueError(
            f"{multiple:g}x peak is past the {MAX_LOAD_MULTIPLE:g}x a headroom check reports on "
            "(each check simulates that many times the traffic): use at most "
            f"{MAX_LOAD_MULTIPLE:g}, or, for a larger peak, state it in the workload's traffic "
            "and plan again"
        )
    return multiple


class Planning(SpecModel):
    """The planner's own knobs."""

    headroom: float = Field(
        default=0.1, ge=0, lt=1, description="analytic p95 must sit this far below each target"
    )
    max_utilization: float = Field(default=0.7, gt=0, lt=1)
    enforce_degraded_slo: bool = Field(
        default=True,
        description="size pools so the degraded SLO holds with one replica lost, checked in the "
        "simulator (false: only report it, and price the plan that would meet it)",
    )
    # NOTE: each list needs an item and each item a sensible value: an empty list left nothing
    # to try and was reported as "no GPU on offer fits the model", TP 0 and a budget of 0
    # were tracebacks.
    quantizations: tuple[str, ...] = Field(default=("fp8", "bf16"), min_length=1)
    kv_cache_dtypes: tuple[str, ...] = Field(default=("auto", "fp8"), min_length=1)
    tensor_parallel: tuple[Annotated[int, Field(gt=0)], ...] = Field(
        default=(1, 2, 4, 8), min_length=1
    )
    max_num_batched_tokens: tuple[Annotated[int, Field(gt=0)], ...] = Field(
        default=(512, 1024, 2048, 8192), min_length=1
    )
    backend: Literal["vllm", "sglang"] = "vllm"
    routing_policy: str = "cache_aware"
    verify_top: int = Field(
        default=3, ge=0, description="simulator rounds at 1x peak before giving up (0: none)"
    )
    verify_duration_s: float = Field(
        # NOTE: 90 s (14 five-second blocks after the warm-up) let the seed decide the code
        # assistant's 1x TTFT: 954-1,282 ms over five seeds against 1,200 ms, and rejected a
        # stack $12/h cheaper on noise. 360 s (66 blocks) read 1,018-1,107 ms for that stack,
        # for 2-4 s more CPU per plan of the examples (docs/plan.md, step 6).
        default=360.0,
        gt=0,
        description="simulated seconds of arrivals per check at 1x peak",
    )
    stress_duration_s: float = Field(
        default=60.0, gt=0, description="simulated seconds per 2x/3x and one-replica-lost check"
    )
    load_multiples: tuple[Annotated[float, Field(gt=0), AfterValidator(_headroom)], ...] = (
        1.0,
        2.0,
        3.0,
    )
    seed: int = 0
    # Availability arithmetic (`plan/availability.py`): assumptions, not measurements, until the
    # operator states the fleet's own. An engine crash, a GPU fault or an engine update takes a
    # replica down; a host reboot (driver, kernel, firmware) or a power supply, NVSwitch or board
    # fault takes its node and every replica on it (docs/plan.md, Availability).
    replica_failures_per_month: float = Field(
        default=1.0, ge=0, le=730, description="times a month one replica goes down (assumed)"
    )
    node_failures_per_month: float = Field(
        default=0.5,
        ge=0,
        le=730,
        description="times a month one node goes down with its replicas (assumed)",
    )
    replica_mttr_min: float = Field(
        default=60.0,
        gt=0,
        le=43800,
        description="minutes to bring a lost replica or node back (assumed)",
    )

    @field_validator("verify_duration_s", "stress_duration_s")
    @classmethod
    def _an_hour_at_most(cls, seconds: float) -> float:
        if seconds > MAX_CHECK_DURATION_S:
            raise ValueError(
                f"{seconds:g} s is more than the {MAX_CHECK_DURATION_S:g} s (an hour) of "
                "simulated arrivals a check may run; a steady-state p95 settles in minutes: "
                f"use at most {MAX_CHECK_DURATION_S:g} (the defaults: 360 s at 1x, 60 s for the "
                "others)"
            )
        return seconds

    @field_validator("routing_policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        # NOTE: an unknown name was read only when the simulator built the router: after the
        # search, as "routing policy 'x' is unknown" without the field, and under --no-verify
        # never, so the plan wrote a stack.yaml that `inhouse simulate` and `up` then refuse.
        if name not in policy_names():
            raise ValueError(
                f"{name!r} is not a routing policy; use one of: {', '.join(policy_names())} "
                "(docs/routing.md)"
            )
        return name

    @field_validator("quantizations")
    @classmethod
    def _known_quants(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            try:
                normalize_quant(name)
            except SpecError as exc:
                raise ValueError(str(exc)) from None
        return names

    @field_validator("kv_cache_dtypes")
    @classmethod
    def _known_kv_dtypes(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            try:
                kv_dtype_bytes(name)
            except SpecError as exc:
                raise ValueError(str(exc)) from None
        return names


class Requirements(SpecModel):
    version: Literal[1] = 1
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    description: str = ""
    workloads: tuple[WorkloadReq, ...] = Field(min_length=1)
    hardware: tuple[HardwareOffer, ...] = Field(min_length=1)
    api_prices: tuple[ApiPrice, ...] = ()
    usage: Usage = Usage()
    planning: Planning = Planning()

    @field_validator("hardware")
    @classmethod
    def _one_offer_per_gpu(cls, offers: tuple[HardwareOffer, ...]) -> tuple[HardwareOffer, ...]:
        # NOTE: the planner keys offers by GPU type; a second offer of one type replaced the
        # first without a word (its price, its max_nodes).
        gpus = [get_gpu(offer.gpu).name for offer in offers]
        twice = sorted({gpu for gpu in gpus if gpus.count(gpu) > 1})
        if twice:
            raise ValueError(
                f"{', '.join(twice)} is offered more than once; give one offer per GPU type "
                "(one price, one max_nodes)"
            )
        return offers

    @field_validator("api_prices")
    @classmethod
    def _one_price_per_name(cls, apis: tuple[ApiPrice, ...]) -> tuple[ApiPrice, ...]:
        names = [api.name for api in apis]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(
                f"{', '.join(twice)} is named more than once (the last price replaced the "
                "others); give each API price its own name"
            )
        return apis

    @model_validator(mode="after")
    def _references(self) -> Requirements:
        names = [w.name for w in self.workloads]
        if len(set(names)) != len(names):
            raise ValueError(f"workload names must be unique, got {names}")
        # NOTE: the planner names a split workload's long pool `<name>-long` and a fallback pool
        # `<name>-fallback`; a workload named so (`a` and `a-fallback`) planned, then was a
        # traceback from the stack's model ("pool names must be unique"). Only where `a` can
        # have that pool: a longctx or shared-prefix workload may be split, one with
        # models.fallback gets a fallback pool; `docs` beside `docs-long`, an agent, plans.
        by_name = {w.name: w for w in self.workloads}
        for name in names:
            for suffix in POOL_SUFFIXES:
                stem = name.removesuffix(suffix)
                if stem == name or stem not in by_name:
                    continue
                owner = by_name[stem]
                if (
                    owner.models.fallback is not None
                    if suffix == "-fallback"
                    else owner.kind not in UNSPLIT_KINDS
                ):
                    raise ValueError(
                        f"workload {name!r} is the name the planner gives the {suffix[1:]} pool "
                        f"of workload {stem!r} (<workload>{suffix}); rename it"
                    )
        for workload in self.workloads:
            target = workload.models.lora_on
            # NOTE: served as adapters on another pool, a workload has no pool of its own for a
            # fallback to cover: the plan that chose that layout dropped the fallback pool
            # without a word (docs/plan.md: never a plan without its fallback pool).
            if target is not None and workload.models.fallback is not None:
                raise ValueError(
                    f"workload {workload.name!r}: models.fallback and models.lora_on together; "
                    f"as adapters on {target!r}'s pool it has no pool of its own to fall back "
                    f"from: drop lora_on to give it a pool and a fallback, or drop fallback (a "
                    f"fallback on {target!r} covers both)"
                )
            if target is not None and (target not in names or target == workload.name):
                raise ValueError(
                    f"workload {workload.name!r}: lora_on {target!r} must name another "
                    f"workload; workloads: {names}"
                )
            # NOTE: adapters ride on a base model's pool, one hop: a chain (a on b, b on c) or a
            # cycle (a on b, b on a) planned and then was a traceback from the stack's model
            # (a workload served by no pool, or no pool at all).
            if target is not None and self.workload(target).models.lora_on is not None:
                raise ValueError(
                    f"workload {workload.name!r}: lora_on {target!r}, which is itself lora_on "
                    f"{self.workload(target).models.lora_on!r}; adapters ride on a workload "
                    "served by its own pool: point lora_on at that workload, or drop one"
                )
        return self

    def workload(self, name: str) -> WorkloadReq:
        for workload in self.workloads:
            if workload.name == name:
                return workload
        raise KeyError(name)


def parse_requirements(data: Any, source: str = "requirements") -> Requirements:
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: a requirements file is a YAML mapping with `version`, `name`, "
            "`workloads`, `hardware`"
        )
    version = data.get("version", REQUIREMENTS_VERSION)
    if isinstance(version, str) and version.strip() == str(REQUIREMENTS_VERSION):
        # NOTE: `version: "1"` read "'1' is not supported; this inhouse reads version 1".
        raise SpecError(
            f"{source}: version: {version!r} is a string; write the number, unquoted: "
            f"`version: {REQUIREMENTS_VERSION}`"
        )
    if version != REQUIREMENTS_VERSION:
        raise SpecError(
            f"{source}: version: {version!r} is not supported; this inhouse reads version "
            f"{REQUIREMENTS_VERSION}"
        )
    try:
        return Requirements.model_validate(data)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(exc, source, "docs/plan.md")) from exc
