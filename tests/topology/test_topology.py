from __future__ import annotations

from pathlib import Path

import pytest

from inhouse.errors import SpecError
from inhouse.spec.load import load_stack
from inhouse.topology import (
    BadPair,
    check_groups,
    consecutive_groups,
    parse_topology,
    stack_groups,
)

DATA = Path(__file__).resolve().parent / "data"
ROOT = Path(__file__).resolve().parents[2]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_h100_sxm_is_one_nvlink_domain() -> None:
    topo = parse_topology(load("h100-sxm-8gpu.topo"))
    assert topo.num_gpus == 8
    assert topo.link(0, 7) == "NV18" and topo.link(3, 3) == "X"
    assert topo.nvlink_domains() == [(0, 1, 2, 3, 4, 5, 6, 7)]


def test_bridged_pcie_box_has_nvlink_pairs() -> None:
    topo = parse_topology(load("h100-pcie-bridged-8gpu.topo"))
    assert topo.nvlink_domains() == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert topo.link(1, 5) == "SYS"


def test_crm_groups_pass_on_sxm_and_fail_naming_the_pair_on_pcie() -> None:
    groups, notes = stack_groups(load_stack(ROOT / "examples" / "crm-copilot" / "stack.yaml"))
    assert [ids for _, ids in groups] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert notes == []
    assert check_groups(parse_topology(load("h100-sxm-8gpu.topo")), groups) == []
    bad = check_groups(parse_topology(load("l40s-pcie-8gpu.topo")), groups)
    assert bad[0] == BadPair("pool chat replica 0 (GPUs 0,1,2,3)", 0, 1, "PIX")
    assert bad[0].describe() == (
        "pool chat replica 0 (GPUs 0,1,2,3): GPU0-GPU1 joined by PIX, not NVLink"
    )
    assert len(bad) == 12  # every pair of both groups


def test_tp2_on_bridged_pairs_passes_and_tp4_fails() -> None:
    topo = parse_topology(load("h100-pcie-bridged-8gpu.topo"))
    assert check_groups(topo, consecutive_groups(8, 2)) == []
    bad = check_groups(topo, consecutive_groups(8, 4))
    assert [(b.a, b.b, b.link) for b in bad[:2]] == [(0, 2, "NODE"), (0, 3, "NODE")]


def test_stack_without_gpu_ids_is_noted() -> None:
    stack = load_stack(ROOT / "examples" / "code-assistant" / "stack.yaml")
    groups, notes = stack_groups(stack)
    assert groups == []
    assert notes == [
        "pool standard: TP=2 without gpu_ids, not checked",
        "pool long: TP=4 without gpu_ids, not checked",
    ]


def test_one_gpu_box() -> None:
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A\n"
    topo = parse_topology(text)
    assert topo.num_gpus == 1 and topo.nvlink_domains() == [(0,)]
    assert check_groups(topo, consecutive_groups(1, 1)) == []


def test_ansi_escapes_are_ignored() -> None:
    text = load("h100-sxm-8gpu.topo").replace("\tGPU0", "\t\x1b[4mGPU0", 1)
    text = text.replace("GPU Affinity", "GPU Affinity\x1b[0m")
    assert parse_topology(text).num_gpus == 8


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("no matrix here", "no GPU matrix"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV18\n", "lacks rows for GPU1"),
        ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV18\t X \n", "GPU0: row has 1 cells"),
        (
            "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tSYS\t X \n",
            "GPU0-GPU1 is NV18 but GPU1-GPU0 is SYS: the matrix is not symmetric",
        ),
    ],
)
def test_bad_input_names_the_problem(text: str, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_topology(text)


def test_group_outside_the_box_is_an_error() -> None:
    topo = parse_topology(load("h100-sxm-8gpu.topo"))
    with pytest.raises(SpecError, match="GPU index 8 is not in the topology"):
        check_groups(topo, [("g", (6, 7, 8))])


def test_a_tp_larger_than_the_box_is_an_error_not_a_pass() -> None:
    topo = parse_topology(load("h100-sxm-8gpu.topo"))
    with pytest.raises(SpecError, match="--tp 16: a TP group of 16 GPUs does not fit the "
                       "topology's 8 GPU"):  # fmt: skip
        consecutive_groups(topo.num_gpus, 16)
