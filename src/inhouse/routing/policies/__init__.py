"""Routing policies, one per file: each a composition of `filters`, `scorers` and the
`pickers.max_score` picker through `framework.Policy`, registered by name in `registry`."""
