"""The sizing memo's figures add up to what the GPUs in use cost."""

from inhouse.plan.cost import node_cost
from inhouse.plan.memo import _hardware
from inhouse.plan.requirements import HardwareOffer


def _row(offer: HardwareOffer, gpus_used: int, nodes: int) -> dict[str, object]:
    nc = node_cost(offer)
    return {
        "gpu": offer.gpu,
        "gpus_used": gpus_used,
        "nodes": nodes,
        "gpus_per_node": offer.gpus_per_node,
        "pricing": offer.pricing,
        "node_usd_per_hour": nc.usd_per_hour,
        "usd_per_gpu_hour": nc.usd_per_gpu_hour,
        "arithmetic": nc.arithmetic,
    }


def test_the_hardware_bill_prices_the_gpus_and_nodes_in_use() -> None:
    # The code-assistant memo read "h100_sxm | 33 | 5 | hourly | $3.00 | 8 GPUs x $3.00/GPU-h =
    # $24.00/h" for a $99.00/h bill: one node's arithmetic beside 33 GPUs.
    rented = HardwareOffer(gpu="h100_sxm", pricing="hourly", usd_per_gpu_hour=3.0)
    owned = HardwareOffer(
        gpu="h200_sxm",
        pricing="capex",
        capex_usd_per_node=262_800,
        amortization_years=3,
        power_kw_per_node=10,
        avg_power_fraction=1,
        pue=1,
        usd_per_kwh=0.1,
    )
    lines = "\n".join(_hardware({"hardware": [_row(rented, 33, 5), _row(owned, 16, 2)]}))
    assert "| 33 GPUs x $3.00/GPU-h = $99.00/h |" in lines
    # $262,800 / (3 x 8,760 h) = $10.00/h, 10 kW x $0.10 = $1.00/h: $11.00 a node, two nodes.
    assert "node all-in $11.00/h; x 2 nodes = $22.00/h |" in lines
