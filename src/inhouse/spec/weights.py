"""A pool's signed weights in the stack file, and the names a weight registry accepts.

A pool names its weights one of two ways:

    weights: {registry: s3://models/prod, name: meta-llama/Llama-3.1-8B-Instruct,
              revision: "2024-07-23", digest: "sha256:…", public_key: keys/release.pub}
    weights: {weights_dir: /srv/models/tiny, public_key: keys/release.pub}

`inhouse up` pulls (registry) and verifies both before it starts any replica of the pool;
`inhouse render` pulls and verifies in an init container. Relative paths are relative to the
stack file's directory. Model names are one or more path components (`org/model`), revisions
one; both of letters, digits, `.`, `_` and `-`, so a name can never climb out of a cache or a
bucket prefix.
"""

from __future__ import annotations

import posixpath
import re

from pydantic import Field, model_validator

from inhouse.errors import SpecError
from inhouse.spec.base import SpecModel

_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# Registry keys of one revision: <prefix>/<name>/<revision>/{manifest.json,model.sig,files/...}.
RESERVED_REVISIONS = ("files",)
# A revision's signature and manifest sit beside its link in a node's cache (REV.sig, REV.json):
# no name component or revision may end so, or it would take the place of another's.
SIDE_FILE_SUFFIXES = (".sig", ".json")
# Where pulled models live under a node's weight cache (`inhouse weights pull --cache`).
BY_NAME_DIR = "by-name"
BY_DIGEST_DIR = "sha256"


def check_model_name(name: str, what: str = "model name") -> str:
    """`name` if it is one or more safe path components (`org/model`), else a SpecError."""
    parts = name.split("/")
    if any(_side_file(p) for p in parts):
        raise SpecError(f"{what} {name!r} is not valid: {_SIDE_FILE_RULE}")
    if not name or any(not _COMPONENT.match(p) or p in (".", "..") for p in parts):
        raise SpecError(
            f"{what} {name!r} is not valid: use path components of letters, digits, '.', '_' "
            "and '-' separated by '/', each starting with a letter or digit "
            "(e.g. meta-llama/Llama-3.1-8B-Instruct)"
        )
    return name


def check_revision(revision: str) -> str:
    """`revision` if it is one safe path component and not reserved, else a SpecError."""
    if _side_file(revision):
        raise SpecError(f"revision {revision!r} is not valid: {_SIDE_FILE_RULE}")
    if not _COMPONENT.match(revision) or revision in RESERVED_REVISIONS:
        raise SpecError(
            f"revision {revision!r} is not valid: one component of letters, digits, '.', '_' "
            f"and '-', starting with a letter or digit, and not {' or '.join(RESERVED_REVISIONS)}"
            " (e.g. 2024-07-23 or v3)"
        )
    return revision


_SIDE_FILE_RULE = (
    "no name component or revision may end with .sig or .json, the names a node's weight cache "
    "gives a revision's signature and manifest beside it (REV.sig, REV.json)"
)


def _side_file(component: str) -> bool:
    return component.lower().endswith(SIDE_FILE_SUFFIXES)


def by_name_path(name: str, revision: str) -> str:
    """The model's directory relative to a weight cache: `by-name/<name>/<revision>`."""
    return posixpath.join(BY_NAME_DIR, check_model_name(name), check_revision(revision))


class WeightsSpec(SpecModel):
    """Where a pool's weights come from and the key that must have signed them."""

    registry: str | None = Field(default=None, description="s3://BUCKET[/PREFIX]")
    name: str | None = Field(default=None, description="model name in the registry")
    revision: str | None = Field(default=None, description="default: the newest pushed")
    digest: str | None = Field(
        default=None,
        description="sha256:<hex>, the content `weights push` printed; any other is refused",
    )
    weights_dir: str | None = Field(default=None, description="a local, signed model directory")
    signature: str | None = Field(default=None, description="default: <weights_dir>.sig")
    public_key: str | None = None
    certificate_chain: tuple[str, ...] = Field(
        default=(), description="PEM files of the CA chain, instead of public_key"
    )
    allow_expired_certificate: bool = Field(
        default=False,
        description="verify a certificate chain past its expiry (default: refuse it)",
    )

    @model_validator(mode="after")
    def _check(self) -> WeightsSpec:
        if (self.registry is None) == (self.weights_dir is None):
            raise ValueError(
                "give either `registry` (with `name`, optionally `revision`) or a local "
                "`weights_dir`, not both and not neither"
            )
        if self.registry is not None:
            if not self.registry.startswith("s3://") or len(self.registry) <= len("s3://"):
                raise ValueError(f"registry {self.registry!r} must look like s3://BUCKET/PREFIX")
            if self.name is None:
                raise ValueError("a registry needs `name`, the model's name in it")
            if self.signature is not None:
                raise ValueError("`signature` is for a local weights_dir; a registry has its own")
        elif self.name is not None or self.revision is not None or self.digest is not None:
            raise ValueError(
                "`name`, `revision` and `digest` belong with `registry`, not `weights_dir`"
            )
        if self.digest is not None and not _DIGEST.match(self.digest):
            raise ValueError(
                f"digest {self.digest!r} must be sha256:<64 hex digits>, lowercase, as "
                "`inhouse weights push` printed it"
            )
        if (self.public_key is None) == (not self.certificate_chain):
            raise ValueError(
                "give `public_key` (a PEM public key) or `certificate_chain` (PEM CA files), "
                "the trust that verifies the signature; exactly one"
            )
        if self.allow_expired_certificate and self.public_key is not None:
            raise ValueError(
                "`allow_expired_certificate` is for a `certificate_chain`; a bare `public_key` "
                "has no expiry: remove it"
            )
        try:
            if self.name is not None:
                check_model_name(self.name)
            if self.revision is not None:
                check_revision(self.revision)
        except SpecError as exc:
            raise ValueError(str(exc)) from exc
        return self
