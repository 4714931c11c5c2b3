"""Errors a user can act on. Each message says what was wrong and how to fix it."""

from __future__ import annotations


class InhouseError(Exception):
    """Base of every error meant for the user, not for a traceback."""


class SpecError(InhouseError, ValueError):
    """A spec, catalog name or flag value is wrong. The message names the field and the fix."""


class DoesNotFitError(InhouseError):
    """A configuration cannot fit in GPU memory. The message names what and by how much."""
