"""The HTML: self-contained (every image inlined, nothing fetched), well-formed tables, and —
in headless Chromium — every image decoded, the mermaid diagram drawn, a screenshot kept in
build/test-artifacts/report/."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from inhouse.cli.report import DEFAULT_MERMAID
from inhouse.report.build import build_outputs
from inhouse.report.inputs import ReportInputs

ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts" / "report"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


class _Tables(HTMLParser):
    """Cells per row of every table, and every img src."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[int]] = []
        self.images: list[str] = []
        self.svgs = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append(0)
        elif tag in ("td", "th"):
            self.tables[-1][-1] += 1
        elif tag == "img":
            self.images.append(dict(attrs).get("src") or "")
        elif tag == "svg":
            self.svgs += 1


def _parse(page: str) -> _Tables:
    parser = _Tables()
    parser.feed(page)
    return parser


def _mermaid() -> str | None:
    return DEFAULT_MERMAID.read_text() if DEFAULT_MERMAID.exists() else None


def test_self_contained_with_whole_tables(inputs: ReportInputs) -> None:
    page = build_outputs(inputs).files["reference-architecture.html"].decode()
    parsed = _parse(page)
    assert len(parsed.tables) >= 8
    for rows in parsed.tables:
        assert len(set(rows)) == 1, rows  # every row as wide as the header
    assert parsed.images, "the SLO chart and drill timelines are images"
    for src in parsed.images:
        assert src.startswith("data:image/png;base64,"), src[:60]
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r'(src|href)="https?://', page)  # nothing fetched when it opens


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium not installed")
def test_chromium_renders_it(inputs: ReportInputs, tmp_path: Path) -> None:
    mermaid = _mermaid()
    built = build_outputs(inputs, mermaid_js=mermaid)
    page = tmp_path / "reference-architecture.html"
    page.write_bytes(built.files["reference-architecture.html"])
    base = [
        shutil.which("chromium") or "chromium",
        *CHROMIUM_FLAGS,
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=15000",
    ]
    dom = subprocess.run(
        [*base, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    ).stdout
    dom = re.sub(r"<script>.*?</script>", "", dom, flags=re.DOTALL)  # mermaid.js's own text
    parsed = _parse(dom)
    assert all(len(set(rows)) == 1 for rows in parsed.tables)
    assert len(parsed.images) == len(_parse(page.read_text()).images)
    if mermaid is not None:
        assert 'aria-roledescription="flowchart' in dom and parsed.svgs >= 1, "no diagram drawn"
        assert "Syntax error" not in dom
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "reference-architecture.png"
    subprocess.run(
        [*base, "--window-size=1280,9000", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=180,
        check=True,
    )
    assert shot.stat().st_size > 50_000
