"""Turn pydantic validation errors into messages that name the field and the fix."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(
    exc: ValidationError, source: str, docs: str = "docs/stack.md"
) -> str:
    """One line per problem: where, what, and (for a misspelled field) the page that lists the
    fields of this kind of file."""
    lines = [f"{source}: {exc.error_count()} problem(s)"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = f"unknown field; remove it or check its spelling against {docs}"
        elif error["type"] == "missing":
            message = "required field is missing"
        ctx = error.get("ctx") or {}
        if "expected" in ctx:
            message += f" (allowed: {ctx['expected']})"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)
