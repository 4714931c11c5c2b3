from __future__ import annotations

from inhouse.bench.redact import REDACTED, redact_argv, redact_text


def test_every_form_of_a_key_on_a_command_line_is_redacted() -> None:
    argv = ["inhouse", "bench", "--api-key", "k1", "--api-key=k2", "--target",
            "http://user:pw@host:8000", "--label", "Bearer k3"]  # fmt: skip
    assert redact_argv(argv) == [
        "inhouse", "bench", "--api-key", REDACTED, f"--api-key={REDACTED}", "--target",
        f"http://user:{REDACTED}@host:8000", "--label", f"Bearer {REDACTED}",
    ]  # fmt: skip


def test_a_known_secret_is_redacted_wherever_it_appears() -> None:
    assert redact_text("error: key sk-abc refused", ["sk-abc", None]) == (
        f"error: key {REDACTED} refused"
    )
