"""YAML as the spec files are read: PyYAML's safe loader, minus what would mislead an operator.

* A key given twice in one mapping is an error naming both lines. PyYAML keeps the last value
  silently, so a tenant's `limits: {daily_tokens: 1000, daily_tokens: 100000000000}` would
  grant the second budget with nothing said; which one was meant only the author knows. Merge
  keys (`<<: *base`) still override as YAML says they do.
* Aliases may not expand a document past `MAX_ALIAS_NODES` nodes more than it holds: a
  "billion laughs" file (nine aliases of nine aliases of ...) is refused before anything walks
  its billions of shared nodes.
* A document nested past Python's recursion limit, or a tab where YAML wants spaces, gets a
  sentence instead of a traceback or a bare scanner message.
"""

from __future__ import annotations

from typing import Any

import yaml

from inhouse.errors import SpecError

# Nodes that aliases may add to a document beyond those written in it (an anchor reused for
# every pool's knobs adds tens).
MAX_ALIAS_NODES = 100_000
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _SpecLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=False)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # unhashable: the base constructor words that error
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {first.start_mark.line + 1}); YAML "
                    "would silently keep only the last value: keep the one you mean",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _count_nodes(root: yaml.Node) -> tuple[int, int] | None:
    """(distinct nodes, nodes once aliases are expanded), without expanding anything; None
    when an alias refers to a node that contains it (no finite expansion)."""
    expanded: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        if children_done:
            open_nodes.discard(id(node))
            expanded[id(node)] = 1 + sum(expanded[id(child)] for child in children)
            continue
        if id(node) in expanded:
            continue
        if id(node) in open_nodes:
            return None
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in expanded)
    return len(expanded), expanded[id(root)]


def load_yaml(text: str, source: str) -> Any:
    """One YAML document of `text` as Python data; `source` (the file) names it in errors."""
    loader = _SpecLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        counts = _count_nodes(node)
        if counts is None:
            raise SpecError(
                f"{source}: an alias (*name) refers to a node that contains it; a spec has "
                "no cycles: write the value out"
            )
        distinct, expanded = counts
        if expanded - distinct > MAX_ALIAS_NODES:
            raise SpecError(
                f"{source}: its aliases (*name) expand it to {expanded:,} nodes from "
                f"{distinct:,} written; refused (a 'billion laughs' file?): write the values "
                "out, or reuse an anchor less"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        hint = ""
        if "'\\t'" in str(exc):
            hint = "\n  fix: indent with spaces; YAML does not allow tabs there"
        raise SpecError(f"{source}: not valid YAML: {exc}{hint}") from None
    except RecursionError:
        raise SpecError(
            f"{source}: nested too deeply to read (thousands of [ or {{ levels); a spec file "
            "is a few levels of mappings and lists"
        ) from None
    finally:
        loader.dispose()
