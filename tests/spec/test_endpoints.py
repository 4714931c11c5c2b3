"""The gateway's `--endpoints` file: pools' URLs (as `up` writes it), scaled pools' DNS names
(as `render` writes it), and errors that name the field and the fix."""

from __future__ import annotations

import pytest

from inhouse.errors import SpecError
from inhouse.spec.endpoints import DiscoveryTarget, parse_endpoints, parse_endpoints_text


def test_the_file_up_writes_has_urls_and_no_discovery() -> None:
    parsed = parse_endpoints({"pools": {"chat": ["http://127.0.0.1:8100"]}}, "endpoints.json")
    assert parsed.pools == {"chat": ["http://127.0.0.1:8100"]}
    assert parsed.discovery == {}


def test_a_scaled_pool_names_its_headless_service_and_its_slots() -> None:
    data = {
        "pools": {"long": ["http://long-engine.ns.svc.cluster.local:8000"]},
        "discovery": {
            "long": {"dns": "long-engine.ns.svc.cluster.local", "port": 8000, "max_replicas": 6},
            "old": {"dns": "old-engine.ns.svc.cluster.local", "port": 8000},  # an older render
        },
    }
    parsed = parse_endpoints(data, "endpoints.json")
    assert parsed.discovery == {
        "long": DiscoveryTarget(dns="long-engine.ns.svc.cluster.local", port=8000, max_replicas=6),
        "old": DiscoveryTarget(dns="old-engine.ns.svc.cluster.local", port=8000),
    }
    assert parsed.discovery["old"].max_replicas is None


@pytest.mark.parametrize(
    ("discovery", "expected"),
    [
        ({"port": 8000}, "discovery.long.dns: required field is missing"),
        ({"dns": "h", "port": "http"}, "discovery.long.port: Input should be a valid integer"),
        ({"dns": "h", "port": 70000}, "discovery.long.port: Input should be less than or equal"),
        ({"dns": "h", "port": 1, "max_replicas": 0}, "discovery.long.max_replicas: Input should"),
        ({"dns": "h", "port": 1, "max_replica": 3}, "discovery.long.max_replica: unknown field"),
        ({"dns": "http://h:8000", "port": 8000}, "discovery.long.dns: 'http://h:8000' is a URL"),
        ("h:8000", "discovery.long: Input should be a valid dictionary"),
    ],
)
def test_a_malformed_discovery_entry_is_named_with_its_fix(
    discovery: object, expected: str
) -> None:
    data = {"pools": {"long": ["http://h:8000"]}, "discovery": {"long": discovery}}
    with pytest.raises(SpecError) as raised:
        parse_endpoints(data, "--endpoints e.json")
    message = str(raised.value)
    assert message.startswith("--endpoints e.json: ")
    assert expected in message
    assert "docs/gateway.md" in message or "port goes in discovery.long.port" in message


def test_a_file_without_pools_or_not_an_object_says_what_it_should_be() -> None:
    with pytest.raises(SpecError, match="pools: required field is missing"):
        parse_endpoints({"discovery": {}}, "e.json")
    with pytest.raises(SpecError, match=r'e.json: an endpoints file is a JSON object \{"pools"'):
        parse_endpoints([], "e.json")


def test_a_pool_listed_twice_in_the_json_is_refused() -> None:
    # json.loads kept the second list: the first pool's engines vanished with nothing said.
    text = '{"pools": {"chat": ["http://a:8000"], "chat": ["http://b:8000"]}}'
    with pytest.raises(SpecError, match=r"endpoints\.json: not valid JSON: duplicate key 'chat'"):
        parse_endpoints_text(text, "endpoints.json")
    assert parse_endpoints_text('{"pools": {"chat": ["http://a:8000"]}}', "e").pools == {
        "chat": ["http://a:8000"]
    }


def test_a_scaled_pool_of_1e11_slots_is_refused() -> None:
    # The gateway built one replica slot each at start: a memory blow-up.
    data = {
        "pools": {"chat": []},
        "discovery": {"chat": {"dns": "x.", "port": 1, "max_replicas": 10**11}},
    }
    with pytest.raises(
        SpecError, match=r"discovery\.chat\.max_replicas: .*less than or equal to 1024"
    ):
        parse_endpoints(data, "endpoints.json")
