"""One simulated engine server's state: the replica, its core and runner, tokenizer, metrics,
readiness and fault switches; and request admission (model names, lengths, the queue limit)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from inhouse.engine import Replica, ReplicaSpec, Request, build_replica
from inhouse.errors import SpecError
from inhouse.hashing import hash_token_blocks
from inhouse.openai_errors import (
    BUSY_MESSAGE,
    DRAINING_MESSAGE,
    ENGINE_DEAD_MESSAGE,
    LOADING_MESSAGE,
    ApiError,
    invalid,
    max_tokens_over_context,
    prompt_over_context,
    rejection_message,
    unknown_model,
)
from inhouse.server.generation import (
    GenerationPlan,
    output_token_ids,
    parse_eos_lengths,
    plan_forced,
    plan_generation,
)
from inhouse.server.metrics import EngineMetrics
from inhouse.server.responses import new_id
from inhouse.server.runner import EngineRunner, Stream
from inhouse.server.tools import ToolOptions
from inhouse.spec.knobs import EngineKnobs
from inhouse.spec.load import resolve_local_models
from inhouse.tokenizer import Tokenizer, load_tokenizer, seed_of

log = logging.getLogger("inhouse.engine")

# Generated tokens whose blocks are hashed for prefix caching (see `_block_hashes`).
MAX_HASHED_OUTPUT_TOKENS = 8192


@dataclass(frozen=True)
class EngineOptions:
    """Everything `inhouse engine` is told: what runs where, the knobs (the stack file's own
    type, `EngineKnobs`), and the simulated server's own settings."""

    model: str
    served_model_names: tuple[str, ...] = ()
    gpu: str = "h100_sxm"
    tp: int = 1
    quant: str = "bf16"
    backend: str = "vllm"
    knobs: EngineKnobs = field(default_factory=EngineKnobs)
    lora_modules: tuple[str, ...] = ()
    time_scale: float = 1.0
    eos_length_dist: str | None = None
    seed: int = 0
    max_num_queued_reqs: int | None = None
    log_prompts: bool = False
    lag_tolerance_s: float = 0.005
    catchup_window_s: float = 0.2
    tools: ToolOptions = field(default_factory=ToolOptions)

    @property
    def served_names(self) -> tuple[str, ...]:
        """The names clients may use for the base model (the first names its metrics)."""
        return self.served_model_names or (self.model,)

    def replica_spec(self) -> ReplicaSpec:
        return ReplicaSpec(
            model=self.model,
            gpu=self.gpu,
            tp=self.tp,
            quant=self.quant,
            backend=self.backend,
            knobs=self.knobs,
            lora_adapters=tuple(
                m.name for m in parse_lora_modules(self.lora_modules, self.served_names)
            ),
        )


@dataclass(frozen=True, slots=True)
class LoraModule:
    name: str
    path: str


def parse_lora_modules(
    entries: tuple[str, ...], served_names: tuple[str, ...] = ()
) -> list[LoraModule]:
    """vLLM's `--lora-modules name=path` (a bare `name` is accepted: path = name). A name that
    is empty, repeated or one of `served_names` is refused: requests could not reach it."""
    out: list[LoraModule] = []
    for entry in entries:
        name, _, path = (part.strip() for part in entry.partition("="))
        if not name:
            raise SpecError(f"--lora-modules {entry!r}: the adapter needs a name (NAME=PATH)")
        if any(module.name == name for module in out):
            raise SpecError(
                f"--lora-modules: adapter name {name!r} is given twice; each adapter needs its "
                "own name"
            )
        if name in served_names:
            raise SpecError(
                f"--lora-modules: adapter name {name!r} is also a --served-model-name; requests "
                "for it could not reach the adapter"
            )
        out.append(LoraModule(name, path or name))
    return out


@dataclass(eq=False)
class Faults:
    """Drill switches, set from the admin port only."""

    fail_next: int = 0
    fail_status: int = 500
    hang_all: asyncio.Event = field(default_factory=asyncio.Event)  # set = not hanging

    def __post_init__(self) -> None:
        self.hang_all.set()


class EngineState:
    def __init__(self, options: EngineOptions, replica: Replica, tokenizer: Tokenizer) -> None:
        self.options = options
        self.replica = replica
        self.tokenizer = tokenizer
        self.max_model_len = replica.config.max_model_len
        self.block_size = replica.config.block_size
        self.served_names = options.served_names
        self.model_name = self.served_names[0]
        self.loras = parse_lora_modules(options.lora_modules, self.served_names)
        self.eos = parse_eos_lengths(options.eos_length_dist)
        self.metrics = EngineMetrics(self.model_name, self.max_model_len, self._cache_info())
        self.core = replica.new_engine()
        self.runner = EngineRunner(
            self.core,
            self.metrics,
            time_scale=options.time_scale,
            lag_tolerance_s=options.lag_tolerance_s,
            catchup_window_s=options.catchup_window_s,
        )
        self.faults = Faults()
        self.is_loaded = False
        # `time.monotonic()` when /health first turned 200 (`mark_loaded`): drills compare the
        # gateway's routing with it, not with when their own probe happened to look.
        self.loaded_at: float | None = None
        self.is_draining = False
        self.created = int(time.time())

    def mark_loaded(self) -> None:
        """The model is loaded: /health answers 200 from now on (unless draining)."""
        self.loaded_at = time.monotonic()
        self.is_loaded = True

    @classmethod
    def build(cls, options: EngineOptions) -> EngineState:
        """Resolve the replica (raising SpecError / DoesNotFitError) and the tokenizer."""
        resolve_local_models((options.model,))  # a local model dir: its config.json, read here
        replica = build_replica(options.replica_spec())
        tokenizer = load_tokenizer(options.model, replica.model.vocab_size)
        return cls(options, replica, tokenizer)

    def _cache_info(self) -> dict[str, str]:
        config = self.replica.config
        memory = self.replica.memory
        return {
            "block_size": str(config.block_size),
            "cache_dtype": self.options.knobs.kv_cache_dtype,
            "enable_prefix_caching": str(config.enable_prefix_caching),
            "gpu_memory_utilization": str(self.options.knobs.gpu_memory_utilization),
            "num_gpu_blocks": str(config.num_gpu_blocks),
            "num_cpu_blocks": str(config.num_host_blocks or None),
            "kv_cache_size_tokens": str(memory.kv_tokens),
        }

    # -- names -----------------------------------------------------------------------------

    @property
    def model_names(self) -> list[str]:
        return [*self.served_names, *(lora.name for lora in self.loras)]

    def resolve_model(self, name: str | None) -> str:
        """The model a request names; none (null or "", which vLLM tests for truth) is the
        served model."""
        if not name or name in self.served_names:
            return name or self.model_name
        if any(lora.name == name for lora in self.loras):
            return name
        raise ApiError(404, unknown_model(name, self.model_names), param="model")

    # -- admission -------------------------------------------------------------------------

    def check_accepting(self) -> None:
        self.check_alive()
        if self.is_draining:
            raise ApiError(503, DRAINING_MESSAGE)
        if not self.is_loaded:
            raise ApiError(503, LOADING_MESSAGE)
        faults = self.faults
        if faults.fail_next > 0:
            faults.fail_next -= 1
            raise ApiError(faults.fail_status, "Injected failure (fault injection).")

    def check_alive(self) -> None:
        if self.runner.is_dead:
            raise ApiError(500, ENGINE_DEAD_MESSAGE)

    def _block_hashes(self, prompt_ids: list[int], plan: GenerationPlan, salt: str) -> list[int]:
        """Hashes of the prompt's blocks and of the answer's: vLLM caches generated blocks too,
        so a next turn that re-sends this answer hits them. The answer is known up front here;
        only its first `MAX_HASHED_OUTPUT_TOKENS` tokens are hashed, to bound the work."""
        num_output = min(plan.output_len, MAX_HASHED_OUTPUT_TOKENS)
        output_ids = output_token_ids(self.tokenizer, plan, num_output)
        return hash_token_blocks(prompt_ids + output_ids, self.block_size, salt)

    def check_max_tokens(self, requested: int | None, param: str = "max_tokens") -> None:
        """vLLM's refusal of an output longer than the context, which it makes right after
        the model check, before the prompt is read or the sampling parameters checked."""
        if requested is not None and requested > self.max_model_len:
            raise invalid(
                max_tokens_over_context(requested, self.max_model_len, param),
                param=param,
                value=requested,
            )

    def admit(
        self,
        prompt_ids: list[int],
        is_text_prompt: bool,
        requested_max_tokens: int | None,
        min_tokens: int,
        ignore_eos: bool,
        stop: list[str],
        priority: int,
        model: str,
        prefix: str,
        arrival_s: float,
        forced_text: str | None = None,
    ) -> Stream:
        """Check lengths, plan the output, and queue the request; raises vLLM's errors.
        `requested_max_tokens` was checked against the context already (`check_max_tokens`,
        which vLLM makes far earlier); `arrival_s` is when the handler started on it (the
        engine's clock); `forced_text` an output fixed in advance (a forced tool call)."""
        max_len = self.max_model_len
        num_prompt = len(prompt_ids)
        if num_prompt > max_len:
            # vLLM tokenizes text prompts only up to max_model_len + 1 tokens.
            count = max_len + 1 if is_text_prompt else num_prompt
            message = prompt_over_context(max_len, count, at_least=count == max_len + 1)
            raise invalid(message, param="input_tokens", value=count)
        if num_prompt == 0:
            raise invalid(
                "Either prompt or prompt_embeds must be provided and non-empty.", param="prompt"
            )
        max_tokens = max_len - num_prompt
        if requested_max_tokens is not None:
            max_tokens = min(max_tokens, requested_max_tokens)
        if max_tokens < 1:
            raise invalid(
                f"max_tokens must be at least 1, got {max_tokens}.",
                param="max_tokens",
                value=max_tokens,
            )
        limit = self.options.max_num_queued_reqs
        if limit is not None and self.core.num_waiting >= limit:
            self.metrics.rejected_reqs.inc()
            raise ApiError(503, BUSY_MESSAGE)
        if forced_text is not None:
            plan = plan_forced(self.tokenizer, seed_of(prompt_ids), forced_text, max_tokens)
        else:
            plan = self._plan(prompt_ids, max_tokens, min_tokens, ignore_eos, stop)
        salt = "" if model in self.served_names else f"lora:{model}"
        request = Request(
            new_id(prefix),
            num_prompt,
            plan.output_len,
            arrival_s=arrival_s,
            block_hashes=self._block_hashes(prompt_ids, plan, salt),
            priority=priority,
            lora=None if model in self.served_names else model,
        )
        stream = Stream(request, plan, max_tokens, prompt_ids)
        self.check_alive()  # it may have died while the body was read
        rejection = self.runner.submit(stream)
        if rejection is not None:
            raise invalid(rejection_message(rejection), param="input_tokens", value=num_prompt)
        if self.options.log_prompts:
            log.info("request %s prompt: %r", request.request_id, self.tokenizer.decode(prompt_ids))
        log.info(
            "Added request %s: prompt_tokens=%d max_tokens=%d priority=%d",
            request.request_id,
            num_prompt,
            max_tokens,
            priority,
        )
        return stream

    def _plan(
        self,
        prompt_ids: list[int],
        max_tokens: int,
        min_tokens: int,
        ignore_eos: bool,
        stop: list[str],
    ) -> GenerationPlan:
        return plan_generation(
            self.tokenizer,
            seed_of(prompt_ids),
            max_tokens,
            min(min_tokens, max_tokens),
            ignore_eos,
            stop,
            self.eos,
            self.options.seed,
        )

    def model_root(self) -> str:
        path = Path(self.options.model)
        return str(path.resolve()) if path.exists() else self.options.model
