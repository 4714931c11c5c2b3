"""The edge: Envoy in front of the gateway, one `envoy.yaml` for one box and for a cluster.

Clients reach Envoy; Envoy reaches the gateway. Envoy terminates TLS and holds the line
against hostile clients before any byte reaches Python: a head must be complete within
`gateway.server.header_timeout_s` (408), heads (and trailers) are at most
`MAX_REQUEST_HEADERS_KIB`, at most `gateway.server.max_connections` client connections are
open (the overload manager refuses more), idle connections close after
`gateway.server.keep_alive_s`, and a client that stops reading fills at most
`BUFFER_LIMIT_BYTES` of Envoy's buffer before Envoy stops reading the gateway (flow control).

Streams pass through unbuffered (no buffering filter; the router's per-try and idle timeouts
are off, a stream is bounded by `proxy.request_timeout_s`, and by `stream_idle_timeout` at
`proxy.first_byte_timeout_s` of silence, so a long prefill is not cut). Envoy adds
`x-forwarded-for` with the client's address and keeps (or makes) `x-request-id`; the gateway
logs both (`gateway.server.trusted_proxies` names Envoy's address). Envoy's access log is one
JSON line per request on stdout, with no query string and no body.

Plain Envoy rather than Envoy Gateway's resources (Gateway, HTTPRoute, ClientTrafficPolicy):
on the single-node, air-gapped clusters this project targets, Envoy Gateway is one more
controller and set of CRDs to install and upgrade, and it would translate those resources
into this very configuration; with plain Envoy the file that runs on one box is the file
that runs in the cluster, and the tests check it with the real binary (`envoy --mode
validate`) and drive hostile clients against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inhouse.render.yamltext import comment_block, dump_yaml
from inhouse.spec.gateway import GatewaySpec

MAX_REQUEST_HEADERS_KIB = 64  # as the gateway's own MAX_HEAD_BYTES
BUFFER_LIMIT_BYTES = 1 << 20  # per connection, each way
UPSTREAM_IDLE_S = 60  # below the gateway's keep-alive (75 s): Envoy closes first, no race
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
_TLS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
_STDOUT_LOG = "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"
_PROTOCOL = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_CONNECTIONS = (
    "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3."
    "DownstreamConnectionsConfig"
)
ACCESS_LOG_FORMAT = {
    "time": "%START_TIME%",
    "request_id": "%REQ(X-REQUEST-ID)%",
    "client": "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%",
    "method": "%REQ(:METHOD)%",
    "path": "%REQ(:PATH):256%",  # NOTE: cut: a client's path is not for the log to hold whole
    "status": "%RESPONSE_CODE%",
    "flags": "%RESPONSE_FLAGS%",
    "bytes_in": "%BYTES_RECEIVED%",
    "bytes_out": "%BYTES_SENT%",
    "ms": "%DURATION%",
}


@dataclass(frozen=True, slots=True)
class Edge:
    """Where Envoy listens and where the gateway answers. `upstream_dns`: resolve the
    gateway's name (a Kubernetes Service); else `upstream_host` is an address."""

    listen_host: str
    listen_port: int
    upstream_host: str
    upstream_port: int
    upstream_dns: bool = False
    certfile: str | None = None
    keyfile: str | None = None


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _manager(spec: GatewaySpec) -> dict[str, Any]:
    server, proxy = spec.server, spec.proxy
    return {
        "@type": _HCM + "HttpConnectionManager",
        "stat_prefix": "inhouse_edge",
        "codec_type": "AUTO",
        "use_remote_address": True,  # x-forwarded-for gets the client's address
        "xff_num_trusted_hops": 0,
        "generate_request_id": True,
        "preserve_external_request_id": True,
        "request_headers_timeout": _seconds(server.header_timeout_s),
        "stream_idle_timeout": _seconds(proxy.first_byte_timeout_s),
        "request_timeout": "0s",  # a stream is long: bounded by max_stream_duration below
        "max_request_headers_kb": MAX_REQUEST_HEADERS_KIB,
        "common_http_protocol_options": {
            "idle_timeout": _seconds(server.keep_alive_s),
            "max_stream_duration": _seconds(proxy.request_timeout_s),
            "headers_with_underscores_action": "REJECT_REQUEST",
            "max_headers_count": 100,
        },
        "normalize_path": True,
        "merge_slashes": True,
        "path_with_escaped_slashes_action": "REJECT_REQUEST",
        "access_log": [
            {
                "name": "envoy.access_loggers.stdout",
                "typed_config": {
                    "@type": _STDOUT_LOG,
                    "log_format": {"json_format": ACCESS_LOG_FORMAT},
                },
            }
        ],
        "route_config": {
            "name": "gateway",
            "virtual_hosts": [
                {
                    "name": "gateway",
                    "domains": ["*"],
                    "routes": [
                        {
                            "match": {"prefix": "/"},
                            # NOTE: no route idle_timeout: "0s" there would switch the
                            # manager's stream_idle_timeout off for every stream.
                            "route": {"cluster": "gateway", "timeout": "0s"},
                        }
                    ],
                }
            ],
        },
        "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}}],
    }


def _chain(edge: Edge, spec: GatewaySpec) -> dict[str, Any]:
    manager = {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": _manager(spec),
    }
    chain: dict[str, Any] = {"filters": [manager]}
    if edge.certfile:
        assert edge.keyfile, "TLS needs a key with the certificate"
        chain["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": _TLS,
                "common_tls_context": {
                    "tls_params": {"tls_minimum_protocol_version": "TLSv1_2"},
                    "alpn_protocols": ["http/1.1"],
                    "tls_certificates": [
                        {
                            "certificate_chain": {"filename": edge.certfile},
                            "private_key": {"filename": edge.keyfile},
                        }
                    ],
                },
            },
        }
    return chain


def _cluster(edge: Edge) -> dict[str, Any]:
    many = 1_000_000  # the gateway queues and sheds load itself: Envoy's breakers stay open
    address = {"socket_address": {"address": edge.upstream_host, "port_value": edge.upstream_port}}
    return {
        "name": "gateway",
        "type": "STRICT_DNS" if edge.upstream_dns else "STATIC",
        "connect_timeout": "2s",
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT_BYTES,
        "circuit_breakers": {
            "thresholds": [
                {
                    "max_connections": many,
                    "max_pending_requests": many,
                    "max_requests": many,
                    "max_retries": 0,
                }
            ]
        },
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": _PROTOCOL,
                "common_http_protocol_options": {"idle_timeout": _seconds(UPSTREAM_IDLE_S)},
                "explicit_http_config": {"http_protocol_options": {}},
            }
        },
        "load_assignment": {
            "cluster_name": "gateway",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}],
        },
    }


def envoy_config(edge: Edge, spec: GatewaySpec) -> dict[str, Any]:
    """Envoy's bootstrap (v3) for `edge`, with the gateway's limits (`spec.server`)."""
    listener = {
        "name": "clients",
        "address": {
            "socket_address": {"address": edge.listen_host, "port_value": edge.listen_port}
        },
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT_BYTES,
        "filter_chains": [_chain(edge, spec)],
    }
    return {
        "static_resources": {"listeners": [listener], "clusters": [_cluster(edge)]},
        "overload_manager": {
            "resource_monitors": [
                {
                    "name": "envoy.resource_monitors.global_downstream_max_connections",
                    "typed_config": {
                        "@type": _CONNECTIONS,
                        "max_active_downstream_connections": spec.server.max_connections,
                    },
                }
            ]
        },
    }


def render_envoy_yaml(edge: Edge, spec: GatewaySpec) -> str:
    scheme = "https" if edge.certfile else "http"
    head = (
        f"Envoy in front of the inhouse gateway: clients on {scheme}://{edge.listen_host}:"
        f"{edge.listen_port}, the gateway at {edge.upstream_host}:{edge.upstream_port}.\n"
        "Rendered by inhouse (docs/gateway.md, `The edge`); check it with\n"
        "  envoy --mode validate -c envoy.yaml\n"
        "run it with\n"
        "  envoy -c envoy.yaml --disable-hot-restart"
    )
    return comment_block(head) + dump_yaml(envoy_config(edge, spec))
