"""The body of every error answer on the wire, in OpenAI's shape:
`{"error": {"message", "type", "param", "code"}}`.

Here because the HTTP/1.1 server answers what it cannot read (400, 408, 431, 503, a failed
handler's 500) in the same shape as the gateway's own refusals (`gateway/errors.py`), and the
server imports nothing of the gateway."""

from __future__ import annotations

import json


def error_json(message: str, error_type: str, param: str | None, code: int) -> bytes:
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
