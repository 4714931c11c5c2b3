"""How one replica spreads a model over GPUs: attention tensor and data parallelism, MoE tensor
and expert parallelism, pipeline stages.

The vocabulary is the one vLLM, SGLang and NVIDIA aiconfigurator share:

* `tp`: attention tensor parallelism. Heads are split over `tp` GPUs; the attention, dense
  MLP and LM-head weights are sharded `tp` ways; activations are all-reduced twice a layer.
* `attention_dp`: data-parallel attention groups. Each group of `tp` GPUs holds its own copy
  of the attention weights and its own sequences (and their KV); the groups meet in the MoE
  layers. A replica has `tp x attention_dp x pp` GPUs.
* `moe_tp`, `moe_ep`: how the routed experts of a layer spread over those `tp x attention_dp`
  GPUs: each GPU holds `num_experts / moe_ep` experts, each sliced `moe_tp` ways, so
  `moe_tp x moe_ep = tp x attention_dp`. Plain TP is `moe_tp = tp, moe_ep = 1`; vLLM's
  `--enable-expert-parallel` and SGLang's `--ep-size` on TP ranks give `moe_ep = tp`.
* `pp`: pipeline stages (layers split `pp` ways). Not modelled beyond 1: `check_layout`
  says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.errors import SpecError
from inhouse.spec.model import ModelSpec


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """A replica's parallel layout. `moe_tp = moe_ep = 0` means plain TP for the experts."""

    tp: int = 1
    attention_dp: int = 1
    moe_tp: int = 0
    moe_ep: int = 0
    pp: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "attention_dp", "pp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise SpecError(f"{name}={value!r}: must be a positive integer")
        for name in ("moe_tp", "moe_ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise SpecError(f"{name}={value!r}: must be a positive integer (0: derive)")
        if self.moe_tp == 0 and self.moe_ep == 0:
            object.__setattr__(self, "moe_tp", self.tp * self.attention_dp)
            object.__setattr__(self, "moe_ep", 1)
        elif self.moe_tp == 0 or self.moe_ep == 0:
            known = self.moe_tp or self.moe_ep
            other = max(self.tp * self.attention_dp // known, 1)
            object.__setattr__(self, "moe_tp", self.moe_tp or other)
            object.__setattr__(self, "moe_ep", self.moe_ep or other)
        if self.moe_tp * self.moe_ep != self.tp * self.attention_dp:
            raise SpecError(
                f"moe_tp={self.moe_tp} x moe_ep={self.moe_ep} must equal tp={self.tp} x "
                f"attention_dp={self.attention_dp}: the experts of a layer spread over the same "
                "GPUs as its attention"
            )

    @property
    def num_gpus(self) -> int:
        return self.tp * self.attention_dp * self.pp

    @property
    def moe_group(self) -> int:
        """GPUs the experts of one layer spread over."""
        return self.moe_tp * self.moe_ep

    @property
    def is_plain_tp(self) -> bool:
        return self.attention_dp == 1 and self.moe_ep == 1 and self.pp == 1

    def describe(self) -> str:
        parts = [f"TP{self.tp}"]
        if self.attention_dp > 1:
            parts.append(f"DP-attention {self.attention_dp}")
        if self.moe_ep > 1:
            parts.append(
                f"EP{self.moe_ep}" + (f" x MoE-TP{self.moe_tp}" if self.moe_tp > 1 else "")
            )
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        return " ".join(parts)


def as_layout(tp: int | ParallelLayout) -> ParallelLayout:
    """A plain TP degree, or a layout, as a layout."""
    return tp if isinstance(tp, ParallelLayout) else ParallelLayout(tp=tp)


def check_layout(layout: ParallelLayout, model: ModelSpec) -> None:
    """Raise `SpecError` naming the field if `model` cannot be laid out this way."""
    if layout.pp > 1:
        raise SpecError(
            f"pp={layout.pp}: pipeline parallelism is not modelled; use pp=1 (tensor, data "
            "and expert parallelism are)"
        )
    heads = model.num_attention_heads
    if heads % layout.tp:
        raise SpecError(
            f"tp={layout.tp}: {model.name} has {heads} attention heads, which do not split "
            f"{layout.tp} ways; use a tp that divides {heads}, or attention_dp for the rest"
        )
    if model.is_moe:
        if model.num_experts % layout.moe_ep:
            raise SpecError(
                f"moe_ep={layout.moe_ep}: {model.name} has {model.num_experts} experts, which "
                f"do not split {layout.moe_ep} ways; use an expert-parallel degree dividing "
                f"{model.num_experts}"
            )
        if model.intermediate_size % layout.moe_tp:
            raise SpecError(
                f"moe_tp={layout.moe_tp}: the experts of {model.name} are "
                f"{model.intermediate_size} wide, which does not split {layout.moe_tp} ways; "
                "use expert parallelism (moe_ep) instead"
            )
    elif layout.moe_ep > 1:
        raise SpecError(f"moe_ep={layout.moe_ep}: {model.name} is dense and has no experts")
