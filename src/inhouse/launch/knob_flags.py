"""Command-line flags generated from `EngineKnobs`' fields, so no knob can drift on the way.

* `add_knob_arguments(parser)`: one flag per knob that acts in the simulated engine (`core` or
  `server`), named as vLLM names it, typed and defaulted from the field.
* `knobs_from_args(namespace)`: the parsed flags back into `EngineKnobs` (validated; a bad value
  names its flag).
* `simulated_knob_args(knobs)`: the flags `inhouse engine` needs to run `knobs`; parsing them
  with `add_knob_arguments`' parser gives `knobs` back (vLLM-only knobs aside).
* `vllm_knob_args(knobs)`: vLLM's flags for the knobs, in field order. A knob is rendered when
  it differs from its default, is marked `always`, or is marked `explicit` and set. The
  `HAND_RENDERED` ones are rendered by `engine_args` beside the flags they belong with (the
  host KV tier's two flags, the LoRA block, `extra_args` last so they win).
"""

from __future__ import annotations

import argparse
import types
import typing
from typing import Any, Literal, get_args, get_origin

from pydantic import ValidationError

from inhouse.errors import SpecError
from inhouse.spec.knobs import EngineKnobs, knob_names, knob_of

SIMULATED_PLACES = frozenset({"core", "server"})


def fmt_number(value: float) -> str:
    """Numbers as a user would type them: 0.9, 16, 1.5 (no trailing .0 on integers)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def engine_flag(name: str) -> str:
    """`inhouse engine`'s flag for knob `name` ('' if the simulated engine does not take it)."""
    knob = knob_of(name)
    if not knob.acts & SIMULATED_PLACES:
        return ""
    return knob.flag or "--" + name.replace("_", "-")


def _value_type(name: str) -> tuple[type, tuple[str, ...]]:
    """The scalar type of a knob (None stripped) and, for a Literal, its choices."""
    annotation = EngineKnobs.model_fields[name].annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = args[0]
    if get_origin(annotation) is Literal:
        return str, tuple(get_args(annotation))
    assert isinstance(annotation, type), f"knob {name}: unsupported type {annotation}"
    return annotation, ()


def add_knob_arguments(parser: argparse.ArgumentParser) -> None:
    """Add a flag for every knob the simulated engine takes."""
    group = parser.add_argument_group("engine knobs (vLLM's names and meanings; docs/stack.md)")
    for name in knob_names():
        flag = engine_flag(name)
        if not flag:
            continue
        field = EngineKnobs.model_fields[name]
        kind, choices = _value_type(name)
        help_text = field.description or name.replace("_", " ")
        if kind is bool:
            group.add_argument(
                flag,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=field.default,
                help=help_text,
            )
            continue
        group.add_argument(
            flag,
            dest=name,
            type=kind,
            default=field.default,
            choices=choices or None,
            help=f"{help_text} (default: {field.default})",
        )


def knobs_from_args(args: argparse.Namespace) -> EngineKnobs:
    """The knobs the flags of `add_knob_arguments` were given, checked."""
    values = {n: getattr(args, n) for n in knob_names() if engine_flag(n)}
    try:
        return EngineKnobs(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else ""
        flag = engine_flag(name) if name in values else name
        raise SpecError(f"{flag} {values.get(name)!r}: {error['msg']}") from None


def _scalar_args(flag: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        return [flag if value else "--no-" + flag.removeprefix("--")]
    if isinstance(value, float):
        return [flag, fmt_number(value)]
    return [flag, str(value)]


def simulated_knob_args(knobs: EngineKnobs) -> list[str]:
    """`inhouse engine` flags that reproduce `knobs` (every knob it takes, set or not)."""
    args: list[str] = []
    for name in knob_names():
        flag = engine_flag(name)
        value = getattr(knobs, name)
        if flag and value is not None:
            args += _scalar_args(flag, value)
    return args


# Knobs `engine_args` renders by hand, next to the flags they belong with.
HAND_RENDERED = frozenset(
    {
        "host_kv_gib",
        "max_loras",
        "max_lora_rank",
        "tool_call_parser",
        "otlp_traces_endpoint",
        "collect_detailed_traces",
        "extra_args",
    }
)


def vllm_knob_args(knobs: EngineKnobs) -> list[str]:
    """vLLM's flags for `knobs`, in field order, but for the `HAND_RENDERED` ones."""
    args: list[str] = []
    for name in knob_names():
        knob = knob_of(name)
        if "vllm" not in knob.acts or name in HAND_RENDERED:
            continue
        value = getattr(knobs, name)
        default = EngineKnobs.model_fields[name].default
        is_set = knob.explicit and name in knobs.model_fields_set
        if value is not None and (knob.always or is_set or value != default):
            flag = knob.vllm_flag or knob.flag or "--" + name.replace("_", "-")
            args += _scalar_args(flag, value)
    return args
