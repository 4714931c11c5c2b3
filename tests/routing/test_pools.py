from __future__ import annotations

from pathlib import Path

from inhouse.routing import ReplicaView, choose_pool, primary_pool
from inhouse.spec.load import load_stack

ROOT = Path(__file__).resolve().parents[2]
STACK = load_stack(ROOT / "examples" / "code-assistant" / "stack.yaml")


def views(healthy: int = 3, down: int = 0, waiting: int = 0):
    pools = {
        name: [ReplicaView(i, 0, waiting, 0.0, True) for i in range(healthy)]
        + [ReplicaView(healthy + i, 0, 0, 0.0, False) for i in range(down)]
        for name in ("standard", "long", "fallback")
    }
    return pools


def test_a_30k_token_prompt_goes_to_the_long_pool() -> None:
    pools = views()
    choice = choose_pool(STACK, "code-70b", 30_000, pools.__getitem__)
    assert (choice.pool, choice.reason) == ("long", "long_prompt")
    assert primary_pool(STACK, "code-70b", 12_000).pool == "standard"  # the rule is "above"
    assert primary_pool(STACK, "code-70b", 12_001).pool == "long"


def test_model_names_pick_pools_and_no_model_takes_the_first() -> None:
    assert primary_pool(STACK, "code-8b", 100).pool == "fallback"
    assert primary_pool(STACK, None, 100).pool == "standard"
    assert primary_pool(STACK, "gpt-4", 100).reason == "unknown_model"


def test_a_down_pool_falls_back_and_a_saturated_one_too() -> None:
    pools = views()
    pools["standard"] = [ReplicaView(i, 0, 0, 0.0, False) for i in range(3)]
    choice = choose_pool(STACK, "code-70b", 500, pools.__getitem__)
    assert (choice.pool, choice.reason) == ("fallback", "fallback_down")
    saturation = STACK.pool("standard").saturation_waiting
    pools = views()
    pools["standard"] = [ReplicaView(i, 0, saturation, 0.0, True) for i in range(3)]
    choice = choose_pool(STACK, "code-70b", 500, pools.__getitem__)
    assert (choice.pool, choice.reason) == ("fallback", "fallback_saturated")
    pools["standard"][0] = ReplicaView(0, 0, saturation - 1, 0.0, True)  # one has room
    assert choose_pool(STACK, "code-70b", 500, pools.__getitem__).pool == "standard"


def test_a_saturated_pool_keeps_its_traffic_when_the_fallback_is_saturated_too() -> None:
    pools = views(waiting=STACK.pool("standard").saturation_waiting)
    assert choose_pool(STACK, "code-70b", 500, pools.__getitem__).pool == "standard"


def test_long_prompts_fall_back_when_the_long_pool_is_down() -> None:
    pools = views()
    pools["long"] = [ReplicaView(i, 0, 0, 0.0, False) for i in range(2)]
    choice = choose_pool(STACK, "code-70b", 30_000, pools.__getitem__)
    assert (choice.pool, choice.reason) == ("fallback", "fallback_down")
    pools["fallback"] = [ReplicaView(i, 0, 0, 0.0, False) for i in range(2)]
    choice = choose_pool(STACK, "code-70b", 30_000, pools.__getitem__)
    assert (choice.pool, choice.reason) == (None, "pool_down")


def test_a_lora_guest_takes_no_length_rule() -> None:
    # The long pool has no adapter for it (a name is served by one pool only): the guest's long
    # prompts stay on the pool that carries its adapter, where the plan sized them.
    data = STACK.model_dump(mode="json")
    data["pools"][0]["lora_adapters"] = ["review"]
    stack = type(STACK).model_validate(data)
    assert stack.pools[0].name == "standard"
    choice = primary_pool(stack, "review", 30_000)
    assert (choice.pool, choice.reason) == ("standard", "model")
    assert primary_pool(stack, "code-70b", 30_000).pool == "long"
