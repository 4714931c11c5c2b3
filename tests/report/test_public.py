"""The public version: no tenant or customer name, no price and no exact workload or measured
figure of the internal document; drills verbatim."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from inhouse.cli._report_inputs import load_inputs
from inhouse.cli._report_render import load_render
from inhouse.render import render_stack
from inhouse.report.build import build_outputs
from inhouse.report.document import build_document
from inhouse.report.figures import SANITIZED_KINDS, Figure, Source, format_range
from inhouse.report.inputs import ReportInputs
from inhouse.report.slo import SloRow
from inhouse.spec.load import load_stack

from .conftest import make_inputs
from .report_fixtures import TENANTS

TEXT_FILES = (
    "reference-architecture.md",
    "reference-architecture.html",
    "sizing-memo.md",
    "runbook.md",
    "deployment-playbook.md",
    "bench-report.md",
    "license-memo.md",
    "cost-sheet.csv",
)


def _appears(needle: str, haystack: str) -> bool:
    """`needle` as a whole figure: not inside a longer number."""
    return re.search(rf"(?<![\w.,]){re.escape(needle)}(?![\w]|[.,]\d)", haystack) is not None


@pytest.fixture(scope="module")
def versions(inputs: ReportInputs) -> tuple[dict[str, str], dict[str, str], list[Figure]]:
    """Internal files, public files with every figure placement blanked (the ledger test checks
    those), and the internal figures. What is left of the public text is prose, paths, commands
    and quoted drill text: no exact figure may hide there."""
    internal = build_outputs(inputs, public=False)
    public = build_outputs(inputs, public=True)
    shown = sorted(
        {e.shown for ledger in public.ledgers for e in ledger.entries}, key=len, reverse=True
    )

    def decode(files: dict[str, bytes]) -> dict[str, str]:
        # the page's own CSS ("100%") and script are not the document's text
        strip = lambda t: re.sub(r"<(style|script)>.*?</\1>", "", t, flags=re.DOTALL)  # noqa: E731
        return {k: strip(v.decode()) for k, v in files.items() if k in TEXT_FILES}

    figures = [e.figure for ledger in internal.ledgers for e in ledger.entries]
    blanked = {}
    for name, text in decode(public.files).items():
        for placed in shown:
            text = text.replace(placed, "[figure]")
        blanked[name] = text
    return decode(internal.files), blanked, figures


def test_no_tenant_or_customer_name(
    versions: tuple[dict[str, str], dict[str, str], list[Figure]], inputs: ReportInputs
) -> None:
    internal, public, _ = versions
    names = [*TENANTS, str(inputs.plan.get("name"))]
    assert any(name in internal["reference-architecture.md"] for name in names)
    for file, text in public.items():
        for name in names:
            assert name not in text, (file, name)


def test_no_price_and_no_exact_figure(
    versions: tuple[dict[str, str], dict[str, str], list[Figure]],
) -> None:
    internal, public, figures = versions
    sanitized = [f for f in figures if f.kind in SANITIZED_KINDS and f.value != 0]
    kinds = {f.kind for f in sanitized}
    assert {"measured", "price", "workload"} <= kinds
    leaks = []
    for figure in sanitized:
        text = figure.text()
        if len(re.sub(r"\D", "", text)) < 3:
            # "15", "25 ms" also stand in prose ("15 minutes", an alert's "25 ms"): every
            # placement of these is checked by the public ledger test instead
            continue
        in_some_file = any(_appears(text, body) for body in internal.values())
        assert in_some_file or figure.kind == "price", text  # the internal version has it
        for file, body in public.items():
            if _appears(text, body):
                leaks.append((file, figure.kind, text, figure.source.path))
    assert leaks == []


def test_the_public_ledger_shows_no_exact_figure(inputs: ReportInputs) -> None:
    public = build_outputs(inputs, public=True)
    entries = [e for ledger in public.ledgers for e in ledger.entries]
    sanitized = [e for e in entries if e.figure.kind in SANITIZED_KINDS and e.figure.value]
    assert len(sanitized) > 50
    for entry in sanitized:
        assert not _appears(entry.figure.text(), entry.shown), (entry.shown, entry.figure)


def test_requirement_prices_never_appear(
    versions: tuple[dict[str, str], dict[str, str], list[Figure]], inputs: ReportInputs
) -> None:
    _, public, _ = versions
    for file, body in public.items():
        assert re.search(r"\$\s?\d", body) is None, file  # no dollar figure at all
    hw = inputs.plan.get("requirements", "hardware", 0)
    prices = [f"{hw['capex_usd_per_node']:,.0f}", f"{hw['ops_usd_per_node_year']:,.0f}"]
    prices += [
        f"{api['input_usd_per_million']:.2f}"
        for api in inputs.plan.get("requirements", "api_prices")
    ]
    for body in public.values():
        for price in prices:
            assert not _appears(price, body), price


def test_drills_verbatim(versions: tuple[dict[str, str], dict[str, str], list[Figure]]) -> None:
    _, public, _ = versions
    doc = public["reference-architecture.md"]
    assert "The kill-replica drill's expected outcome, verbatim." in doc
    assert "* a red flag of ecc-dbe" in doc
    assert "observed 1,034 ms" not in doc  # the observed text stays inside


@given(
    st.floats(min_value=1e-4, max_value=1e7, allow_nan=False),
    st.sampled_from(["ms", "pct", "count", "rate", "x", "months"]),
)
def test_a_range_never_spells_the_exact_value(value: float, unit: str) -> None:
    figure = Figure(value, unit, "measured", Source("f", "p"))  # type: ignore[arg-type]
    assume(re.search(r"[1-9]", figure.text()))  # "0" for a tiny value is no exact figure
    shown = figure.public_text()
    assert not _appears(figure.text(), shown), (figure.text(), shown)
    assert shown == format_range(value, figure.unit, figure.text())


def test_the_public_document_is_the_same_document(inputs: ReportInputs) -> None:
    internal = build_document(inputs).markdown
    public = build_document(inputs, public=True).markdown
    heads = lambda t: re.findall(r"^##+ (.+)$", t, flags=re.MULTILINE)  # noqa: E731
    assert len(heads(internal)) == len(heads(public))


def test_a_client_bottleneck_is_named_without_its_figures(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """`inhouse bench` words why the client was a bottleneck with the measured and scheduled
    rates; the public bench report says that it was, not those figures."""
    reasons = ["achieved 15.2 req/s of 16.7 req/s scheduled", "send lag p99 12.3 ms > 10 ms"]
    run = tmp_path / "utility"
    run.mkdir()
    result = json.loads((report_dirs["utility"] / "result.json").read_text())
    result.update(client_bottleneck=True, client={"client_bottleneck": True, "reasons": reasons})
    (run / "result.json").write_text(json.dumps(result))
    (run / "requests.jsonl").write_text((report_dirs["utility"] / "requests.jsonl").read_text())
    inputs = make_inputs({**report_dirs, "utility": run}, drills=False, benches=("utility",))
    internal = build_outputs(inputs).files["bench-report.md"].decode()
    public = build_outputs(inputs, public=True).files["bench-report.md"].decode()
    assert f"**The client was a bottleneck in this run** ({'; '.join(reasons)})" in internal
    assert "**The client was a bottleneck in this run**: its latencies include" in public
    for figure in ("15.2", "16.7", "12.3"):
        assert figure not in public


def test_the_public_cost_sheet_spells_no_workload_or_estimate(inputs: ReportInputs) -> None:
    """The template zeroes the customer's duty cycle and the planner's shares of its traffic as
    it zeroes prices: the public document shows 264 active hours a month as a range, and the
    sheet spelled it (`264.0`, which the text test above reads as another number)."""
    internal = build_outputs(inputs)
    figures = [
        e.figure
        for ledger in internal.ledgers
        for e in ledger.entries
        if e.figure.kind in ("workload", "estimate", "price") and e.figure.value
    ]
    assert any(f.source.path == "requirements.usage.active_hours_per_month" for f in figures)
    sheet = build_outputs(inputs, public=True).files["cost-sheet.csv"].decode()
    leaks = []
    for row in csv.DictReader(io.StringIO(sheet)):
        if row["value"] in ("", "never") or float(row["value"]) == 0:
            continue
        value = float(row["value"])
        leaks += [
            (row["label"], f.source.path)
            for f in figures
            if math.isclose(f.value, value, rel_tol=1e-9)
        ]
        if "share" in row["label"]:
            leaks.append((row["label"], "planner share"))
    assert leaks == []


SOAK_CHECK = {  # as `inhouse drill`'s live soak words it (drill/drills/soak.py)
    "name": "p95 TTFT stable",
    "expected": "the last third's p95 TTFT (windows 15-20, pooled) at most 10% above the first "
    "third's (windows 2-7; window 1 is warm-up) with 98% confidence (block bootstrap lower bound "
    "of the ratio at most 1.10); a request streamed in every window",
    "observed": "first third 423 ms (1,234 requests), last third 452 ms (1,198 requests): "
    "ratio 1.07 (lower bound 0.98)",
    "ok": True,
}
MEMORY_CHECK = {  # the live soak's, its processes named after a customer's replicas
    "name": "memory flat",
    "expected": "RSS grows at most 10% + 64 MiB (second window to last)",
    "observed": "acme-bank-chat-0 812 -> 820 MiB",
    "ok": True,
}


def test_no_path_as_given_and_no_figure_of_a_drill_check(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """Paths as given name the customer (`/data/acme-bank/...`), and the soak check's observed
    text quotes its measured p95s: the public version cites every file by a neutral name and
    keeps no check's expected or observed text."""
    base = tmp_path / "data" / "acme-bank"
    for name in ("plan", "drills"):
        shutil.copytree(report_dirs[name], base / name)
    for name in ("chat", "cold", "utility"):
        shutil.copytree(report_dirs[name], base / "bench" / f"acme-bank-{name}")
    soak = base / "drills" / "soak" / "evidence.json"
    evidence = json.loads(soak.read_text())
    evidence["checks"] += [SOAK_CHECK, MEMORY_CHECK]
    evidence["stack"] = str(base / "plan" / "stack.yaml")
    soak.write_text(json.dumps(evidence))
    (base / "drills" / "soak" / "report.md").unlink()  # the expected outcome from the checks
    render = base / "deploy"
    for relative, text in render_stack(load_stack(base / "plan" / "stack.yaml")).files.items():
        (render / relative).parent.mkdir(parents=True, exist_ok=True)
        (render / relative).write_text(text)
    inputs = load_inputs(base / "plan", [base / "bench"], base / "drills", load_render(render))
    internal = build_outputs(inputs).files
    public = build_outputs(inputs, public=True).files
    figures = ("423 ms", "452 ms", "1,234 requests", "1,198 requests", "812 -> 820")
    texts = {name: data.decode() for name, data in internal.items() if name in TEXT_FILES}
    assert all(any(f in t for t in texts.values()) for f in figures)
    assert "acme-bank" in texts["reference-architecture.md"]
    for name, data in public.items():
        if name not in TEXT_FILES:
            continue
        text = data.decode()
        assert "acme-bank" not in text, name
        assert str(tmp_path) not in text, name
        for figure in figures:
            assert figure not in text, (name, figure)
    doc = public["reference-architecture.md"].decode()
    assert "`bench/chat/requests.jsonl`" in doc and "`drills/kill-replica/evidence.json`" in doc
    assert "* p95 TTFT stable\n" in doc  # named, without its expected text


def test_an_infeasible_alternative_s_estimates_stay_internal(inputs: ReportInputs) -> None:
    """The planner's reason quotes its simulation ("simulates at 65 ms against the 60 ms
    target"): an estimate, which the public version shows as a range or not at all. Section 3
    and the comparison printed the reason whole."""
    from dataclasses import replace

    from inhouse.report.inputs import Doc

    why = (
        "x: no plan meets the requirements.\n  binding constraint: chat p95 itl — the best "
        "analytic plan (chat: 2x M fp8 TP4, budget 1024) simulates at 65.4 ms against the 60 "
        "ms target"
    )
    alt = {"axis": "engine", "label": "sglang instead of vllm", "feasible": False}
    compare = {"chosen": {"usd_per_hour": 1.0, "pools": []}, "alternatives": [alt]}
    with_why = replace(inputs, compare=Doc("plan/compare.json", {**compare}))
    alt["why_infeasible"] = why
    internal = build_document(with_why).markdown
    public = build_document(with_why, public=True).markdown
    assert "simulates at 65.4 ms" in internal
    assert "65.4" not in public and "budget 1024" not in public
    assert public.count("binding constraint: chat p95 itl") == 3  # section 3, table, trade


def test_a_row_too_thin_for_a_p95_names_its_count_inside_only(
    report_dirs: dict[str, Path],
) -> None:
    """ "7 successful requests with cached_tokens == 0, fewer than the 20 a p95 needs": the
    count of the customer's cold requests stood in the public version as it was."""
    inputs = make_inputs(report_dirs, drills=False, benches=("chat",))
    internal = build_document(inputs).markdown
    public = build_document(inputs, public=True).markdown
    thin = (
        "fewer than the 20 successful requests with cached_tokens == 0, after the warm-up, "
        "a p95 needs"
    )
    count = _rows_by_name(inputs)["chat p95 TTFT cold"].measured.samples
    assert count  # the chat run's own cold requests after its warm-up
    assert f"not measured: {thin} ({count} here); the cold-prefix probe" in internal
    assert f"not measured: {thin}; the cold-prefix probe" in public
    assert f"{count} here" not in public


def _rows_by_name(inputs: ReportInputs) -> dict[str, SloRow]:
    from inhouse.report.rendered import read_alerts
    from inhouse.report.slo import slo_rows

    return {f"{r.workload} {r.metric}": r for r in slo_rows(inputs, read_alerts(inputs.render))}
