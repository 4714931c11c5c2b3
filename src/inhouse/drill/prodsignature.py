"""The bad-signature production drill: an altered copy of a pool's weights on the node, verified
as the engine pod's init container verifies them, beside the intact weights."""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath
from typing import Any

from inhouse.drill.prodshell import AgentLoad, Step, _apply_on_node, _k
from inhouse.render.layout import MODELS_MOUNT, REGISTRY_CACHE, model_dir
from inhouse.render.options import RenderOptions
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.weights import by_name_path

# Flips one byte of the drill's copy, never of a file outside it (argv[1]: the copy).
_FLIP_ONE_BYTE = "; ".join(
    [
        "import glob, os, sys",
        "d = sys.argv[1]",
        'p = sorted(glob.glob(os.path.join(glob.escape(d), "*.safetensors")))[0]',
        "real = os.path.realpath(d) + os.sep",
        "assert not os.path.islink(d) and os.path.realpath(p).startswith(real), p",
        'f = open(p, "r+b")',
        "f.seek(1 << 20)",
        "b = f.read(1)",
        "f.seek(1 << 20)",
        "f.write(bytes([b[0] ^ 1]))",
    ]
)


def drill_weights(pool: PoolSpec) -> tuple[str, str, str]:
    """The bad-signature drill's paths under the models mount: (the pool's weights on the node,
    their signature, the altered copy; its signature is the copy's path + `.sig`). A registry
    pool's weights are the cache's verified model (`registry/sha256/<hex>`, or the by-name link
    to it), its signature beside the by-name link; the copy goes outside the cache."""
    source = model_dir(pool).removeprefix(f"{MODELS_MOUNT}/")
    weights = pool.weights
    if weights is not None and weights.registry is not None:
        assert weights.name is not None and weights.revision is not None, "model_dir checked"
        by_name = by_name_path(weights.name, weights.revision)
        cache = REGISTRY_CACHE.removeprefix(f"{MODELS_MOUNT}/")
        return source, f"{cache}/{by_name}.sig", f"drill-copies/{pool.name}"
    return source, f"{source}.sig", f"{source}-drill"


def _bad_signature(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    options = RenderOptions()
    models = options.models_host_path
    source, signature, copy_rel = drill_weights(pool)
    on_node = {k: f"{models}/{v}" for k, v in (("source", source), ("sig", signature),
                                               ("copy", copy_rel))}  # fmt: skip
    drill_copy = on_node["copy"]
    remove, copy = _altered_copy(on_node)
    altered = _verify_pod(ns, copy_rel, f"{copy_rel}.sig", "altered")
    intact = _verify_pod(ns, source, signature, "intact")
    apply_a = ["-n", ns, "apply", "-f", "bad-signature/verify-altered.yaml"]
    apply_i = ["-n", ns, "apply", "-f", "bad-signature/verify-intact.yaml"]
    wait_a = [
        "-n",
        ns,
        "wait",
        "--for=jsonpath={.status.phase}=Failed",
        "pod/drill-verify-altered",
        "--timeout=600s",
    ]
    wait_i = [
        "-n",
        ns,
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "pod/drill-verify-intact",
        "--timeout=1800s",
    ]
    logs = ["-n", ns, "logs", "pod/drill-verify-altered"]
    return [
        _clean_up(ns, drill_copy, remove),
        Step("an altered copy of the weights on the node", copy, ["one byte of one shard flipped"]),
        Step(
            "verify the altered copy as the engine pod's init container does",
            _apply_on_node(ns, apply_a[-1]) + "\n" + _k(wait_a) + "\n" + _k(logs),
            ["the pod fails; its log names the altered file"],
            kubectl=[apply_a, wait_a, logs],
            manifests={"bad-signature/verify-altered.yaml": altered},
        ),
        Step(
            "verify the intact weights",
            _apply_on_node(ns, apply_i[-1]) + "\n" + _k(wait_i),
            ["the pod succeeds"],
            kubectl=[apply_i, wait_i],
            manifests={"bad-signature/verify-intact.yaml": intact},
        ),
    ]


def _altered_copy(on_node: dict[str, str]) -> tuple[str, str]:
    """(the line that removes the drill's copy of the weights and its signature, an aborted
    run's too; the line that makes the copy on the node and flips one byte of it). `on_node`:
    the paths on the node of the pool's weights (`source`), their signature (`sig`) and the
    copy (`copy`)."""
    q = shlex.quote
    drill_copy = on_node["copy"]
    # NOTE: `cp -L`: a registry pool's weights are a link into the node's cache; `cp -a` copied
    # the link, and the byte meant for the copy was flipped in the verified model itself.
    remove = f"rm -rf {q(drill_copy)} {q(drill_copy + '.sig')}"  # an aborted run's, too
    remote = (
        f"{remove} && mkdir -p {q(str(PurePosixPath(drill_copy).parent))} && "
        f"cp -RLp {q(on_node['source'])} {q(drill_copy)} && "
        f"cp {q(on_node['sig'])} {q(drill_copy + '.sig')} && "
        f"python3 -c {q(_FLIP_ONE_BYTE)} {q(drill_copy)}"
    )
    return remove, f'ssh "$NODE" {q(remote)}'


def _clean_up(ns: str, drill_copy: str, remove: str) -> Step:
    """The first step: a trap that, on any exit, runs `remove` on the node (the altered copy at
    `drill_copy`) and deletes the verify pods."""
    q = shlex.quote
    pods = ["drill-verify-altered", "drill-verify-intact"]
    delete = ["-n", ns, "delete", "pod", *pods, "--ignore-not-found"]
    # NOTE: a trap, not a last step: under `set -e` a failed `kubectl wait` ended the script
    # before its clean-up, and the altered weights stayed on the node.
    clean_up = (
        "clean_up() {\n"
        f'  ssh "$NODE" {q(remove)} '
        f'|| echo {q("CLEAN UP BY HAND: " + remove + " on")} "$NODE" >&2\n'
        f"  {_k(delete)} || true\n"
        "}\n"
        "trap clean_up EXIT"
    )
    return Step(
        "on any exit, a failed step too: remove the altered copy and the verify pods (trap)",
        clean_up,
        [f"after the script ends, passed or failed: no {drill_copy} on the node"],
        kubectl=[delete],
    )


def _verify_pod(ns: str, rel: str, signature: str, which: str) -> dict[str, Any]:
    options = RenderOptions()
    path = f"{MODELS_MOUNT}/{rel}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"drill-verify-{which}",
            "namespace": ns,
            "labels": {"inhouse.dev/drill": "bad-signature"},
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": "NODE"},
            "containers": [
                {
                    "name": "verify",
                    "image": options.signing_image,
                    "args": [
                        "verify",
                        "key",
                        path,
                        "--signature",
                        f"{MODELS_MOUNT}/{signature}",
                        "--public_key",
                        "/keys/key.pub",
                    ],
                    "volumeMounts": [
                        {"name": "models", "mountPath": "/models", "readOnly": True},
                        {"name": "key", "mountPath": "/keys", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "models",
                    "hostPath": {"path": options.models_host_path, "type": "Directory"},
                },
                {"name": "key", "configMap": {"name": "model-signing-public-key"}},
            ],
        },
    }
