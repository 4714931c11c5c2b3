"""The two errors of the weights commands; both are `InhouseError`s, so the CLI prints them."""

from __future__ import annotations

from inhouse.errors import InhouseError
from inhouse.weights.verdict import Verification


class WeightsError(InhouseError):
    """A weights command cannot go on: bad input, a registry or cache problem. The message says
    what was wrong and what to do."""


class VerificationFailed(InhouseError):
    """Weights did not match their signature. Carries the `Verification`, whose problems name
    the files; the message is `messages.describe_failure`'s."""

    def __init__(self, verification: Verification, message: str) -> None:
        super().__init__(message)
        self.verification = verification
