#!/usr/bin/env bash
# Fetches mermaid.min.js (the one diagram in `inhouse report`'s HTML) from the npm registry with
# npm's own integrity check, into ~/.cache/inhouse/mermaid/ (or $1), where `inhouse report`
# finds it. Build/test time only: the report inlines the script, nothing is fetched when the
# page opens. Idempotent; exits 0 without npm (the HTML then shows the diagram's source).
set -euo pipefail
VERSION="${MERMAID_VERSION:-12.3.0}"
DEST="${1:-$HOME/.cache/inhouse/mermaid}"
if [ -s "$DEST/mermaid.min.js" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  echo "mermaid $VERSION: already in $DEST"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "mermaid: npm not installed; the report's HTML will show the diagram's source" >&2
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack "mermaid@$VERSION" --silent >/dev/null)
tar -xzf "$work/mermaid-$VERSION.tgz" -C "$work" package/dist/mermaid.min.js package/LICENSE
mkdir -p "$DEST"
cp "$work/package/dist/mermaid.min.js" "$work/package/LICENSE" "$DEST/"
echo "$VERSION" > "$DEST/VERSION"
echo "mermaid $VERSION: $DEST/mermaid.min.js"
