"""Tool calling in the simulated engine, as vLLM 0.32 serves it with a tool parser.

vLLM's rules (vllm/entrypoints/openai/chat_completion/protocol.py, serving.py and
renderers/online_renderer.py in the CPU build's venv), kept here:

* `tools: []` is refused; tools without `tool_choice` mean `"auto"`; `tool_choice` without
  tools is refused, as is any value but `"none"`, `"auto"`, `"required"` or a named function
  that is among the tools.
* `"auto"` needs `--enable-auto-tool-choice` and `--tool-call-parser`; `"required"` and a named
  function need `--tool-call-parser`; without them the request is refused with vLLM's message.
* A named function or `"required"` forces a call (vLLM's structured outputs): the model writes
  the arguments as JSON (named) or a JSON array of `{"name", "parameters"}` (required). The
  message has `content: ""` and `tool_calls: [{"id": "chatcmpl-tool-<32 hex>", "type":
  "function", "function": {"name", "arguments"}}]`; `finish_reason` is `"stop"` for a named
  function and `"tool_calls"` for `"required"`. Streamed, the first delta carries the call's id,
  type, name and first argument text, later ones only argument text (`index` 0).
* `"auto"` leaves the choice to the model; the simulated model answers in text.

The simulated model's arguments follow the function's JSON schema: every required property
(all of them when none is marked required) gets a value of its type (an enum's first value,
words for strings, 1 for numbers, true, one-item arrays, nested objects), the same for the
same request. The call's text is what the engine generates, token for token, so usage, timing
and prefix caching count it like any answer.
"""

from __future__ import annotations

import argparse
import json
import math
import uuid
from dataclasses import dataclass
from typing import Any

from inhouse.openai_errors import invalid

# Words string arguments are made of, chosen by the request's seed.
WORDS = ("acme", "north", "invoice", "renewal", "priority", "contact", "quarter", "open")
MAX_SCHEMA_DEPTH = 4


@dataclass(frozen=True)
class ToolOptions:
    """The simulated engine's tool-calling flags, by vLLM's names."""

    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None


def add_tool_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--enable-auto-tool-choice", action="store_true", help='allow tool_choice "auto"'
    )
    parser.add_argument(
        "--tool-call-parser", help="as vLLM's (e.g. llama3_json, hermes): enables tool calls"
    )


def tool_options(args: argparse.Namespace) -> ToolOptions:
    return ToolOptions(args.enable_auto_tool_choice, args.tool_call_parser)


@dataclass(frozen=True)
class ToolCall:
    """A call the engine will generate: `raw_text` is the model's output (what is counted
    and timed), `arguments` the call's arguments as the client sees them."""

    kind: str  # "named" | "required"
    name: str
    call_id: str
    arguments: str
    raw_text: str

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.kind == "required" else "stop"

    def arguments_in(self, raw: str) -> str:
        """The arguments visible in a prefix `raw` of the generated text."""
        if self.kind == "named":
            return raw
        start = self.raw_text.index(self.arguments)
        return raw[start : start + len(self.arguments)]


def _choice_of(body: dict[str, Any]) -> tuple[Any, list[dict[str, Any]] | None]:
    tools = body.get("tools")
    if tools == []:
        raise invalid(
            "`tools` must not be an empty array. Either provide at least one tool or omit the "
            "field entirely.",
            param="tools",
        )
    if tools is not None and not (
        isinstance(tools, list)
        and all(isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools)
    ):
        raise invalid('`tools` must be a list of {"type": "function", "function": {...}}.')
    choice = body.get("tool_choice", "auto" if tools else None)
    return choice, tools


def _named(choice: dict[str, Any], tools: list[dict[str, Any]]) -> str:
    usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
    function = choice.get("function")
    if not isinstance(function, dict):
        raise invalid(
            f"Invalid value for `function`: `{function}` in `tool_choice`! {usage}",
            param="tool_choice.function",
        )
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise invalid(
            f"Invalid `name` in `function`: `{name}` in `tool_choice`! {usage}",
            param="tool_choice.function.name",
        )
    if not any(t["function"].get("name") == name for t in tools):
        raise invalid(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            param="tool_choice",
        )
    return name


def plan_tool_call(body: dict[str, Any], options: ToolOptions, seed: int) -> ToolCall | None:
    """The call a request forces, None when it forces none; vLLM's errors for bad requests."""
    choice, tools = _choice_of(body)
    if choice is None or choice == "none":
        return None
    if tools is None:
        raise invalid("When using `tool_choice`, `tools` must be set.", param="tool_choice")
    if choice not in ("auto", "required") and not isinstance(choice, dict):
        raise invalid(
            f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" or '
            '"required" are supported.',
            param="tool_choice",
        )
    name = _named(choice, tools) if isinstance(choice, dict) else None
    if options.tool_call_parser is None or (
        choice == "auto" and not options.enable_auto_tool_choice
    ):
        if choice == "auto":
            raise invalid(
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                "to be set"
            )
        what = f'function "{name}"' if name else f'"{choice}"'
        raise invalid(f"tool_choice={what} requires --tool-call-parser to be set")
    if choice == "auto":
        return None  # the simulated model answers in text
    if name is None:
        name = tools[seed % len(tools)]["function"]["name"]
    function = next(t["function"] for t in tools if t["function"].get("name") == name)
    arguments = json.dumps(
        example_value(function.get("parameters") or {}, seed, 0), ensure_ascii=False
    )
    call_id = f"chatcmpl-tool-{uuid.uuid4().hex}"
    if isinstance(choice, dict):
        return ToolCall("named", name, call_id, arguments, arguments)
    raw = f'[{{"name": {json.dumps(name)}, "parameters": {arguments}}}]'
    return ToolCall("required", name, call_id, arguments, raw)


def example_value(schema: Any, seed: int, depth: int) -> Any:
    """A value that validates against a simple JSON schema, the same for the same seed."""
    if not isinstance(schema, dict) or depth > MAX_SCHEMA_DEPTH:
        return None
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        # NOTE: keywords of the wrong type (a list of properties, a non-string required
        # name) are ignored, not trusted: the call stays well-formed JSON.
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        wanted = required if isinstance(required, list) and required else list(properties)
        names = [key for key in wanted if isinstance(key, str)]
        return {
            key: example_value(properties.get(key, {}), seed + i, depth + 1)
            for i, key in enumerate(names)
        }
    if kind == "array":
        return [example_value(schema.get("items") or {}, seed, depth + 1)]
    if kind in ("integer", "number"):
        return max(1, _least_at_or_above(schema.get("minimum")))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return f"{WORDS[seed % len(WORDS)]} {WORDS[(seed // 7) % len(WORDS)]}"


def _least_at_or_above(minimum: object) -> int:
    """The least whole number at or above a schema's `minimum`; 1 when it is not a finite
    number (absent, a string, `1e400` parsed as infinity)."""
    if isinstance(minimum, bool) or not isinstance(minimum, int | float):
        return 1
    return math.ceil(minimum) if math.isfinite(minimum) else 1


def structured_text(response_format: dict[str, Any] | None, seed: int) -> str | None:
    """The answer a `response_format` forces, as vLLM's structured outputs do: JSON that fits
    `json_schema.schema`, or a JSON object for `json_object`; None for `text` or none."""
    if response_format is None or response_format.get("type") == "text":
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return "{}"
    if kind != "json_schema":
        raise invalid(
            'response_format must be {"type": "text"}, {"type": "json_object"} or {"type": '
            '"json_schema", "json_schema": {"name": ..., "schema": {...}}}.',
            param="response_format",
        )
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise invalid(
            'response_format {"type": "json_schema"} needs the schema in `json_schema.schema`.',
            param="response_format",
        )
    return json.dumps(example_value(schema, seed, 0), ensure_ascii=False)


def tools_prompt(body: dict[str, Any]) -> str:
    """The tools as the prompt carries them (ahead of the messages, as chat templates put
    them): they are prompt tokens, and a stable prefix across an agent's turns."""
    tools = body.get("tools")
    if not tools:
        return ""
    text = json.dumps(tools, ensure_ascii=False, sort_keys=True)
    return f"<|im_start|>tools\n{text}<|im_end|>\n"


def message(call: ToolCall, raw: str) -> dict[str, Any]:
    """The assistant message of a (possibly cut) call, as vLLM's ChatMessage serializes."""
    return {
        "role": "assistant",
        "content": "",
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_in(raw)},
            }
        ],
        "reasoning": None,
    }


def delta(call: ToolCall, first: bool, arguments: str) -> dict[str, Any]:
    """A streamed tool-call delta: the first names the call, the rest add argument text."""
    if first:
        item: dict[str, Any] = {
            "id": call.call_id,
            "type": "function",
            "index": 0,
            "function": {"name": call.name, "arguments": arguments},
        }
    else:
        item = {"index": 0, "function": {"arguments": arguments}}
    return {"tool_calls": [item]}
