"""What a verification found, as plain values: the core returns them, `messages` words them.

A `Verification` is the outcome of checking one model directory against one signature. It is
`ok` when the signature verified with the trusted key and every file matched; otherwise its
`problems` say what differed, file by file, sorted by path so that `first` is stable:

* `altered`  a signed file whose digest changed (`expected` and `found` hold the two digests)
* `missing`  a signed file that is not in the directory
* `extra`    a file in the directory the signature does not cover
* `signature` the signature file is missing, unreadable, or does not verify with the trusted key
  or certificate chain (`path` is the signature's path)
* `expired`  the signature verifies, but a certificate of its chain is outside its validity
  now (expired, and not allowed to be; or not valid yet)
* `unreadable` the model directory is missing, unreadable, or holds a symlink or special file
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ProblemKind = Literal["altered", "missing", "extra", "signature", "expired", "unreadable"]
FILE_KINDS: tuple[ProblemKind, ...] = ("altered", "missing", "extra")


@dataclass(frozen=True, slots=True)
class Problem:
    kind: ProblemKind
    path: str  # relative to the model directory for file kinds; the signature or model path else
    detail: str = ""
    expected: str | None = None  # the signed digest (altered)
    found: str | None = None  # the digest on disk (altered)


@dataclass(frozen=True, slots=True)
class Verification:
    model_dir: Path
    signature: Path
    trust: str  # the key or chain it was checked against, as given
    problems: tuple[Problem, ...] = ()
    num_files: int = 0  # files the signature covers
    num_bytes: int = 0  # their total size on disk (0 when not hashed)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first(self) -> Problem | None:
        return self.problems[0] if self.problems else None

    @property
    def file_problems(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.kind in FILE_KINDS)


def sorted_problems(problems: list[Problem]) -> tuple[Problem, ...]:
    """Signature and directory problems first (nothing else can be trusted), then files by
    path."""
    order = {"signature": 0, "expired": 0, "unreadable": 1}
    return tuple(sorted(problems, key=lambda p: (order.get(p.kind, 2), p.path, p.kind)))
