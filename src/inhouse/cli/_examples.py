"""The example requests `inhouse up` prints once the stack is ready (and the README shows): one
with curl, one with the `openai` client, both reading the key from INHOUSE_API_KEY so that the
key never lands in a shell history."""

from __future__ import annotations

import shlex

API_KEY_ENV = "INHOUSE_API_KEY"


def curl_example(base_url: str, model: str) -> str:
    body = (
        f'{{"model": "{model}", "messages": [{{"role": "user", "content": "Say hello"}}], '
        '"max_tokens": 32}'
    )
    return (
        f"curl -s {base_url}/v1/chat/completions "
        f'-H "Authorization: Bearer ${API_KEY_ENV}" '
        f"-H 'Content-Type: application/json' -d {shlex.quote(body)}"
    )


def openai_example(base_url: str, model: str) -> str:
    # Double quotes inside, so the shell's single quotes need no escapes.
    code = (
        "import os; from openai import OpenAI; "
        f'c = OpenAI(base_url="{base_url}/v1", api_key=os.environ["{API_KEY_ENV}"]); '
        f'r = c.chat.completions.create(model="{model}", '
        'messages=[{"role": "user", "content": "Say hello"}], max_tokens=32); '
        "print(r.choices[0].message.content)"
    )
    return f"python -c {shlex.quote(code)}"


def example_lines(base_url: str, model: str, new_key: str | None, has_tenants: bool) -> list[str]:
    """What to run next: set the key, then a request with curl and with `openai`."""
    if new_key:
        key_line = f"export {API_KEY_ENV}={new_key}"
    elif has_tenants:
        key_line = f"export {API_KEY_ENV}=<a key of one of the stack's tenants>"
    else:
        key_line = f"export {API_KEY_ENV}=<the demo key you passed>"
    return [
        "Try it (the same key works for `inhouse bench`, which reads INHOUSE_API_KEY):",
        f"  {key_line}",
        f"  {curl_example(base_url, model)}",
        f"  {openai_example(base_url, model)}",
    ]
