"""`inhouse drill plan`: the seven drills for a production cluster, as exact commands, with the
checks to read, validated offline.

Each drill becomes `DIR/NAME.sh` (a script to run step by step: kubectl, curl, promtool, amtool,
`inhouse bench`) and a section of `DIR/drills.md` (expected outcome, red flags, what to read
after each step). `$PROM`, `$AM`, `$GATEWAY`, `$INHOUSE_API_KEY` and `$FLOOD_KEY` are the only
things the operator fills in. Offline validation (`DIR/validation.json`, and the exit code):
every kubectl command parsed by kubectl itself (`--dry-run=client`, no cluster contacted),
every PromQL check compiled by `promtool check rules`, the ECC rule test run by `promtool test
rules` against the rendered rules, every manifest through `kubernetes-validate --strict`, every
script through `bash -n`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inhouse.drill.catalog import DRILLS
from inhouse.drill.context import plan_profile
from inhouse.drill.evidence import write_json
from inhouse.drill.kubectl import check_command
from inhouse.drill.prodsteps import AgentLoad, Step, default_agent_load, drill_steps
from inhouse.render import RenderOptions
from inhouse.render.prometheus import render_prometheus
from inhouse.render.yamltext import dump_yaml
from inhouse.spec.stack import StackSpec

KUBERNETES_VERSION = "1.30.0"


@dataclass
class Validation:
    name: str
    ok: bool
    detail: str


@dataclass
class PlanResult:
    out_dir: Path
    validations: list[Validation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.validations)


def agent_load(stack: StackSpec, stack_path: Path) -> AgentLoad:
    """The loads' agent sessions: the planned peak of the `plan.json` beside the stack file (read
    and bounded as `drill run` reads it), else the agent workload's default, said as such."""
    profile = plan_profile(stack.pools[0], stack_path)
    if profile is not None:
        return AgentLoad(
            profile.peak_sessions,
            f"the planned peak and agent traffic shape of {profile.source}",
            True,
            tuple(profile.agent_params.items()),
        )
    plan_path = stack_path.parent / "plan.json"
    if plan_path.exists():
        return default_agent_load(f"{plan_path} plans no agent workload")
    return default_agent_load()


def write_plan(
    stack: StackSpec,
    out_dir: Path,
    options: RenderOptions | None = None,
    load: AgentLoad | None = None,
) -> PlanResult:
    options = options or RenderOptions()
    load = load or default_agent_load()
    ns = options.namespace or stack.name
    out_dir.mkdir(parents=True, exist_ok=True)
    rendered = render_prometheus(stack, ns, options.runbook_url)
    (out_dir / "prometheus").mkdir(exist_ok=True)
    (out_dir / "prometheus" / "rules.yaml").write_text(rendered["prometheus/rules.yaml"])
    result = PlanResult(out_dir)
    sections = [
        "# Drills for production",
        "",
        f"Stack `{stack.name}`, namespace `{ns}`. Fill "
        "in `PROM`, `AM`, `GATEWAY`, `INHOUSE_API_KEY`, `FLOOD_KEY` (and `NODE`), then "
        "run each script step by step; read each check before the next step.",
        "",
        f"Load: {load.source}.",
        "",
    ]
    promql: list[str] = []
    for info in DRILLS:
        steps = drill_steps(info.name, stack, ns, load)
        script = _script(info.name, steps, load)
        path = out_dir / f"{info.name}.sh"
        path.write_text(script, encoding="utf-8")
        path.chmod(0o755)
        sections += _section(info.name, steps)
        for step in steps:
            result.validations += _validate_step(info.name, step, out_dir)
            promql += step.promql
        result.validations.append(_bash_n(path))
    result.validations.append(_check_promql(promql, out_dir))
    (out_dir / "drills.md").write_text("\n".join(sections) + "\n", encoding="utf-8")
    write_json(
        out_dir / "validation.json",
        {"ok": result.ok, "checks": [v.__dict__ for v in result.validations]},
    )
    return result


# What the operator fills in, and what the guard line says of each: the endpoints first.
_FIRST = ("PROM", "AM", "GATEWAY")
_VARIABLE = re.compile(r"\$\{?([A-Z][A-Z0-9_]*)")


def script_variables(steps: list[Step]) -> list[str]:
    """The environment variables a drill's commands expand (only those: bad-signature.sh needs
    no Prometheus), `PROM`, `AM`, `GATEWAY` first."""
    used = {m.group(1) for step in steps for m in _VARIABLE.finditer(step.shell)}
    return [v for v in _FIRST if v in used] + sorted(used - set(_FIRST))


def _comment(text: str) -> str:
    """`text` for a comment line: escaped when it holds a newline (or another unprintable
    character), which would end the comment and run the rest (a model path from the stack)."""
    return text if text.isprintable() else repr(text)


def _script(name: str, steps: list[Step], load: AgentLoad) -> str:
    # NOTE: every variable up front: `set -u` does not stop the script when the unset one is
    # in a background command (`inhouse bench ... &`): the load died and the drill went on to
    # kill a replica with no traffic to observe.
    guard = " ".join(f'"${{{v}:?set {v} first}}"' for v in script_variables(steps))
    lines = [
        "#!/usr/bin/env bash",
        f"# inhouse drill plan: {name}. Run step by step; read each CHECK before going on.",
        *(
            [f"# Load: {_comment(load.source)}."]
            if any(" bench " in s.shell for s in steps)
            else []
        ),
        "set -euo pipefail",
        f": {guard}",
        "",
    ]
    for i, step in enumerate(steps, 1):
        lines.append(f"# --- step {i}: {_comment(step.title)}")
        lines += [f"# CHECK: {_comment(c)}" for c in step.checks]
        lines += [step.shell, ""]
    return "\n".join(lines)


def _section(name: str, steps: list[Step]) -> list[str]:
    info = next(d for d in DRILLS if d.name == name)
    lines = [
        f"## {name}: {info.title}",
        "",
        info.purpose,
        "",
        f"Script: `{name}.sh`.",
        "",
        "Expected:",
        "",
    ] + [f"* {e}" for e in info.expected]
    lines += ["", "Red flags:", ""] + [f"* {r}" for r in info.red_flags] + ["", "Steps:", ""]
    for i, step in enumerate(steps, 1):
        lines.append(f"{i}. {step.title}")
        lines += [f"   * check: {c}" for c in step.checks]
    return [*lines, ""]


def _validate_step(drill: str, step: Step, out_dir: Path) -> list[Validation]:
    out = []
    for rel, manifest in step.manifests.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_yaml(manifest), encoding="utf-8")
        out.append(_kube_validate(f"{drill}: {rel}", manifest))
    for argv in step.kubectl:
        check = check_command(argv, cwd=out_dir)
        out.append(Validation(f"{drill}: kubectl {shlex.join(argv)}", check.ok, check.detail))
    for rel, text in step.files.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if step.rule_test:
        out.append(
            _promtool(
                ["test", "rules", str(out_dir / step.rule_test)],
                f"{drill}: promtool test rules {step.rule_test}",
            )
        )
    return out


def _kube_validate(name: str, manifest: dict[str, Any]) -> Validation:
    try:
        import kubernetes_validate
    except ImportError:
        return Validation(name, False, "kubernetes-validate not installed (pip install it)")
    try:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return Validation(name, False, str(exc)[:300])
    return Validation(name, True, f"valid for Kubernetes {KUBERNETES_VERSION} (strict)")


def _promtool(args: list[str], name: str) -> Validation:
    promtool = shutil.which("promtool")
    if promtool is None:
        return Validation(name, False, "promtool not installed (Debian package prometheus)")
    done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120)
    detail = (done.stdout + done.stderr).strip().splitlines()
    return Validation(name, done.returncode == 0, (detail[-1] if detail else "")[:300])


def _check_promql(queries: list[str], out_dir: Path) -> Validation:
    """Every check's PromQL compiled by promtool, as recording rules of a scratch file."""
    rules = [{"record": f"drill:check_{i}", "expr": q} for i, q in enumerate(queries)]
    path = out_dir / "prometheus" / "checks.yaml"
    path.write_text(dump_yaml({"groups": [{"name": "drill-checks", "rules": rules}]}))
    result = _promtool(["check", "rules", str(path)], f"{len(queries)} PromQL checks compile")
    return result


def _bash_n(path: Path) -> Validation:
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    return Validation(
        f"bash -n {path.name}", done.returncode == 0, done.stderr.strip()[:300] or "ok"
    )
