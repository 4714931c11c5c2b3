"""The document as one self-contained HTML file: markdown rendered by markdown-it (CommonMark
and tables), every image inlined as a data URI, the mermaid diagram drawn by mermaid.js inlined
from a local copy (nothing is fetched when the page opens).

Without a local mermaid.js the diagram stays as its source text in a `<pre>`, with a note that
says how to get the script (`scripts/fetch-mermaid.sh`): never a broken image.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping

from markdown_it import MarkdownIt

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       line-height: 1.45; color: #1b1b1b; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.88em; }
th, td { border: 1px solid #c8c8c8; padding: 0.3em 0.55em; text-align: left; vertical-align: top; }
th { background: #f0f2f5; }
code { background: #f4f4f4; padding: 0 0.2em; font-size: 0.92em; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; }
pre.mermaid { background: #fff; text-align: center; }
img { max-width: 100%; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
"""
_MERMAID_BLOCK = re.compile(r'<pre><code class="language-mermaid">(.*?)</code></pre>', re.DOTALL)
_IMG = re.compile(r'<img src="([^"]+)"')


def _inline_images(body: str, images: Mapping[str, bytes]) -> tuple[str, list[str]]:
    missing: list[str] = []

    def swap(match: re.Match[str]) -> str:
        src = html.unescape(match.group(1))
        data = images.get(src)
        if data is None:
            missing.append(src)
            return match.group(0)
        kind = "svg+xml" if src.endswith(".svg") else "png"
        return f'<img src="data:image/{kind};base64,{base64.b64encode(data).decode()}"'

    return _IMG.sub(swap, body), missing


def render_html(
    markdown: str, title: str, images: Mapping[str, bytes], mermaid_js: str | None
) -> tuple[str, list[str]]:
    """The page, and the image references it could not inline (empty when all were found)."""
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    body, missing = _inline_images(body, images)
    if mermaid_js:
        body = _MERMAID_BLOCK.sub(lambda m: f'<pre class="mermaid">{m.group(1)}</pre>', body)
        safe_js = mermaid_js.replace("</script", "<\\/script")
        script = (
            f"<script>{safe_js}</script>\n"
            "<script>mermaid.initialize({startOnLoad: true, securityLevel: 'strict'});</script>"
        )
    else:
        body = _MERMAID_BLOCK.sub(
            lambda m: (
                f"<pre>{m.group(1)}</pre><p><em>The diagram's mermaid source: no local mermaid.js "
                "was given (scripts/fetch-mermaid.sh fetches it from the npm registry).</em></p>"
            ),
            body,
        )
        script = ""
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
        f"{body}\n{script}\n</body></html>\n"
    )
    return page, missing
