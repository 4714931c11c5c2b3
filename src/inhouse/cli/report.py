"""The reference-architecture document and its six deliverables, from measured runs.

    inhouse report --plan PLAN_DIR --bench bench/chat --bench bench/utility \\
        --drills drills/ --out report/
    inhouse report --plan PLAN_DIR ... --out report-public/ --public

Writes `reference-architecture.md` and a self-contained `.html`, `sizing-memo.md`, `runbook.md`,
`deployment-playbook.md`, `bench-report.md`, `cost-sheet.xlsx` (+ `.csv`) and `license-memo.md`.
Without `--render`, the plan's stack is rendered into OUT/deploy/ first and read from there.
See docs/report.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from inhouse.cli._report_inputs import load_inputs
from inhouse.cli._report_render import load_render
from inhouse.errors import SpecError
from inhouse.render import render_stack
from inhouse.report.build import DOCUMENT, build_outputs
from inhouse.report.inputs import RenderOutput
from inhouse.spec.load import load_stack
from inhouse.spec.stack import StackSpec

COMMAND = "report"
HELP = "the reference-architecture document and its six deliverables, from plan, bench and drills"
MERMAID_ENV = "INHOUSE_MERMAID_JS"
DEFAULT_MERMAID = Path.home() / ".cache" / "inhouse" / "mermaid" / "mermaid.min.js"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plan", type=Path, required=True, help="the `inhouse plan --out` directory"
    )
    parser.add_argument(
        "--bench", type=Path, action="append", default=[], help="a bench --out directory (repeat)"
    )
    parser.add_argument("--drills", type=Path, help="the `inhouse drill run --out` directory")
    parser.add_argument(
        "--render",
        type=Path,
        help="the `inhouse render --out` directory (default: render into OUT/deploy)",
    )
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--public", action="store_true", help="the sanitized public version")
    parser.add_argument(
        "--mermaid-js",
        type=Path,
        help=f"local mermaid.min.js to inline (env {MERMAID_ENV}; default {DEFAULT_MERMAID})",
    )
    parser.add_argument(
        "--pdf",
        action="store_true",
        help="also print the HTML to PDF with headless Chromium, if installed",
    )


def _render(stack: StackSpec, out: Path, *, public: bool) -> tuple[RenderOutput, dict[str, str]]:
    """The plan's stack rendered, and what to write of it: into OUT/deploy (written with the
    rest, once nothing is refused). The public version writes none of it: the manifests, rules
    and dashboards name the customer and the tenants, and OUT is what gets published."""
    rendered = render_stack(stack)
    if public:
        return RenderOutput("deploy", rendered.files), {}
    deploy = {f"deploy/{relative}": text for relative, text in rendered.files.items()}
    return RenderOutput(str(out / "deploy"), rendered.files), deploy


def _mermaid(args: argparse.Namespace) -> str | None:
    path = args.mermaid_js or (
        Path(os.environ[MERMAID_ENV]) if os.environ.get(MERMAID_ENV) else DEFAULT_MERMAID
    )
    if not path.exists():
        if args.mermaid_js:
            raise SpecError(
                f"--mermaid-js {path}: no such file (scripts/fetch-mermaid.sh writes one)"
            )
        return None
    return path.read_text(encoding="utf-8")


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def print_pdf(html: Path, pdf: Path) -> str | None:
    """Chromium's own print to PDF; returns why not, or None when written."""
    browser = chromium()
    if browser is None:
        return "no Chromium installed (Debian package chromium)"
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={pdf.parent / '.chromium'}",
        "--virtual-time-budget=10000",
        f"--print-to-pdf={pdf}",
        "--no-pdf-header-footer",
        html.resolve().as_uri(),
    ]
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    except (subprocess.SubprocessError, OSError) as exc:
        return f"chromium failed: {exc}"
    finally:
        shutil.rmtree(pdf.parent / ".chromium", ignore_errors=True)
    return None


def run(args: argparse.Namespace) -> int:
    """Every input read and checked and every file built before OUT is touched: a refused run
    leaves no directory, empty or half-written, behind."""
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise SpecError(f"--out {out}: not a directory (a file is there); name a directory")
    stack_file = args.plan / "stack.yaml"
    if not stack_file.is_file():
        raise SpecError(
            f"{stack_file} not found; run `inhouse plan REQUIREMENTS --out {args.plan}` first"
        )
    stack = load_stack(stack_file)
    deploy: dict[str, str] = {}
    if args.render:
        render = load_render(args.render)
    else:
        render, deploy = _render(stack, out, public=args.public)
    inputs = load_inputs(args.plan, args.bench, args.drills, render)
    mermaid_js = _mermaid(args)
    built = build_outputs(inputs, public=args.public, stack=stack, mermaid_js=mermaid_js)
    files = {**{k: v.encode() for k, v in deploy.items()}, **built.files}
    for relative, data in files.items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if args.pdf:
        why = print_pdf(
            out / DOCUMENT.replace(".md", ".html"), out / DOCUMENT.replace(".md", ".pdf")
        )
        if why:
            built.warnings.append(f"no PDF: {why}")
    for warning in built.warnings:
        print(f"note: {warning}", file=sys.stderr)
    version = "public" if args.public else "internal"
    print(f"{version} reference architecture and six deliverables -> {out}/{DOCUMENT}")
    return 0
