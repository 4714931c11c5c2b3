"""Engine pods of a pool whose weights come from the registry: pulled and verified into the
node's NVMe cache by an init container (public key from the ConfigMap, S3 credentials from
the Secret), loaded read-only from the verified path, and still schema-valid."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from tests.render.test_k8s import KUBERNETES_VERSION, containers, documents, find

from inhouse.errors import SpecError
from inhouse.render import render_stack
from inhouse.render.options import RenderOptions
from inhouse.spec.stack import StackSpec, parse_stack

ROOT = Path(__file__).resolve().parents[2]
WEIGHTS = {"registry": "s3://models/prod", "name": "meta-llama/Llama-3.3-70B-Instruct",
           "revision": "2024-12-06", "public_key": "keys/release.pub"}  # fmt: skip


def crm_with(weights: dict[str, Any] | None) -> StackSpec:
    data = yaml.safe_load((ROOT / "examples" / "crm-copilot" / "stack.yaml").read_text())
    data = copy.deepcopy(data)
    if weights is not None:
        data["pools"][0]["weights"] = weights
    return parse_stack(data)


def test_the_pod_pulls_verifies_and_loads_the_verified_path() -> None:
    rendered = render_stack(crm_with(WEIGHTS))
    deployment = find(rendered, "StatefulSet", "chat")
    parts = containers(deployment)
    pull = parts["pull-weights"]
    assert pull["command"] == ["inhouse", "weights", "pull"]
    assert pull["args"] == [
        "meta-llama/Llama-3.3-70B-Instruct@2024-12-06", "--registry", "s3://models/prod",
        "--cache", "/models/registry", "--public-key", "/etc/model-signing/key.pub",
        "--verify-cached", "--no-progress",
    ]  # fmt: skip
    assert pull["envFrom"] == [{"secretRef": {"name": "weights-registry"}}]
    mounts = {m["name"]: m for m in pull["volumeMounts"]}
    assert "readOnly" not in mounts["models"]  # the one writer of the cache
    assert mounts["signing-key"]["readOnly"] is True
    assert "verify-model" not in parts  # pull --verify-cached verified it
    assert [n for n in parts if n.startswith("verify-lora-")]  # adapters as before
    names = list(parts)
    assert names.index("pull-weights") < names.index("vllm")
    vllm = parts["vllm"]
    path = "/models/registry/by-name/meta-llama/Llama-3.3-70B-Instruct/2024-12-06"
    assert vllm["args"][0] == path
    assert {m["name"]: m for m in vllm["volumeMounts"]}["models"]["readOnly"] is True
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["signing-key"]["configMap"]["name"] == "model-signing-public-key"


def test_manifests_stay_schema_valid() -> None:
    for _, doc in documents(render_stack(crm_with(WEIGHTS))):
        if doc["apiVersion"] in ("apps/v1", "v1", "policy/v1", "networking.k8s.io/v1"):
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_a_certificate_chain_and_another_secret() -> None:
    weights = {**WEIGHTS, "public_key": None, "certificate_chain": ["pki/ca.pem"]}
    rendered = render_stack(crm_with(weights), RenderOptions(weights_secret="minio-reader"))
    pull = containers(find(rendered, "StatefulSet", "chat"))["pull-weights"]
    assert "--certificate-chain" in pull["args"] and "/etc/model-signing/ca.pem" in pull["args"]
    assert pull["envFrom"] == [{"secretRef": {"name": "minio-reader"}}]


def test_an_unpinned_revision_is_refused_with_the_fix() -> None:
    stack = crm_with({**WEIGHTS, "revision": None})
    with pytest.raises(SpecError, match=r"weights.revision is required .* pin"):
        render_stack(stack)


def test_a_pool_without_registry_weights_keeps_the_model_signing_check() -> None:
    parts = containers(find(render_stack(crm_with(None)), "StatefulSet", "chat"))
    assert "pull-weights" not in parts and parts["verify-model"]["command"] == ["model_signing"]


def test_a_pinned_digest_reaches_the_pull() -> None:
    digest = "sha256:" + "ab" * 32
    rendered = render_stack(crm_with({**WEIGHTS, "digest": digest}))
    pull = containers(find(rendered, "StatefulSet", "chat"))["pull-weights"]
    assert pull["args"][-2:] == ["--digest", digest]


def test_with_a_pinned_digest_vllm_loads_the_content_address() -> None:
    """The by-name link in the node's hostPath can be re-pointed between the init container's
    check and vLLM's load (by hand, by another pod's pull once it was removed); the
    content-addressed directory the pull verified cannot name other bytes."""
    digest = "sha256:" + "ab" * 32
    parts = containers(find(render_stack(crm_with({**WEIGHTS, "digest": digest})),
                            "StatefulSet", "chat"))  # fmt: skip
    assert parts["vllm"]["args"][0] == "/models/registry/sha256/" + "ab" * 32
    assert parts["pull-weights"]["args"][0] == "meta-llama/Llama-3.3-70B-Instruct@2024-12-06"


def test_allowing_expired_certificates_reaches_the_pull() -> None:
    weights = {**WEIGHTS, "public_key": None, "certificate_chain": ["pki/ca.pem"]}
    plain = containers(find(render_stack(crm_with(weights)), "StatefulSet", "chat"))
    assert "--allow-expired-certificate" not in plain["pull-weights"]["args"]
    allowing = crm_with({**weights, "allow_expired_certificate": True})
    pull = containers(find(render_stack(allowing), "StatefulSet", "chat"))["pull-weights"]
    assert "--allow-expired-certificate" in pull["args"]
    with pytest.raises(SpecError, match="allow_expired_certificate"):
        crm_with({**WEIGHTS, "allow_expired_certificate": True})  # a bare key has no expiry
