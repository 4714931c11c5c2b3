"""The gateway's section of the stack file (`stack.gateway`): tenants, tiers, limits, options.

    gateway:
      max_body_bytes: 16777216
      redis_url: redis://127.0.0.1:6379/0      # shared limits when several gateways run
      tiers:                                    # defaults: interactive, standard, batch
        batch: {priority: 10, max_share: 0.5, queue_timeout_s: 60}
      tenants:
        - name: support-bot
          tier: interactive
          models: [chat-70b]                    # default: every model
          keys: ["ihk1$3f9a0c1d$<salt>$<sha256>"]
          limits: {rpm: 600, tpm: 400000, max_concurrency: 32, daily_tokens: 50000000}

Keys are never stored, only salted SHA-256 hashes (`inhouse gateway keys create` prints a key
once and the line to store). A key is `ihk-<id>-<secret>`: the id finds its hash in one dict
lookup, the 192-bit secret makes a fast hash safe (no password stretching needed for random
keys). See docs/gateway.md for every field.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from inhouse.errors import SpecError
from inhouse.spec.base import MAX_REPLICAS, SpecModel
from inhouse.spec.errors_format import describe_validation_error

KEY_HASH_SCHEME = "ihk1"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
# Prometheus scrapes the gateway here (the OpenTelemetry Prometheus exporter's port: free on
# the engines' and Prometheus's hosts alike).
DEFAULT_METRICS_PORT = 9464


class TierSpec(SpecModel):
    """A priority tier. `priority` is vLLM's (lower is served earlier); when every replica of
    a pool is saturated, requests wait in the gateway by tier (lower `priority` first), at most
    `max_queue` of them for at most `queue_timeout_s`, then get 503 + Retry-After.
    `max_share` caps the share of a replica's slots (`max_inflight_per_replica`) this tier may
    hold, so a surge of it leaves room for the tiers above."""

    priority: int = 0
    queue_timeout_s: float = Field(default=30.0, ge=0)
    max_queue: int = Field(default=256, ge=0)
    max_share: float = Field(default=1.0, gt=0, le=1)


DEFAULT_TIERS: dict[str, TierSpec] = {
    "interactive": TierSpec(priority=0, queue_timeout_s=10.0, max_queue=256),
    "standard": TierSpec(priority=5, queue_timeout_s=30.0, max_queue=512),
    "batch": TierSpec(priority=10, queue_timeout_s=120.0, max_queue=2048, max_share=0.5),
}


class LimitsSpec(SpecModel):
    """Per-tenant limits; `None` is unlimited. Token limits count prompt + completion tokens
    and are enforced by reserve-then-settle (prompt + max_tokens reserved at admission,
    settled to the engine's usage at the end). `max_prompt_tokens` is the tenant's own cap
    on a prompt, below the model's context length."""

    rpm: int | None = Field(default=None, gt=0, description="requests per minute")
    tpm: int | None = Field(default=None, gt=0, description="tokens per minute")
    max_concurrency: int | None = Field(default=None, gt=0)
    daily_tokens: int | None = Field(default=None, gt=0, description="tokens per UTC day")
    max_prompt_tokens: int | None = Field(default=None, gt=0)
    default_max_tokens: int | None = Field(
        default=None,
        gt=0,
        description="max_tokens sent to the engine when a request names none (else the "
        "reservation is the rest of the context window; with token limits and a context "
        "length the gateway does not know, such a request is a 400)",
    )

    @property
    def has_token_limits(self) -> bool:
        """Whether a request's tokens count against a limit (TPM or the daily budget)."""
        return self.tpm is not None or self.daily_tokens is not None

    @property
    def needs_store(self) -> bool:
        """Whether a request reserves anything in the limit store (the limits it enforces)."""
        return (
            self.rpm is not None
            or self.tpm is not None
            or self.max_concurrency is not None
            or self.daily_tokens is not None
        )


class TenantSpec(SpecModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$", max_length=64)
    tier: str = "standard"
    models: tuple[str, ...] = Field(default=("*",), description="model names; '*' for all")
    keys: tuple[str, ...] = Field(default=(), description="salted key hashes")
    limits: LimitsSpec = Field(default_factory=LimitsSpec)

    def may_use(self, model: str) -> bool:
        return "*" in self.models or model in self.models


class HealthSpec(SpecModel):
    """Replica health: a replica joins after `healthy_after` consecutive /health 200s; it
    leaves at once when its /health answers anything else (a draining or dead engine says so),
    and after `unhealthy_after` consecutive failures that are no such answer (a probe timed
    out or refused, a request refused or failed before its first byte)."""

    interval_s: float = Field(default=1.0, gt=0)
    timeout_s: float = Field(default=2.0, gt=0)
    unhealthy_after: int = Field(
        default=2,
        ge=1,
        description="failures in a row without a /health answer (timeouts, refused "
        "connections, failed requests) that take a replica out; a non-200 answer does at once",
    )
    healthy_after: int = Field(default=1, ge=1)
    scrape_interval_s: float = Field(default=2.0, gt=0, description="engine /metrics period")
    scrape_max_age_s: float = Field(
        default=6.0, gt=0, description="scraped load older than this is ignored (not trusted)"
    )


class ProxySpec(SpecModel):
    """Dispatch: retries before the first byte, saturation, timeouts."""

    retries: int = Field(default=2, ge=0, description="other replicas tried before first byte")
    max_inflight_per_replica: int | None = Field(
        default=None,
        gt=0,
        description="the gateway's own saturation point per replica (default: the pool's "
        "max_num_seqs + saturation_waiting, else 256)",
    )
    connect_timeout_s: float = Field(default=2.0, gt=0)
    upstream_idle_s: float = Field(
        default=60.0,
        gt=0,
        description="idle engine connections are kept this long for reuse; an engine that "
        "closes one sooner (vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s unless set; `inhouse up` "
        "and `inhouse render` set 75) costs a reconnect, never a failed request",
    )
    first_byte_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="the longest an engine may stay silent: for its response head, then "
        "between two reads of its body (a request past it is retried elsewhere before its "
        "first token, else ends with an error event)",
    )
    request_timeout_s: float = Field(default=3600.0, gt=0)
    drain_timeout_s: float = Field(default=30.0, ge=0)


class ServerSpec(SpecModel):
    """The gateway's own HTTP server: what it refuses on its own, in front of Envoy or not."""

    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="a request line and headers not complete this long after their first byte "
        "(or after the connection opened) get 408 and a close",
    )
    keep_alive_s: float = Field(
        default=75.0, gt=0, description="an idle connection closes after this long"
    )
    max_connections: int = Field(
        default=4096,
        gt=0,
        description="client connections at once; past it a new connection gets 503 and a close",
    )
    send_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="a client that reads nothing of its response this long while its buffer "
        "is full is cut off (its engine request aborted)",
    )
    trusted_proxies: tuple[str, ...] = Field(
        default=("127.0.0.1/32", "::1/128"),
        description="peers whose X-Forwarded-For names the client in the logs (the edge proxy)",
    )

    @model_validator(mode="after")
    def _check_networks(self) -> ServerSpec:
        import ipaddress

        for entry in self.trusted_proxies:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(
                    f"trusted_proxies: {entry!r} is not an address or network (e.g. 10.0.0.0/8)"
                ) from None
        return self


class LimitStoreSpec(SpecModel):
    """How the shared limit store (Redis) is used, and what happens when it fails.

    `on_store_failure: closed` (the default): a tenant with limits gets 503 + Retry-After while
    Redis cannot be reached in `store_timeout_s`. `open`: its requests are admitted and counted
    in this gateway's memory (each gateway alone, so N gateways may admit up to N times a
    limit meanwhile), and what they used is added to Redis's counts once it answers again.
    Concurrency leases last `lease_s` and are renewed while their request runs, so the slots of
    a gateway that died, or of a reservation Redis ran after the gateway gave up on it, come
    back within `lease_s`."""

    on_store_failure: Literal["closed", "open"] = "closed"
    store_timeout_s: float = Field(
        default=1.0,
        gt=0,
        description="a connect to Redis or an answer from it not in this time is a failure",
    )
    lease_s: float = Field(
        default=30.0, ge=3, description="concurrency lease, renewed every third of it"
    )
    retry_after_s: float = Field(
        default=2.0, gt=0, description="Retry-After of the 503 while the store is down (closed)"
    )


class DiscoverySpec(SpecModel):
    """Scaled pools (the endpoints file's `discovery`): the gateway resolves each pool's
    headless Service every `interval_s` and routes to the addresses it returns, in at most
    `max_replicas` slots (the file's own `max_replicas` wins; render writes it)."""

    interval_s: float = Field(default=5.0, gt=0, description="DNS lookups' period")
    max_replicas: int = Field(
        default=16,
        ge=1,
        le=MAX_REPLICAS,
        description="replica slots of a scaled pool whose endpoints entry has no max_replicas",
    )


class LogSpec(SpecModel):
    level: Literal["debug", "info", "warning", "error"] = "info"
    prompts: bool = Field(default=False, description="log prompts (redacted when false)")
    requests: bool = Field(default=True, description="one JSON line per request")


class TlsSpec(SpecModel):
    certfile: str
    keyfile: str


class GatewaySpec(SpecModel):
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0)
    metrics_port: int = Field(
        default=DEFAULT_METRICS_PORT,
        ge=0,
        le=65535,
        description="/metrics (and /health) are served here, never on the API port "
        "(0: a free port, as tests use)",
    )
    redis_url: str | None = None
    replicas: int = Field(
        default=1,
        ge=1,
        le=64,
        description="gateway pods `inhouse render` deploys; more than one shares limits through "
        "redis_url",
    )
    keys_file: str | None = Field(default=None, description="file of `TENANT HASH` lines")
    tiers: dict[str, TierSpec] = Field(default_factory=dict, description="merged on defaults")
    tenants: tuple[TenantSpec, ...] = ()
    health: HealthSpec = Field(default_factory=HealthSpec)
    proxy: ProxySpec = Field(default_factory=ProxySpec)
    discovery: DiscoverySpec = Field(default_factory=DiscoverySpec)
    server: ServerSpec = Field(default_factory=ServerSpec)
    limits: LimitStoreSpec = Field(default_factory=LimitStoreSpec)
    log: LogSpec = Field(default_factory=LogSpec)
    tls: TlsSpec | None = None
    otlp_endpoint: str | None = Field(default=None, description="OTLP/HTTP traces endpoint")

    @field_validator("replicas")
    @classmethod
    def _shared_limits(cls, replicas: int, info: ValidationInfo) -> int:
        # NOTE: each gateway would count a tenant's rate, concurrency and token budget in its
        # own memory: N gateways behind one Service admit up to N times every limit.
        if replicas > 1 and not info.data.get("redis_url"):  # "" runs limits in memory too
            raise ValueError(
                f"{replicas} gateways without redis_url would each count a tenant's limits and "
                f"budgets alone, so a tenant could spend {replicas} times its budget; set "
                "redis_url (redis://host:6379/0) to share them, or replicas: 1"
            )
        return replicas

    @model_validator(mode="after")
    def _check(self) -> GatewaySpec:
        names = [t.name for t in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError(f"tenant names must be unique, got {names}")
        tiers = self.all_tiers
        for tenant in self.tenants:
            if tenant.tier not in tiers:
                raise ValueError(
                    f"tenant {tenant.name!r}: tier {tenant.tier!r} is unknown; tiers: "
                    f"{', '.join(tiers)}"
                )
            for entry in tenant.keys:
                parse_key_hash(entry)  # raises ValueError naming the problem
        return self

    @property
    def all_tiers(self) -> dict[str, TierSpec]:
        return {**DEFAULT_TIERS, **self.tiers}


def parse_key_hash(entry: str) -> tuple[str, bytes, bytes]:
    """`ihk1$<id>$<salt hex>$<sha256 hex>` → (id, salt, digest)."""
    parts = entry.split("$")
    if len(parts) != 4 or parts[0] != KEY_HASH_SCHEME:
        raise ValueError(
            f"key hash {entry[:24]!r}... is not `{KEY_HASH_SCHEME}$ID$SALT$HASH`; create keys "
            "with `inhouse gateway keys create --tenant NAME` (never store the key itself)"
        )
    try:
        salt, digest = bytes.fromhex(parts[2]), bytes.fromhex(parts[3])
    except ValueError:
        raise ValueError(f"key hash for id {parts[1]!r}: salt and hash must be hex") from None
    if len(digest) != 32 or len(salt) < 8:
        raise ValueError(f"key hash for id {parts[1]!r}: a 32-byte hash and 8+ byte salt")
    return parts[1], salt, digest


_SECRET_KEY = re.compile(r"(^|_)(api_?keys?|keys?|secrets?|passwords?|tokens?)$", re.IGNORECASE)


def check_no_secrets(value: Any, path: str = "gateway") -> None:
    """Refuse key material in the stack's `gateway` section: `inhouse render` writes the stack
    into a ConfigMap, and the stack holds key hashes only."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and item and _SECRET_KEY.search(str(key)):
                raise SpecError(
                    f"{path}.{key}: looks like key material, and render writes the stack into "
                    "a ConfigMap; move it to the Secret the gateway mounts (docs/render.md)"
                )
            check_no_secrets(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_no_secrets(item, f"{path}[{index}]")


def parse_gateway(data: Any, source: str = "stack") -> GatewaySpec:
    """`stack.gateway` (a mapping, possibly empty) as a typed spec; errors name the field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(f"{source}: gateway must be a mapping (see docs/gateway.md)")
    try:
        check_no_secrets(data)
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None
    try:
        return GatewaySpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            describe_validation_error(exc, f"{source}: gateway", "docs/gateway.md")
        ) from exc


def parse_keys_file(text: str, source: str) -> list[tuple[str, str]]:
    """(tenant, key hash) pairs from a keys file's text: `TENANT HASH` per line, `#` comments;
    `source` (the file's path) names it in errors. `inhouse.spec.load.read_keys_file` reads it."""
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2:
            raise SpecError(f"{source}:{number}: expected `TENANT HASH`, got {line[:40]!r}")
        try:
            parse_key_hash(fields[1])
        except ValueError as exc:
            raise SpecError(f"{source}:{number}: {exc}") from None
        pairs.append((fields[0], fields[1]))
    return pairs
