#!/usr/bin/env bash
# The MCP retention sweep beside the durable audit on SQLite: how long calls wait for
# their audit row while the sweep deletes expired SSE events and sessions
# (crates/toolgate-store/examples/mcp_sweep.rs), at a minute of session-mode calls at
# 1,000 a second (60,000 events) and at ten (600,000: a retention lowered, say).
#
#   bench/mcp_sweep.sh
#   SIZES="60000" C=32 bench/mcp_sweep.sh
#
# Writes bench/results/mcp_sweep.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"60000 600000"}
C=${C:-16}
cargo build --quiet --release -p toolgate-store --example mcp_sweep
BIN=${CARGO_TARGET_DIR:-target}/release/examples/mcp_sweep
mkdir -p bench/results
: > bench/results/mcp_sweep.md
for n in $SIZES; do
  env -u DATABASE_URL "$BIN" "$n" "$C" | tee -a bench/results/mcp_sweep.md
  echo | tee -a bench/results/mcp_sweep.md
done
echo "($(nproc) cores; $(git rev-parse --short HEAD)$(git diff --quiet || echo +changes); $(date -u +%Y-%m-%d))" | tee -a bench/results/mcp_sweep.md
