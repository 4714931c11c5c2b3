"""The steps of each drill against a production cluster: shell, kubectl argument lists (checked
by kubectl), PromQL (compiled by promtool), manifests (kubernetes-validate) and rule tests.

This module picks each drill's steps and holds the drills of a few steps (kv-fill,
long-prompt-dos, ecc-dbe, soak); `prodrestart.py` holds the two that restart a replica
(kill-replica, load-not-ready), `prodsignature.py` bad-signature, and `prodshell.py` what every
step is made of (`Step`, `AgentLoad`, the shell lines)."""

from __future__ import annotations

import dataclasses
import json
import shlex

from inhouse.drill.context import ttft_slo_ms
from inhouse.drill.drills.long_prompt_dos import huge_tokens
from inhouse.drill.prodrestart import _kill_replica, _load_not_ready
from inhouse.drill.prodshell import NODE, AgentLoad, Step, _am, _bench, _k, _q, default_agent_load
from inhouse.drill.prodsignature import _bad_signature
from inhouse.drill.remediation import ecc_remediation
from inhouse.drill.victim import last_victim
from inhouse.render.alerts import Case, Series, render_rule_tests
from inhouse.render.alerts_gpu import gpu_rules
from inhouse.render.layout import engine_layout, nvml_name
from inhouse.render.options import RenderOptions
from inhouse.spec.stack import PoolSpec, StackSpec

# `Step`, `AgentLoad` and `default_agent_load` live in prodshell.py; prodplan and the tests
# import them from here.
__all__ = ["SOAK_SHARE", "AgentLoad", "Step", "default_agent_load", "drill_steps", "ecc_rule_test"]

SOAK_SHARE = 0.6  # the soak runs at 60% of planned peak, as the live soak does


def drill_steps(name: str, stack: StackSpec, ns: str, load: AgentLoad) -> list[Step]:
    pool = stack.pools[0]
    builders = {
        "kill-replica": _kill_replica,
        "kv-fill": _kv_fill,
        "long-prompt-dos": _long_prompt,
        "bad-signature": _bad_signature,
        "load-not-ready": _load_not_ready,
        "ecc-dbe": _ecc,
        "soak": _soak,
    }
    return builders[name](stack, pool, ns, load)


def _kv_fill(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    kv = f'max(vllm:kv_cache_usage_perc{{namespace="{ns}"}})'
    pre = f'sum(increase(vllm:num_preemptions_total{{namespace="{ns}"}}[10m]))'
    pods = ["-n", ns, "get", "pods", "-l", f"inhouse.dev/pool={pool.name}", "-o", "wide"]
    sessions, at = load.share()
    return [
        Step(
            f"agent load at {at}, and long-context load on top until KV use passes 95%",
            _bench("kv-fill-agent", pool, load.workload(sessions) + " --duration 900")
            + "\n"
            + _bench(
                "kv-fill",
                pool,
                "--workload longctx -p prompt=20000:30000 --concurrency 64 --duration 900",
            ),
            ["KV use >= 0.95: " + _q(kv)],
            promql=[kv],
        ),
        Step(
            "preemption, no crash, the page",
            _q(pre),
            ["preemptions rise", "no restarts: " + _k(pods), _am("InhouseKVCacheFull")],
            kubectl=[pods],
            promql=[pre],
        ),
        Step(
            "recovery",
            "wait  # for both loads to end",
            ["KV use falls below 0.95 and InhouseKVCacheFull resolves: " + _q(kv)],
        ),
    ]


def _long_prompt(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    model = pool.client_model_name
    # one token a word, past the pool's context in any case (`huge_tokens`)
    words = huge_tokens(pool)
    # NOTE: the model name as a JSON (and Python) literal, the program quoted for the shell: a
    # quote in a pool's directory name (its client name without served_model_name) ran the rest.
    body = f'{{"model": {json.dumps(model)}, "prompt": "word " * {words}, "max_tokens": 16}}'
    huge = (
        f"python3 -c {shlex.quote(f'import json; print(json.dumps({body}))')} "
        "| curl -s -o /dev/null "
        # NOTE: the header from a file descriptor, not argv, where `ps` shows the key to all.
        "-w '%{http_code}\\n' -H @<(printf 'Authorization: Bearer %s\\n' \"$INHOUSE_API_KEY\") -H "
        "'content-type: application/json' --data-binary @- \"$GATEWAY/v1/completions\""
    )
    moved = f'sum(increase(vllm:prompt_tokens_total{{namespace="{ns}"}}[2m]))'
    rejected = "sum by (tenant, reason) (increase(inhouse_gateway_rejections_total[5m]))"
    other = (
        "histogram_quantile(0.95, sum by (le, tenant) "
        "(rate(inhouse_gateway_ttft_seconds_bucket[5m])))"
    )
    flood = (
        "--workload longctx -p prompt=32000:32000 -p question=60:60 -p output=16:16 "
        "--rate 10 --duration 300"
    )
    sessions, at = load.share()
    interactive = load.workload(sessions) + " --duration 300"
    return [
        Step(
            f"a {words // 1000}K-token prompt, past the context",
            huge,
            ["prints 400", "engines saw nothing: " + _q(moved)],
            promql=[moved],
        ),
        Step(
            f"the flood from one tenant, interactive traffic at {at} from another",
            _bench("dos-flood", pool, flood, "$FLOOD_KEY")
            + "\n"
            + _bench("dos-interactive", pool, interactive),
            [
                "the flood tenant gets 429: " + _q(rejected),
                f"the other tenant's p95 TTFT within {ttft_slo_ms(pool) * 1.1:.0f} ms: "
                + _q(other),
            ],
            promql=[rejected, other],
        ),
    ]


def ecc_rule_test(stack: StackSpec) -> str:
    """A promtool test: a double-bit error on GPU 3 of the node pages, naming GPU and node."""
    alert = next(a for a in gpu_rules(engine_layout(stack)) if a.name == "InhouseGPUDoubleBitECC")
    labels = {
        "gpu": "3",
        "UUID": "GPU-drill-3",
        "modelName": nvml_name(stack.pools[0].gpu),
        "Hostname": "gpu-node-1",
    }
    series = (
        Series(labels, "0 0 0 1 1 1 1 1 1 1", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
        Series(labels, "0x10", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"),
    )
    case = Case("drill: one double-bit error on GPU 3 of gpu-node-1", "1m", series, "4m", labels)
    drill = dataclasses.replace(alert, cases=(case,))
    return render_rule_tests([drill], RenderOptions().runbook_url, "../prometheus/rules.yaml")


def _ecc(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    victim = last_victim(stack, pool, ns, "ecc-dbe")
    cordon, drain = ecc_remediation(stack, pool, victim.index, NODE)
    server = [[*c, "--dry-run=server"] for c in (cordon, drain)]
    synthetic = (
        'amtool --alertmanager.url="$AM" alert add InhouseGPUDoubleBitECC severity=page '
        'gpu=3 Hostname="$NODE" drill=true --annotation=summary="DRILL: GPU 3 on $NODE '
        'double-bit ECC" --end="$(date -u -d "+10 min" +%Y-%m-%dT%H:%M:%SZ)"'
    )
    return [
        Step(
            "the rule fires on a double-bit error (promtool, offline)",
            "promtool test rules ecc-dbe/ecc_dbe_test.yaml",
            ["SUCCESS: the page carries gpu and Hostname and the runbook link"],
            files={"ecc-dbe/ecc_dbe_test.yaml": ecc_rule_test(stack)},
            rule_test="ecc-dbe/ecc_dbe_test.yaml",
        ),
        Step(
            "the page path: a synthetic page through Alertmanager",
            synthetic,
            ["the on-call receiver gets it, naming GPU and node"],
        ),
        Step(
            "rehearse cordon and drain (server-side dry run)",
            "\n".join(_k(c) for c in server),
            ["the API server accepts both; the drain selects only the replica on the GPU"],
            kubectl=server,
        ),
        Step(
            "for a real fault: cordon and drain",
            "# " + _k(cordon) + "\n# " + _k(drain),
            ["the replica's in-flight requests finish (grace period); file the RMA ticket"],
            kubectl=[cordon, drain],
        ),
    ]


def _soak(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    model = pool.client_model_name
    p95 = f'inhouse:time_to_first_token_seconds:p95_5m{{model_name="{model}"}}'
    hits = (
        f'sum(rate(vllm:prefix_cache_hits_total{{namespace="{ns}"}}[1d])) / '
        f'sum(rate(vllm:prefix_cache_queries_total{{namespace="{ns}"}}[1d]))'
    )
    kv = f'avg_over_time(vllm:kv_cache_usage_perc{{namespace="{ns}"}}[1d])'
    rss = f'process_resident_memory_bytes{{namespace="{ns}"}}'
    fds = f'process_open_fds{{namespace="{ns}"}}'
    sessions, at = load.share(SOAK_SHARE)
    return [
        Step(
            f"two weeks at {at}",
            _bench("soak", pool, load.workload(sessions) + " --duration 1209600"),
            ["runs for two weeks"],
        ),
        Step(
            "every day: p95, hit rate, KV use, memory, descriptors",
            "\n".join(_q(e) for e in (p95, hits, kv, rss, fds)),
            ["no metric drifts more than 10% day over day", "RSS and descriptors flat"],
            promql=[p95, hits, kv, rss, fds],
        ),
    ]
