"""YAML text for rendered files: multi-document, keys in the order written, block scalars for
multi-line strings, and `#` comments where a reader needs the reason."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as `|` blocks and indents lists under keys."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True  # a shared dict (labels reused as selector) is written out each time


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=4096, allow_unicode=True)


def comment_block(text: str) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in text.splitlines())


def dump_documents(documents: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """`---`-separated documents, each preceded by its comment (may be empty)."""
    parts = []
    for comment, document in documents:
        parts.append("---\n" + comment_block(comment) + dump_yaml(dict(document)))
    return "".join(parts)


def annotate_list_items(text: str, notes: Mapping[str, str]) -> str:
    """Append `# note` to each `- ITEM` line whose item is a key of `notes` (e.g. vLLM flags
    in a container's args)."""

    def repl(match: re.Match[str]) -> str:
        item = match.group(2)
        note = notes.get(item)
        return f"{match.group(0)}  # {note}" if note else match.group(0)

    return re.sub(r"^(\s*- )(--[\w-]+)$", repl, text, flags=re.MULTILINE)
