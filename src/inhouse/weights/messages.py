"""Words for verification results: one place, written for the person paged at 3 a.m.

Each failure says what is wrong (the first problem, then a count of the rest), which file, and
what to do next; the core returns `Problem`s and never words them itself.
"""

from __future__ import annotations

from dataclasses import replace

from inhouse.weights.verdict import FILE_KINDS, Problem, Verification

MAX_LISTED = 5
# What repairs a registry's copy: a revision cannot be pushed over, a new one can, and its push
# uploads again any file the bucket lacks or altered (files are shared by content).
REPUSH = (
    "ask the release owner to push the signed original again, as a new revision (a push "
    "uploads again what the bucket lacks or altered, for every revision that shares it)"
)


def short(digest: str | None) -> str:
    return f"{digest[:12]}…" if digest else "?"


def shown(path: str) -> str:
    """A file name as printed: escaped (Python's quoting) when it holds a newline, a tab, a
    bidirectional override or another unprintable character, which would otherwise write lines
    of the message or disguise the name; as is otherwise."""
    return path if path.isprintable() else repr(path)


def describe_problem(problem: Problem) -> str:
    problem = replace(problem, path=shown(problem.path))
    if problem.kind == "altered":
        return (
            f"altered: {problem.path} (its digest is {short(problem.found)}, the signature says "
            f"{short(problem.expected)})"
        )
    if problem.kind == "missing":
        return f"missing: {problem.path} (signed, but not in the directory)"
    if problem.kind == "extra":
        return f"extra: {problem.path} (in the directory, but the signature does not cover it)"
    if problem.kind == "signature":
        return f"bad signature: {problem.path}: {problem.detail}"
    if problem.kind == "expired":
        return f"certificate out of its validity: {problem.path}: {problem.detail}"
    return f"unreadable: {problem.path}: {problem.detail}"


def advice(verification: Verification) -> list[str]:
    first = verification.first
    assert first is not None, "advice is for failures"
    if first.kind == "signature":
        return [
            f"Check that {verification.trust} is the release key (or CA) that signed this model",
            "(in Kubernetes: the model-signing-public-key ConfigMap). A wrong or rotated key",
            "fails every model; if the key is right, the signature file was altered or",
            "truncated: fetch it again from the registry.",
        ]
    if first.kind == "expired":
        return [
            "The signature is otherwise good. An expired signing certificate (or CA) is refused",
            "because nothing tells when it signed: have the release owner sign the model again",
            "with a current certificate and push it as a new revision; or, knowing why, verify",
            "with --allow-expired-certificate (stack: weights.allow_expired_certificate: true).",
        ]
    if first.kind == "unreadable":
        return [
            "Fix the directory (path, permissions; symlinks and special files are refused) and",
            "verify again.",
        ]
    return [
        "Do not serve this copy. If it came from the registry, `inhouse weights pull NAME@REV",
        "--verify-cached` moves the bad copy aside and fetches a fresh one; if the fresh one is",
        f"refused too, the registry's copy was altered: {REPUSH}.",
        "If you changed these files on purpose, sign them again (`inhouse weights sign`).",
    ]


def registry_advice(verification: Verification) -> list[str]:
    """What to do when a pull refused the registry's copy: its files disagree with the
    signature (nothing is cached yet, so `--verify-cached` has nothing to set aside); a
    signature or certificate problem is advised as anywhere else."""
    first = verification.first
    assert first is not None, "advice is for failures"
    if first.kind not in FILE_KINDS:
        return advice(verification)
    return [
        "Nothing was installed: the registry's copy does not match its signature. Pull again:",
        "refused files are fetched afresh (a transfer can corrupt them). Refused again, the",
        f"registry's copy was altered: do not serve it; {REPUSH}.",
    ]


def describe_failure(verification: Verification, advised: list[str] | None = None) -> str:
    """A multi-line message: what was checked, the problems (up to MAX_LISTED), what to do
    (`advised`, else `advice`'s)."""
    problems = verification.problems
    lines = [
        f"{verification.model_dir} does not match its signature {verification.signature} "
        f"({len(problems)} problem(s)):",
    ]
    lines += [f"  {describe_problem(p)}" for p in problems[:MAX_LISTED]]
    if len(problems) > MAX_LISTED:
        lines.append(f"  … and {len(problems) - MAX_LISTED} more")
    lines += advice(verification) if advised is None else advised
    return "\n".join(lines)


def describe_success(verification: Verification) -> str:
    gib = verification.num_bytes / 2**30
    return (
        f"verified {verification.model_dir}: {verification.num_files} file(s), {gib:.2f} GiB, "
        f"signature {verification.signature} by {verification.trust}"
    )


def describe_replaced_revision(
    revision: str, registry: str, served: str, expected: str, holder: str, link: object
) -> str:
    """A registry that serves other content under a revision than the pinned digest, or than
    this node already pulled (`holder` says which)."""
    lines = [
        f"refusing {revision}: {registry} serves it as {short(served)}, but {holder} as",
        f"{expected}. Revisions are immutable: the registry was altered or rolled back",
        "(another revision's or another model's signed files served under this revision's",
        "name; their signature checks out, so only this tells). Do not serve it; tell the",
        "release owner. If the revision really was replaced on purpose, update the pinned",
        f"digest, remove {link} on each node (with its .sig and .json) and pull again.",
    ]
    return "\n".join(lines)
