"""Init containers of an engine pod: its weights pulled and verified, its GPUs checked.

* `pull-weights` (a pool whose `weights` come from the registry): `inhouse weights pull
  NAME@REV --verify-cached` into the node's NVMe cache, S3 credentials from a Secret, the
  public key from a ConfigMap; the engine then loads the verified path read-only.
* `verify-model` (any other pool) and `verify-lora-<i>` (each LoRA adapter): OpenSSF's own
  `model_signing verify` on the directory already on the node, with `DIR.sig` beside it.
* `check-gpu-topology` (TP > 1): refuses GPUs that are not NVLink-joined.
"""

from __future__ import annotations

from typing import Any

from inhouse.render import layout
from inhouse.render.options import RenderOptions
from inhouse.spec.stack import PoolSpec

# Fails, naming the pair, when two GPUs the pod was given are not joined by NVLink. Inside the
# container nvidia-smi numbers the pod's GPUs from 0; `NV#` is an NVLink connection.
TOPOLOGY_CHECK = r"""set -eu
nvidia-smi topo -m | sed 's/\x1b\[[0-9;]*m//g' | tee /dev/stderr | awk '
  !n && $1 == "GPU0" && $2 ~ /^GPU/ { for (i = 1; i <= NF; i++) if ($i ~ /^GPU[0-9]+$/) n++; next }
  n && $1 ~ /^GPU[0-9]+$/ {
    for (j = substr($1, 4) + 1; j < n; j++)
      if ($(j + 2) !~ /^NV[0-9]+$/) {
        printf "%s-GPU%d joined by %s, not NVLink\n", $1, j, $(j + 2); bad = 1
      }
  }
  END { if (!n) { print "no GPU matrix in nvidia-smi topo -m"; exit 1 } exit bad }'
"""


SIGNING_MOUNT = "/etc/model-signing"
SIGNING_RESOURCES = {
    "requests": {"cpu": "2", "memory": "2Gi"},
    "limits": {"cpu": "4", "memory": "4Gi"},
}


def init_containers(pool: PoolSpec, options: RenderOptions) -> list[dict[str, Any]]:
    artifacts = [(f"verify-lora-{i}", layout.lora_dir(name))
                 for i, name in enumerate(pool.lora_adapters)]  # fmt: skip
    if pool.weights is not None and pool.weights.registry is not None:
        containers = [pull_weights_container(pool, options)]
    else:
        containers = []
        artifacts.insert(0, ("verify-model", layout.model_dir(pool)))
    containers += [verify_container(name, path, options) for name, path in artifacts]
    if pool.tp > 1:
        # Init containers' devices are handed on to the app container: this sees the same GPUs.
        gpus = {"nvidia.com/gpu": pool.tp}
        containers.append(
            {
                "name": "check-gpu-topology",
                "image": options.image(options.vllm_image),
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", TOPOLOGY_CHECK],
                "resources": {"requests": gpus, "limits": gpus},
                "securityContext": {"allowPrivilegeEscalation": False},
            }
        )
    return containers


def verify_container(name: str, path: str, options: RenderOptions) -> dict[str, Any]:
    """OpenSSF's own `model_signing` CLI on a directory already on the node (`PATH.sig`
    beside it). Exit 1 ("Verification failed ...") on a changed, missing or extra file or a
    wrong key: the engine never starts on weights nobody signed."""
    return {
        "name": name,
        "image": options.image(options.signing_image),
        "imagePullPolicy": "IfNotPresent",
        "command": ["model_signing"],
        "args": [
            "verify",
            "key",
            path,
            "--signature",
            f"{path}.sig",
            "--public_key",
            f"{SIGNING_MOUNT}/key.pub",
        ],
        "resources": SIGNING_RESOURCES,
        "volumeMounts": [
            {"name": "models", "mountPath": layout.MODELS_MOUNT, "readOnly": True},
            {"name": "signing-key", "mountPath": SIGNING_MOUNT, "readOnly": True},
        ],
        "securityContext": {"allowPrivilegeEscalation": False},
    }


def pull_weights_container(pool: PoolSpec, options: RenderOptions) -> dict[str, Any]:
    """`inhouse weights pull` into the node's NVMe cache: fetched once per node (pods on one
    node take turns on a lock, the later ones find it cached), the cached copy re-hashed at
    every pod start (`--verify-cached`; a copy that fails is moved aside and fetched again),
    the signature checked with the key from the ConfigMap. Exit 1, naming the file, when the
    registry's copy was altered: the pod never starts. S3 endpoint and credentials come from
    the Secret; this is the only container that writes to the cache."""
    weights = pool.weights
    assert weights is not None and weights.registry is not None, "a registry pool"
    trust = ["--public-key", f"{SIGNING_MOUNT}/key.pub"]
    if weights.certificate_chain:
        trust = ["--certificate-chain", f"{SIGNING_MOUNT}/ca.pem"]
        if weights.allow_expired_certificate:
            trust.append("--allow-expired-certificate")
    layout.model_dir(pool)  # raises when the revision is not pinned
    revision = weights.revision
    return {
        "name": "pull-weights",
        "image": options.image(options.gateway_image),
        "imagePullPolicy": "IfNotPresent",
        "command": ["inhouse", "weights", "pull"],
        "args": [
            f"{weights.name}@{revision}",
            "--registry",
            weights.registry,
            "--cache",
            layout.REGISTRY_CACHE,
            *trust,
            "--verify-cached",
            "--no-progress",
            *(["--digest", weights.digest] if weights.digest else []),
        ],
        "envFrom": [{"secretRef": {"name": options.weights_secret}}],
        "resources": SIGNING_RESOURCES,
        "volumeMounts": [
            {"name": "models", "mountPath": layout.MODELS_MOUNT},
            {"name": "signing-key", "mountPath": SIGNING_MOUNT, "readOnly": True},
        ],
        "securityContext": {"allowPrivilegeEscalation": False},
    }
