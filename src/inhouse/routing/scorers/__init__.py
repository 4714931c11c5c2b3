"""Scorers: each gives every candidate replica a score in 0..1 (higher is better), one per file.

A scorer is `(request, candidates, prepared) -> scores`; `prepared` is what the policy's
`prepare` computed once per decision for all its scorers (`scorers.prefill.PrefillEstimate`
for the prefix and load scorers), None for scorers that need nothing shared.
"""
