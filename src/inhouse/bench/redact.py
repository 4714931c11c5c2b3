"""Keys never reach a bench artifact: the recorded command line and every file written.

`inhouse bench` reads its API key from `INHOUSE_API_KEY` (or `OPENAI_API_KEY`), so it is not
on the command line (`ps` shows every process's arguments); `--api-key` still works, and its
value, any `Authorization` value and any URL's password are replaced by `REDACTED` in what
is recorded, as is the key itself wherever else it would appear (an error text, say).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

REDACTED = "REDACTED"
SECRET_FLAGS = ("--api-key",)
API_KEY_ENV = ("INHOUSE_API_KEY", "OPENAI_API_KEY")
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")
_BEARER = re.compile(r"(?i)(bearer\s+)\S+")
# A key of a written object that reads as a name (`workload`, `p99.9_ttft_ms`) is the files'
# schema, never redacted; any other (an error text counted in `errors`, a URL) is data.
_NAME = re.compile(r"^[\w.-]+$")


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line with the values of `--api-key` (either form) and URL passwords out."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_text(arg))
    return out


def redact_text(text: str, secrets: Sequence[str | None] = ()) -> str:
    """`text` with every given secret, bearer token and URL password replaced."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    return _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + "@", text)


def redact_value(value: Any, secrets: Sequence[str | None] = ()) -> Any:
    """Parsed JSON with every string in it redacted (`redact_text`), its shape and the names of
    its keys kept: redacting the serialized text renamed `workload` for a key "load" and broke
    the JSON for a key "s" (inside `false`)."""
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, list | tuple):
        return [redact_value(item, secrets) for item in value]
    if isinstance(value, dict):
        return {
            (key if _NAME.match(str(key)) else redact_text(str(key), secrets)): redact_value(
                item, secrets
            )
            for key, item in value.items()
        }
    return value
