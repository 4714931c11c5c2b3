"""The OpenAPI document `/openapi.json` serves: the routes, their bodies as the gateway checks
them (vLLM accepts more fields; the gateway forwards them), and the error shape."""

from __future__ import annotations

from typing import Any

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": "integer"},
            },
        }
    },
}
_COMMON = {
    "model": {"type": "string"},
    "stream": {"type": "boolean"},
    "stream_options": {
        "type": "object",
        "properties": {"include_usage": {"type": "boolean"}},
    },
    "max_tokens": {"type": "integer", "minimum": 1},
    "priority": {"type": "integer"},
    "user": {"type": "string"},
}
_CHAT = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        **_COMMON,
        "max_completion_tokens": {"type": "integer", "minimum": 1},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role"],
                "properties": {"role": {"type": "string"}, "content": {"type": "string"}},
            },
        },
    },
}
_COMPLETION = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        **_COMMON,
        "prompt": {
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
            ]
        },
    },
}


def _errors(*codes: int) -> dict[str, Any]:
    ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {str(code): {"description": "error", **ref} for code in codes}


def _generation(schema: str, summary: str) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "security": [{"bearer": []}],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}
                },
            },
            "responses": {
                "200": {
                    "description": "a completion, or an SSE stream when `stream` is true",
                    "content": {"application/json": {}, "text/event-stream": {}},
                },
                **_errors(400, 401, 403, 404, 413, 429, 502, 503),
            },
        }
    }


def openapi_document(title: str) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": title, "version": "1"},
        "paths": {
            "/v1/chat/completions": _generation("ChatCompletionRequest", "chat completion"),
            "/v1/completions": _generation("CompletionRequest", "text completion"),
            "/v1/models": {
                "get": {
                    "summary": "models this key may use",
                    "security": [{"bearer": []}],
                    "responses": {"200": {"description": "model list"}, **_errors(401)},
                }
            },
            "/health": {
                "get": {
                    "responses": {
                        "200": {"description": "ready"},
                        "503": {"description": "not ready"},
                    }
                }
            },
            "/metrics": {"get": {"responses": {"200": {"description": "Prometheus text"}}}},
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": _ERROR,
                "ChatCompletionRequest": _CHAT,
                "CompletionRequest": _COMPLETION,
            },
        },
    }
