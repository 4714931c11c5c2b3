"""Turn pydantic validation errors into messages that name the field and the fix."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(
    exc: ValidationError, source: str, docs: str = "docs/stack.md"
) -> str:
    """One line per problem: where, what, and (for a misspelled field) the page that lists the
    fields of this kind of file."""
    errors = exc.errors()
    # NOTE: a list whose only item failed also reports "should have at least 1 item" for the
    # list itself (`pools: Tuple should have at least 1 item` beside `pools.0.replicas`): noise
    # that reads as if the file had no pools. Keep the item's own problem.
    locs = [error["loc"] for error in errors]
    errors = [
        error
        for error in errors
        if not (
            error["type"] == "too_short"
            and any(
                len(loc) > len(error["loc"]) and loc[: len(error["loc"])] == error["loc"]
                for loc in locs
            )
        )
    ]
    lines = [f"{source}: {len(errors)} problem(s)"]
    for error in errors:
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = f"unknown field; remove it or check its spelling against {docs}"
        elif error["type"] == "missing":
            message = "required field is missing"
        elif error["type"] == "finite_number":
            message += " (.nan and .inf are not values here; write a number)"
        ctx = error.get("ctx") or {}
        # NOTE: pydantic's literal and enum messages already list them ("Input should be 'a'
        # or 'b'"); appended again, the line named every choice twice.
        if "expected" in ctx and str(ctx["expected"]) not in message:
            message += f" (allowed: {ctx['expected']})"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)
