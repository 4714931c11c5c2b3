"""The playbook applies every manifest `inhouse render` wrote, namespace first."""

from __future__ import annotations

import re

from inhouse.report.context import Context
from inhouse.report.inputs import ReportInputs
from inhouse.report.playbook import build_playbook


def test_every_rendered_manifest_is_applied_once_namespace_first(inputs: ReportInputs) -> None:
    text = build_playbook(Context.build(inputs, public=False), None)
    applied = re.findall(r"kubectl apply -f deploy/(k8s/\S+)", text)
    assert inputs.render is not None
    manifests = sorted(f for f in inputs.render.files if f.startswith("k8s/"))
    assert sorted(applied) == manifests
    assert applied[0] == "k8s/namespace.yaml"
    assert text.count("Expect:") >= len(applied)


def test_the_playbooks_inhouse_commands_parse(inputs: ReportInputs) -> None:
    """Every `inhouse` command the playbook prints is accepted by this inhouse's own parser
    (commands of subcommands not installed in this tree are skipped, and counted)."""
    import shlex

    from inhouse.cli.main import build_parser

    text = build_playbook(Context.build(inputs, public=False), None)
    commands = re.findall(r"^(inhouse .+?)$", text.replace("\\\n    ", " "), flags=re.MULTILINE)
    parser = build_parser()
    known = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    parsed = 0
    for command in commands:
        argv = shlex.split(command)[1:]
        if argv[0] not in known:
            continue
        parser.parse_args(argv)
        parsed += 1
    assert parsed >= 4  # check topology, render, weights pull and verify
    assert "inhouse weights pull meta-llama/Llama-3.3-70B-Instruct@REV" in text


def test_the_bench_step_says_what_shares_the_engines_counters(inputs: ReportInputs) -> None:
    """The playbook had the cold probe run beside the chat run without saying that the
    engines' counters then count both, nor that other traffic on the stack counts too."""
    text = build_playbook(Context.build(inputs, public=False), None)
    bench = text.split("## 6. Bench")[1].split("\n## ")[0]
    assert "Nothing else may use the stack while the runs go" in bench
    assert "the chat run's hit rate from its clients' `cached_tokens`" in bench
