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
