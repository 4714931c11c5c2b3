"""An example's hand-written stack states the cost its own requirements give.

The CRM copilot's `stack.yaml` carried the seeds' "~$4.60/hour node-total, all-in" as
`observability.usd_per_hour`, which the cost dashboards divide over the tokens served, while
`inhouse plan` on the same example's requirements (the same one owned 8xH100 node) reported
$15.38/h. The seeds' figure cannot hold: $300,000 over 3 years is $11.42/h before power and
operations, so the dashboards priced each token at under a third of its cost."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from inhouse.plan.cost import hardware_usd_per_hour
from inhouse.plan.requirements import parse_requirements
from inhouse.spec.load import read_spec_text
from inhouse.spec.stack import parse_stack_text
from inhouse.spec.yaml_load import load_yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PRICED = [
    path.name
    for path in sorted(EXAMPLES.iterdir())
    if (path / "stack.yaml").is_file()
    and "usd_per_hour" in (path / "stack.yaml").read_text()
    and (path / "requirements.yaml").is_file()
]


def test_the_crm_example_states_a_cost() -> None:
    assert "crm-copilot" in PRICED


@pytest.mark.parametrize("name", PRICED)
def test_an_examples_stated_cost_is_its_requirements_hardware_cost(name: str) -> None:
    req_path = EXAMPLES / name / "requirements.yaml"
    stack_path = EXAMPLES / name / "stack.yaml"
    requirements = parse_requirements(
        load_yaml(read_spec_text(req_path, "requirements file"), str(req_path)), str(req_path)
    )
    stack = parse_stack_text(read_spec_text(stack_path, "stack file"), str(stack_path))
    assert stack.observability is not None and stack.observability.usd_per_hour is not None
    offers = {offer.gpu: offer for offer in requirements.hardware}
    gpus = Counter[str]()
    for pool in stack.pools:
        gpus[pool.gpu] += pool.tp * pool.replicas
    # The plan's path: whole nodes of each GPU the pools use, at the requirements' prices.
    expected = sum(hardware_usd_per_hour(offers[gpu], used) for gpu, used in gpus.items())
    assert stack.observability.usd_per_hour == pytest.approx(expected, abs=0.005)
