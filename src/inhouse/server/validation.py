"""Reading a request body as vLLM does: `parse_body`, and vLLM's rendering of the errors it
finds (FastAPI/pydantic errors as "N validation error(s):" with `type: "Bad Request"` and the
field as `param`; a check across fields, `FieldError`, as "… (parameter=X, value=Y)" with
`type: "BadRequestError"`). The request models are `request_models`'.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from inhouse.openai_errors import ApiError, invalid

_M = TypeVar("_M", bound=BaseModel)

BODY_PARSE_ERROR = "There was an error parsing the body"


class BodyParseError(Exception):
    """A body FastAPI cannot read (not UTF-8, nested too deep): vLLM answers FastAPI's own
    400, `{"detail": "There was an error parsing the body"}`, not its error shape."""


class FieldError(ValueError):
    """A request check that spans fields (vLLM's `VLLMValidationError` in a model validator):
    rendered as vLLM renders it, a plain 400 `BadRequestError` "<message> (parameter=X[,
    value=Y])" with `param` naming the field, not as a validation error list."""

    def __init__(self, message: str, param: str, value: object = None) -> None:
        super().__init__(message)
        self.error = invalid(message, param=param, value=value)
        self.param = param


# The union's branch names (`request_models`') pydantic puts in an error's location, which
# vLLM's rendering does not show.
_UNION_BRANCHES = {
    "ResponseFormat",
    "StructuralTagResponseFormat",
    "LegacyStructuralTagResponseFormat",
    "TokenizePromptShape",
    "TokenizeChatShape",
}


def parse_body(raw: bytes, content_type: str, model: type[_M]) -> _M:
    """Parse a JSON body into `model`, raising vLLM's 400s for bad media type, JSON or fields
    (`BodyParseError` for a body FastAPI cannot read at all)."""
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise ApiError(
            400,
            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
            error_type="Bad Request",
        )
    if not raw:  # FastAPI reads no body as a missing one
        raise validation_error([_missing(("body",), None)])
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        error = {
            "type": "json_invalid",
            "loc": ("body", exc.pos),
            "msg": "JSON decode error",
            "input": {},
            "ctx": {"error": exc.msg},
        }
        raise validation_error([error]) from None
    except (ValueError, RecursionError):
        # Not UTF-8, or nested deeper than the parser goes: FastAPI's words for any body it
        # cannot parse, as vLLM answers them.
        raise BodyParseError(BODY_PARSE_ERROR) from None
    if data is None:
        raise validation_error([_missing(("body",), None)])
    if not isinstance(data, dict):
        error = {
            "type": "model_attributes_type",
            "loc": ("body",),
            "msg": "Input should be a valid dictionary or object to extract fields from",
            "input": data,
        }
        raise validation_error([error])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            cause = (err.get("ctx") or {}).get("error")
            if isinstance(cause, FieldError):
                raise cause.error from None
        raise validation_error(fastapi_errors(exc)) from None


def fastapi_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors as FastAPI lists a body's: located under `body`, context values as
    text."""
    errors: list[dict[str, Any]] = []
    for err in exc.errors(include_url=False):
        item: dict[str, Any] = {
            "type": err["type"],
            "loc": ("body", *err["loc"]),
            "msg": err["msg"],
            "input": err.get("input"),
        }
        if err.get("ctx"):
            item["ctx"] = {k: _ctx_value(v) for k, v in err["ctx"].items()}
        errors.append(item)
    return errors


def _missing(loc: tuple[str, ...], value: object) -> dict[str, Any]:
    return {"type": "missing", "loc": loc, "msg": "Field required", "input": value}


def _ctx_value(value: object) -> object:
    """A pydantic error's context value as FastAPI shows it: numbers and text as they are,
    anything else (an exception) as its text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _summarize(value: object) -> object:
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "...[truncated]"
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = str(value)
    return text if len(text) <= 200 else text[:200] + "...[truncated]"


def validation_error(errors: list[dict[str, Any]], param: str | None = None) -> ApiError:
    """FastAPI-style validation errors, rendered as vLLM renders them; `param` is the first
    error's location unless given."""
    count = len(errors)
    lines = []
    for err in errors[:10]:
        shown = dict(err)
        shown["loc"] = ".".join(str(p) for p in err["loc"] if not _is_internal_loc(str(p)))
        if "input" in shown:
            shown["input"] = _summarize(shown["input"])
        lines.append(f"  {shown}")
    if count > 10:  # "errors" even for one more: vLLM's label is the whole count's (odd)
        lines.append(f"  ...and {count - 10} more errors")
    message = f"{count} validation {'error' if count == 1 else 'errors'}:\n" + "\n".join(lines)
    first_loc = errors[0]["loc"] if errors else ()
    if param is None:
        param = ".".join(str(p) for p in first_loc if not _is_internal_loc(str(p))) or None
    return ApiError(400, message, param=param, error_type="Bad Request")


# pydantic-core's schema kinds that vLLM drops from an error's location (its
# `_INTERNAL_LOC_MARKERS`, vllm/entrypoints/serve/exception_handling/handlers/validation.py):
# a field named like one ("arguments" of a tool call's function) is dropped too.
_INTERNAL_LOC = {
    "function-wrap",
    "function-after",
    "function-before",
    "function-plain",
    "json-or-python",
    "lax-or-strict",
    "chain",
    "default",
    "nullable",
    "tagged-union",
    "union",
    "call",
    "arguments",
    "is-instance",
    "is-subclass",
    "callable",
    "str",
    "int",
    "float",
    "bool",
    "bytes",
    "bytearray",
    "list",
    "tuple",
    "dict",
    "set",
    "frozenset",
    "complex",
    "none",
    "nonetype",
}


def _is_internal_loc(segment: str) -> bool:
    return (
        any(c in segment for c in "[](){}")
        or segment.lower() in _INTERNAL_LOC
        or segment in _UNION_BRANCHES
    )
