"""The gateway: tenants and keys, limits, the long-prompt gate, priority tiers, pool and replica
choice with the shared routing policies, streaming pass-through, health, metrics. See
docs/gateway.md; `inhouse gateway` runs it."""
