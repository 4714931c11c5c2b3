#!/usr/bin/env bash
# The documented sequence behind `inhouse report` (docs/report.md), on the simulated stack:
#   plan (with --compare) -> up -> bench chat (with a cold-prefix probe alongside) and utility -> stop ->
#   drill all -> report (internal and public).
# Usage: scripts/reference-run.sh [OUT_DIR] (default out/reference). BENCH_S (default 60) sets
# each bench run's seconds; DRILL_FLAGS (default --quick) the drills'; COMPARE=0 skips
# `plan --compare`. Ports are picked free.
set -euo pipefail
OUT="${1:-out/reference}"
BENCH_S="${BENCH_S:-60}"
DRILL_FLAGS="${DRILL_FLAGS:---quick}"
REQ="${REQ:-examples/crm-copilot/requirements.yaml}"
KEY="reference-run-key"
mkdir -p "$OUT"
free_port() { python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
GW=$(free_port); BASE=$(free_port); METRICS=$(free_port)

echo "== plan"
if [ "${COMPARE:-1}" = "1" ]; then
  inhouse plan "$REQ" --out "$OUT/plan" --compare
else
  inhouse plan "$REQ" --out "$OUT/plan"
fi

echo "== up (gateway :$GW, engines from :$BASE)"
inhouse up "$OUT/plan/stack.yaml" --port "$GW" --engine-base-port "$BASE" --demo-key "$KEY" \
  --metrics-port "$METRICS" --log-dir "$OUT/logs" > "$OUT/up.log" 2>&1 &
UP=$!
trap 'kill -TERM $UP 2>/dev/null; wait $UP 2>/dev/null || true' EXIT
for _ in $(seq 300); do grep -q "is ready" "$OUT/up.log" && break; kill -0 $UP || { cat "$OUT/up.log"; exit 1; }; sleep 1; done
grep -q "is ready" "$OUT/up.log" || { echo "stack did not start" >&2; cat "$OUT/up.log"; exit 1; }
ENGINES=$(grep -o 'metrics http://[^ ]*' "$OUT/up.log" | awk '{print $2}' | tr '\n' ' ')
COMMON=(--target "http://127.0.0.1:$GW" --api-key "$KEY" --duration "$BENCH_S" --no-progress --metrics-url $ENGINES)

echo "== bench chat (a cold-prefix probe alongside), then utility"
python scripts/plan_bench_args.py "$OUT/plan/plan.json" chat > "$OUT/chat.args"
python scripts/plan_bench_args.py "$OUT/plan/plan.json" utility > "$OUT/utility.args"
python scripts/plan_bench_args.py "$OUT/plan/plan.json" chat --cold > "$OUT/chat-cold.args"
# The cold probe runs alongside the chat run: cold-prefix requests at the planned load.
# shellcheck disable=SC2046
inhouse bench "${COMMON[@]}" $(cat "$OUT/chat-cold.args") --out "$OUT/bench/chat-cold" > "$OUT/chat-cold.log" 2>&1 &
COLD=$!
for run in chat utility; do
  # shellcheck disable=SC2046
  inhouse bench "${COMMON[@]}" $(cat "$OUT/$run.args") --out "$OUT/bench/$run" | tail -3
  [ "$run" = chat ] && { wait $COLD || { cat "$OUT/chat-cold.log"; exit 1; }; }
done
kill -TERM $UP; wait $UP || true
trap - EXIT

echo "== drills"
if inhouse drill --help >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  inhouse drill run all --stack "$OUT/plan/stack.yaml" --out "$OUT/drills" $DRILL_FLAGS || echo "some drills failed: the report says which"
  DRILLS=(--drills "$OUT/drills")
else
  echo "inhouse drill is not installed here: the report's drill rows stay unmeasured"
  DRILLS=()
fi

echo "== report"
inhouse report --plan "$OUT/plan" --bench "$OUT/bench" "${DRILLS[@]}" --out "$OUT/report" --pdf
inhouse report --plan "$OUT/plan" --bench "$OUT/bench" "${DRILLS[@]}" --out "$OUT/report-public" --public
