"""bench_predict's TTFT growth: per configuration, highest over lowest concurrency, measured
against predicted (rows stand in for corpus rows: only the fields `growth` reads)."""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from tests.support.scripts import load_script

from inhouse.engine.build import ReplicaSpec
from inhouse.spec.knobs import EngineKnobs


def _bench() -> ModuleType:
    return load_script("benchmarks/bench_predict.py")


def _scored(config: str, c: int, ttft: float, tpot: float, p_ttft: float, p_tpot: float) -> Any:
    # The knobs follow the concurrency, as in the corpus: the configuration is the rest.
    spec = ReplicaSpec(model=config, gpu="h100_sxm", tp=1, knobs=EngineKnobs(max_num_seqs=c))
    row = SimpleNamespace(
        backend="vllm", concurrency=c, spec=spec, isl=1024, osl=1024, protocol=None,
        ttft_ms=ttft, tpot_ms=tpot,
    )  # fmt: skip
    return (row, p_ttft, p_tpot)


def test_growth_is_highest_over_lowest_concurrency_per_configuration() -> None:
    bench = _bench()
    scored = [
        # a: TTFT x4 measured (100 -> 400), x2 predicted; TTFT/TPOT x2 and x1
        *(_scored("a", c, 100 * c / 4, 10 * c / 8 if c > 4 else 10, 100, 10) for c in (4, 8, 16)),
        _scored("a", 32, 800, 40, 200, 20),
        _scored("a", 32, 1, 1, 1, 1),  # a second run at a concurrency: the first one counts
        # b: only three concurrencies in range (c256 is out): not counted
        *(_scored("b", c, 50, 5, 50, 5) for c in (4, 8, 16, 256)),
    ]
    figures = bench.growth(scored)["vllm"]
    assert figures["configurations"] == 1
    assert figures["measured TTFT"] == pytest.approx(8.0)
    assert figures["predicted TTFT"] == pytest.approx(2.0)
    assert figures["measured TTFT/TPOT"] == pytest.approx((800 / 40) / (100 / 10))
    assert figures["predicted TTFT/TPOT"] == pytest.approx((200 / 20) / (100 / 10))


def test_the_signed_column_shows_which_way_a_group_leans(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _bench()
    # TTFT predicted 10% and 30% high on one family, 20% low on the other.
    scored = [_scored("a", 4, 100, 10, 110, 10), _scored("a", 8, 100, 10, 130, 10)]
    for row, _, _ in scored:
        row.family, row.gpu, row.regime = "fam-a", "h100_sxm", "c<=16"
    low = _scored("b", 4, 100, 10, 80, 10)
    low[0].family, low[0].gpu, low[0].regime = "fam-b", "h100_sxm", "c<=16"
    bench.print_table("t", [*scored, low], signed=True)
    lines = capsys.readouterr().out.splitlines()
    family = {line.split()[2]: line.split() for line in lines if " family " in line}
    assert family["fam-a"][-1] == "+20%"
    assert family["fam-b"][-1] == "-20%"
    bench.print_table("t", scored)  # unsigned: no column
    assert not any(line.rstrip().endswith("+20%") for line in capsys.readouterr().out.splitlines())
