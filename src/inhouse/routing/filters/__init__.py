"""Filters: narrow a policy's candidate replicas, one per file; never to none from some.

A filter is `(request, candidates) -> kept candidates`. `Policy.choose` drops unhealthy
replicas first and skips the filters once one candidate is left.
"""
