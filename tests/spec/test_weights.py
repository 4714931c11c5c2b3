"""A pool's `weights:` in the stack file: exactly one source and one trust, safe names, only
on engines inhouse starts, errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from inhouse.errors import SpecError
from inhouse.spec.stack import dump_stack, parse_stack
from inhouse.spec.weights import by_name_path, check_model_name, check_revision

REGISTRY = {"registry": "s3://models/prod", "name": "org/m", "public_key": "k.pub"}


def stack_with(weights: dict[str, Any], engine: str = "simulated") -> Any:
    pool = {"name": "p", "model": "meta-llama/Llama-3.1-8B-Instruct", "engine": engine,
            "weights": weights}  # fmt: skip
    if engine == "url":
        pool["urls"] = ["http://h:1"]
    return parse_stack({"name": "s", "pools": [pool]})


def test_registry_and_local_weights_parse_and_round_trip() -> None:
    stack = stack_with({**REGISTRY, "revision": "v1"})
    weights = stack.pools[0].weights
    assert weights is not None and (weights.name, weights.revision) == ("org/m", "v1")
    assert parse_stack(yaml.safe_load(dump_stack(stack))) == stack
    local = stack_with({"weights_dir": "m", "certificate_chain": ["ca.pem"]}).pools[0].weights
    assert local is not None and local.certificate_chain == ("ca.pem",)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"public_key": "k"}, "either `registry`"),
        ({**REGISTRY, "weights_dir": "m"}, "not both"),
        ({"registry": "s3://b", "public_key": "k"}, "needs `name`"),
        ({**REGISTRY, "registry": "http://b"}, "s3://BUCKET/PREFIX"),
        ({"registry": "s3://b", "name": "m"}, "exactly one"),
        ({**REGISTRY, "certificate_chain": ["ca"]}, "exactly one"),
        ({**REGISTRY, "name": "../x"}, "not valid"),
        ({**REGISTRY, "revision": "a/b"}, "not valid"),
        ({"weights_dir": "m", "public_key": "k", "revision": "v1"}, "belong with `registry`"),
        ({**REGISTRY, "signature": "s"}, "local weights_dir"),
        ({**REGISTRY, "key": "k"}, "unknown field"),
    ],
)
def test_bad_weights_name_the_field(weights: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=r"pools\.0\.weights") as raised:
        stack_with(weights)
    assert message in str(raised.value)


def test_attached_engines_cannot_have_weights() -> None:
    with pytest.raises(SpecError, match="needs an engine inhouse starts"):
        stack_with(REGISTRY, engine="url")


def test_names_stay_inside_a_cache_or_a_prefix() -> None:
    assert by_name_path("meta-llama/Llama-3.1-8B", "2024-07-23") == (
        "by-name/meta-llama/Llama-3.1-8B/2024-07-23"
    )
    for bad in ("", "/abs", "a//b", "a/../b", "..", "a/.", ".hidden", "a b", "a\\b"):
        with pytest.raises(SpecError):
            check_model_name(bad)
    for bad in ("", "files", "a/b", "..", "-x"):
        with pytest.raises(SpecError):
            check_revision(bad)


def test_a_registry_pool_may_pin_its_content_digest() -> None:
    digest = "sha256:" + "ab" * 32
    weights = stack_with({**REGISTRY, "revision": "v1", "digest": digest}).pools[0].weights
    assert weights is not None and weights.digest == digest


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({**REGISTRY, "digest": "ab" * 32}, "sha256:<64 hex digits>"),
        ({**REGISTRY, "digest": "sha256:" + "AB" * 32}, "sha256:<64 hex digits>"),
        ({"weights_dir": "m", "public_key": "k", "digest": "sha256:" + "ab" * 32},
         "belong with `registry`"),
    ],
)  # fmt: skip
def test_a_bad_digest_pin_names_the_field(weights: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=r"pools\.0\.weights") as raised:
        stack_with(weights)
    assert message in str(raised.value)


def test_no_name_or_revision_is_another_revisions_signature_or_manifest() -> None:
    # A node's cache keeps a revision's signature and manifest beside its link, as REV.sig and
    # REV.json: pulling acme/tiny@v1 after acme/tiny@v1.sig wrote v1's signature over
    # v1.sig's link, and acme/tiny/v1.json@r would be made inside v1's manifest's place.
    for bad in ("v1.sig", "v1.json", "2024-12-06.SIG"):
        with pytest.raises(SpecError, match=r"\.sig or \.json"):
            check_revision(bad)
    for bad in ("acme/tiny/v1.sig", "acme/tiny/v1.json", "acme.sig/tiny"):
        with pytest.raises(SpecError, match=r"\.sig or \.json"):
            check_model_name(bad)
    assert check_revision("v1.signed") == "v1.signed"
    assert check_model_name("acme/tiny.jsonl") == "acme/tiny.jsonl"
