"""The LoRA terms of the analytic pool model (the engine core charges them exactly).

A pool that serves some workloads as LoRA adapters pays, per step, the batched-adapter
kernels (`perf.lora`): `token_slowdown` of the step in proportion to the share of its tokens on
an adapter. The analytic model takes that share as the adapter streams' share of the tokens the
pool computes (uncached prompt plus output) at peak. Session
streams' rates depend on the latency the model is solving for; here a turn is taken to last
its think time plus `DECODE_STEP_GUESS_S` per output token, a rough weight the simulator's check
corrects. Slot swaps are not in the analytic model: the plans' pools hold every adapter
(`max_loras` = the number of adapters), so none swaps; the simulator counts them when a stack
says fewer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from inhouse.engine.build import Replica

if TYPE_CHECKING:
    from inhouse.plan.analytic import Stream

DECODE_STEP_GUESS_S = 0.03


def lora_step_scale(replica: Replica, streams: Sequence[Stream]) -> float:
    """A step of `t` seconds takes `t * scale` on this pool."""
    lora = replica.config.lora
    adapters = set(replica.spec.lora_adapters)
    if lora is None or not any(s.name in adapters for s in streams):
        return 1.0
    total = on_adapters = 0.0
    for stream in streams:
        shapes = stream.shapes
        tokens = float(np.mean(shapes.uncached + shapes.output))
        profile = stream.profile
        if profile.is_sessions:
            turn_s = profile.think_time_s + DECODE_STEP_GUESS_S * float(np.mean(shapes.output))
            rate = profile.peak_sessions / max(turn_s, 1e-3)
        else:
            rate = profile.peak_rate_per_s
        weight = rate * stream.share * tokens
        total += weight
        if stream.name in adapters:
            on_adapters += weight
    share = on_adapters / total if total > 0 else 0.0
    return 1.0 + lora.token_slowdown * share
