"""A revision's registry manifest: what `push` uploaded and `pull` plans from.

    {"format": "inhouse-weights/1", "name": "org/model", "revision": "v1",
     "digest": "sha256:…", "license": "…", "pushed_at": "2025-01-01T00:00:00Z",
     "hash": "sha256", "signature": {"size": 1234, "sha256": "…"},
     "files": [{"path": "config.json", "size": 661, "sha256": "…"}, …]}

The manifest is not signed and is never trusted: pull checks the downloaded files against the
signature. It only says what to fetch. `digest` names the model's content in a cache: SHA-256
over the lines `"<sha256>  <path>\\n"` of every file sorted by path (what `sha256sum` prints,
in C-locale order), so the same bytes under any name or revision share one cached copy.
"""

from __future__ import annotations

import hashlib
import posixpath
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from inhouse.spec.weights import check_model_name, check_revision
from inhouse.weights.errors import WeightsError

FORMAT = "inhouse-weights/1"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileEntry(_Strict):
    path: str
    size: int = Field(ge=0)
    sha256: str

    @field_validator("path")
    @classmethod
    def _safe_path(cls, path: str) -> str:
        """A relative POSIX path that stays inside the model directory."""
        normal = posixpath.normpath(path)
        bad = (
            not path
            or path != normal
            or path.startswith("/")
            or normal.split("/")[0] == ".."
            or "\\" in path
            or "\x00" in path
        )
        if bad:
            raise ValueError(f"unsafe file path {path!r}: must be relative and stay inside")
        return path

    @field_validator("sha256")
    @classmethod
    def _hex(cls, digest: str) -> str:
        if not _HEX64.match(digest):
            raise ValueError("sha256 must be 64 lowercase hex digits")
        return digest


class SignatureEntry(_Strict):
    size: int = Field(ge=0)
    sha256: str


class RegistryManifest(_Strict):
    format: str = FORMAT
    name: str
    revision: str
    digest: str
    license: str = "unknown"
    pushed_at: str = ""
    hash: str = "sha256"
    signature: SignatureEntry
    files: tuple[FileEntry, ...] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return check_model_name(name)  # a SpecError is a ValueError: pydantic reports it

    @field_validator("revision")
    @classmethod
    def _revision(cls, revision: str) -> str:
        return check_revision(revision)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def model_digest(files: tuple[FileEntry, ...] | list[FileEntry]) -> str:
    lines = "".join(f"{f.sha256}  {f.path}\n" for f in sorted(files, key=lambda f: f.path))
    return "sha256:" + hashlib.sha256(lines.encode("utf-8")).hexdigest()


def parse_manifest(text: bytes | str, where: str) -> RegistryManifest:
    """Validate a manifest read from the registry; WeightsError naming the field."""
    try:
        manifest = RegistryManifest.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise WeightsError(
            f"{where}: not a valid weights manifest ({field}: {first['msg']}); the registry "
            "holds something inhouse did not push, or it was altered: push the signed original "
            "again, as a new revision"
        ) from exc
    if manifest.format != FORMAT:
        raise WeightsError(f"{where}: format {manifest.format!r} is not {FORMAT!r}")
    paths = sorted(f.path for f in manifest.files)
    if len(set(paths)) != len(paths):
        raise WeightsError(f"{where}: a file is listed twice; the manifest was altered")
    directories = {posixpath.dirname(p) for p in paths}
    clash = next(
        (p for p in paths if p in directories or any(d.startswith(p + "/") for d in directories)),
        None,
    )
    if clash is not None:
        raise WeightsError(f"{where}: {clash!r} is listed as a file and as a directory")
    if model_digest(manifest.files) != manifest.digest:
        raise WeightsError(
            f"{where}: its digest does not match its file list; the manifest was altered"
        )
    return manifest
