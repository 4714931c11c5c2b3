"""Signed model weights: keys, signatures, the S3 registry and the node's verified cache.

    inhouse weights keygen --out keys/
    inhouse weights sign MODEL_DIR --key keys/key.priv            # writes MODEL_DIR.sig
    inhouse weights verify MODEL_DIR --public-key keys/key.pub
    inhouse weights push MODEL_DIR --registry s3://models/prod --name org/model --revision v1
    inhouse weights pull org/model@v1 --registry s3://models/prod --cache /mnt/nvme/registry \\
        --public-key keys/key.pub
    inhouse weights ls --registry s3://models/prod

A verification failure names the first altered, missing or extra file and exits 1. S3
endpoint and credentials: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY.
See docs/weights.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

COMMAND = "weights"
HELP = "sign, verify, push and pull model weights (OpenSSF model-signing, an S3 registry)"


def _positive(kind: type[int] | type[float]) -> Any:
    """An argparse type: a number above zero, else a usage error naming the option."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} must be above 0")
        return value

    return parse


def _digest(text: str) -> str:
    """An argparse type: a content digest as push prints it, else a usage error."""
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not sha256:<64 lowercase hex digits>, as `inhouse weights push` "
            "printed it (the registry's own listing is not to be trusted for it)"
        )
    return text


def _model_spec(text: str) -> tuple[str, str | None]:
    """An argparse type: NAME or NAME@REV, both valid, else a usage error. An empty revision
    (`NAME@$REV` with $REV unset) is refused, not taken as the newest."""
    from inhouse.errors import SpecError
    from inhouse.spec.weights import check_model_name, check_revision

    name, at, revision = text.partition("@")
    if not name or (at and not revision):
        missing = "model name" if not name else "revision after '@'"
        raise argparse.ArgumentTypeError(
            f"{text!r} has no {missing}: give NAME@REV (e.g. acme/tiny@v1), or NAME alone for "
            "the newest revision"
        )
    try:
        return check_model_name(name), check_revision(revision) if at else None
    except SpecError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME@REV: {exc}") from None


def _trust_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--public-key", type=Path, help="PEM public key of the release key")
    parser.add_argument(
        "--certificate-chain",
        type=Path,
        nargs="+",
        default=(),
        metavar="CA",
        help="PEM CA certificates, instead of --public-key",
    )
    parser.add_argument(
        "--allow-expired-certificate",
        action="store_true",
        help="accept a certificate past its expiry (default: refuse it)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    keygen = sub.add_parser("keygen", help="write a signing key pair (and optionally a CA)")
    keygen.add_argument("--out", type=Path, required=True, help="directory for the keys")
    keygen.add_argument(
        "--certificate",
        action="store_true",
        help="also a self-signed CA and a code-signing certificate",
    )
    keygen.add_argument("--subject", default="inhouse release", help="certificate common name")

    sign = sub.add_parser("sign", help="sign a model or LoRA adapter directory")
    sign.add_argument("model_dir", type=Path)
    sign.add_argument("--key", type=Path, required=True, help="PEM private key")
    sign.add_argument("--signature", type=Path, help="default: MODEL_DIR.sig")
    sign.add_argument("--certificate", type=Path, help="sign as this certificate (PKI)")
    sign.add_argument("--chain", type=Path, nargs="+", default=(), help="its issuing CAs")
    sign.add_argument("--hash", default="sha256", choices=("sha256", "blake2", "blake3"))

    verify = sub.add_parser("verify", help="check a directory against its signature")
    verify.add_argument("model_dir", type=Path)
    verify.add_argument("--signature", type=Path, help="default: MODEL_DIR.sig")
    _trust_arguments(verify)
    verify.add_argument("--json", action="store_true", help="print the result as JSON")

    push = sub.add_parser("push", help="upload a signed model to the registry")
    push.add_argument("model_dir", type=Path)
    push.add_argument("--registry", required=True, help="s3://BUCKET/PREFIX")
    push.add_argument("--name", required=True, help="model name, e.g. org/model")
    push.add_argument("--revision", required=True, help="an immutable revision, e.g. v1")
    push.add_argument("--signature", type=Path, help="default: MODEL_DIR.sig")
    push.add_argument("--license", help="default: the model catalog's licence for NAME")

    pull = sub.add_parser("pull", help="download and verify a model into the weight cache")
    pull.add_argument(
        "model", metavar="NAME[@REV]", type=_model_spec, help="default revision: the newest"
    )
    pull.add_argument("--registry", required=True, help="s3://BUCKET/PREFIX")
    pull.add_argument(
        "--cache",
        type=Path,
        help="weight cache (default $INHOUSE_WEIGHTS_CACHE or ~/.cache/inhouse/weights)",
    )
    _trust_arguments(pull)
    pull.add_argument(
        "--verify-cached",
        action="store_true",
        help="re-hash a cached copy; move it aside and re-fetch if it fails",
    )
    pull.add_argument(
        "--digest",
        type=_digest,
        help="sha256:HEX that push printed: refuse any other content under NAME@REV",
    )
    pull.add_argument("--workers", type=_positive(int), default=8, help="parallel ranged GETs")
    pull.add_argument("--part-mib", type=_positive(int), default=16, help="part size in MiB")
    pull.add_argument(
        "--limit-rate", type=_positive(float), help="MB/s at most (spare the storage)"
    )
    pull.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when it is a terminal)",
    )
    pull.add_argument("--json", action="store_true", help="print the result as JSON")

    ls = sub.add_parser("ls", help="list the registry's models and revisions")
    ls.add_argument("--registry", required=True, help="s3://BUCKET/PREFIX")
    ls.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    handlers = {
        "keygen": _keygen,
        "sign": _sign,
        "verify": _verify,
        "push": _push,
        "pull": _pull,
        "ls": _ls,
    }
    from inhouse.weights.errors import VerificationFailed

    try:
        return handlers[args.action](args)
    except VerificationFailed as exc:
        print(f"inhouse weights {args.action}: REFUSED: {exc}", file=sys.stderr)
        return 1


def _trust(args: argparse.Namespace) -> Any:
    from inhouse.weights.trust import Trust

    return Trust.from_args(
        args.public_key, tuple(args.certificate_chain), args.allow_expired_certificate
    )


def _keygen(args: argparse.Namespace) -> int:
    from inhouse.weights.trust import keygen

    for path in keygen(args.out, args.certificate, args.subject):
        print(f"wrote {path}")
    print("Keep key.priv (and ca.priv) offline; distribute key.pub (or ca.pem) to verifiers.")
    return 0


def _sign(args: argparse.Namespace) -> int:
    from inhouse.weights.signature import sign_model

    signature = sign_model(
        args.model_dir, args.key, args.signature, args.certificate, tuple(args.chain), args.hash
    )
    print(f"signed {args.model_dir}: {signature}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from inhouse.weights.messages import describe_failure, describe_success
    from inhouse.weights.verify import verify_model

    result = verify_model(args.model_dir, _trust(args), args.signature)
    if args.json:
        print(json.dumps(verification_json(result), indent=2))
    elif result.ok:
        print(describe_success(result))
    if not result.ok and not args.json:
        print(f"inhouse weights verify: REFUSED: {describe_failure(result)}", file=sys.stderr)
    return 0 if result.ok else 1


def verification_json(result: Any) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "model_dir": str(result.model_dir),
        "signature": str(result.signature),
        "trust": result.trust,
        "num_files": result.num_files,
        "num_bytes": result.num_bytes,
        "problems": [
            {
                "kind": p.kind,
                "path": p.path,
                "detail": p.detail,
                "expected": p.expected,
                "found": p.found,
            }
            for p in result.problems
        ],
    }


def _push(args: argparse.Namespace) -> int:
    from inhouse.weights.registry import push_model
    from inhouse.weights.s3 import RegistryUrl, make_client

    registry = RegistryUrl.parse(args.registry)
    result = push_model(
        make_client(),
        args.model_dir,
        registry,
        args.name,
        args.revision,
        args.signature,
        args.license,
    )
    manifest = result.manifest
    for path in result.repaired:
        print(
            f"warning: the registry's copy of {path!r} was not its SHA-256 (altered or "
            "corrupted in the bucket); uploaded it again, which repairs every revision that "
            "shares it",
            file=sys.stderr,
        )
    print(
        f"pushed {manifest.name}@{manifest.revision} ({manifest.digest}) to {registry}: "
        f"{len(manifest.files)} files, {result.uploaded_bytes / 1e6:.1f} MB uploaded, "
        f"{result.reused_bytes / 1e6:.1f} MB already there; licence: {manifest.license}"
    )
    return 0


def _pull(args: argparse.Namespace) -> int:
    from inhouse.weights.cache import default_cache
    from inhouse.weights.progress import PullProgress
    from inhouse.weights.pull import PullRequest, pull_model
    from inhouse.weights.s3 import RegistryUrl

    name, revision = args.model
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = PullProgress() if show else None
    request = PullRequest(
        RegistryUrl.parse(args.registry),
        name,
        revision,
        args.cache or default_cache(),
        _trust(args),
        args.verify_cached,
        args.workers,
        args.part_mib * 2**20,
        args.limit_rate * 1e6 if args.limit_rate else None,
        on_start=progress.start if progress else lambda total, have: None,
        on_bytes=progress.add if progress else lambda n: None,
        digest=args.digest,
    )
    try:
        result = pull_model(request)
    except KeyboardInterrupt:
        print(
            "\ninhouse weights pull: interrupted; the finished parts are kept: run the same "
            "command again to resume",
            file=sys.stderr,
        )
        return 130
    finally:
        if progress is not None:
            progress.finish()
    if args.json:
        print(json.dumps(pull_json(result), indent=2))
        return 0
    if result.quarantined is not None:
        print(
            f"warning: the cached copy failed verification; moved to {result.quarantined}",
            file=sys.stderr,
        )
    if result.was_cached:
        checked = "re-verified" if result.verification else "not re-hashed"
        print(f"cached {result.name}@{result.revision} ({result.digest}, {checked}): {result.path}")
    else:
        print(
            f"pulled {result.name}@{result.revision} ({result.digest}) to {result.path}: "
            f"{result.fetched_bytes / 1e6:.1f} MB fetched, {result.resumed_bytes / 1e6:.1f} MB "
            f"resumed, signature verified"
        )
    return 0


def pull_json(result: Any) -> dict[str, Any]:
    return {
        "name": result.name,
        "revision": result.revision,
        "digest": result.digest,
        "path": str(result.path),
        "signature": str(result.signature),
        "total_bytes": result.total_bytes,
        "fetched_bytes": result.fetched_bytes,
        "resumed_bytes": result.resumed_bytes,
        "was_cached": result.was_cached,
        "verified": result.verification is not None and result.verification.ok,
        "quarantined": str(result.quarantined) if result.quarantined else None,
    }


def _ls(args: argparse.Namespace) -> int:
    from inhouse.weights.messages import shown
    from inhouse.weights.registry import read_manifests
    from inhouse.weights.s3 import RegistryUrl, make_client

    registry = RegistryUrl.parse(args.registry)
    manifests = read_manifests(make_client(), registry)
    if args.json:
        print(json.dumps([m.model_dump(mode="json") for m in manifests], indent=2))
        return 0
    if not manifests:
        print(f"no models in {registry}")
        return 0
    print(f"{'NAME@REVISION':48} {'SIZE':>10} {'FILES':>5}  {'PUSHED':20}  LICENCE")
    for m in sorted(manifests, key=lambda m: (m.name, m.pushed_at)):
        size = f"{m.total_bytes / 1e9:.2f} GB"
        # NOTE: the push time and licence are the registry's words, unsigned: escaped, so a
        # newline or an escape sequence cannot write rows or reach the terminal.
        pushed_at = shown(m.pushed_at)
        line = f"{m.name + '@' + m.revision:48} {size:>10} {len(m.files):5}  {pushed_at:20}"
        print(f"{line}  {shown(m.license)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m inhouse.cli.weights ...` (how the engine's init container may call it)."""
    from inhouse.errors import InhouseError

    parser = argparse.ArgumentParser(prog="inhouse weights", description=__doc__)
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except InhouseError as exc:
        print(f"inhouse weights: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
