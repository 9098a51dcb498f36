#!/usr/bin/env bash
# Verifying one tenant's chain of N rows (100,000 by default) with a signed checkpoint of
# every row (a year of one a minute is 525,600), against the same chain with none (the
# baseline, in the same run): peak resident memory and time of `toolgate audit verify`,
# for this tree's release build and, with BEFORE=<release dir>, another's first.
# Then this build's `toolgate audit prune` of the whole chain, to the checkpoint of its
# last row: of the chain signed at every row (the checkpoints below the new base go
# too), against a chain whose one checkpoint is that last row's (the baseline).
#
#   bench/checkpoints.sh
#   BEFORE=/path/to/other/release N=525600 bench/checkpoints.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
release_bins
N=${N:-100000}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cargo build --quiet --release -p toolgate-store --example checkpoints
target/release/examples/checkpoints "$WORK/plain" bench "$N" 0 >/dev/null
KEY=$(target/release/examples/checkpoints "$WORK/signed" bench "$N" 1)
target/release/examples/checkpoints "$WORK/one" bench "$N" "$N" >/dev/null

verify() { # NAME BIN DIR
  /usr/bin/time -o "$WORK/time" -f '%M %e' "$2/toolgate" audit verify --tenant bench \
    --data-dir "$3" --public-key "$KEY" >"$WORK/out" 2>&1 || { cat "$WORK/out"; exit 1; }
  read -r kb secs <"$WORK/time"
  echo "$kb $secs"
}
one() { # NAME BIN
  local base signed
  base=$(verify "$1" "$2" "$WORK/plain"); signed=$(verify "$1" "$2" "$WORK/signed")
  printf '%-7s no checkpoints: %8s kB %6ss   every row signed: %8s kB %6ss   ratio %5.2fx memory, %5.2fx time\n' \
    "$1" ${base} ${signed} "$(echo "${signed% *} / ${base% *}" | bc -l)" "$(echo "${signed#* } / ${base#* }" | bc -l)"
}
if [ -n "${BEFORE:-}" ]; then one before "$BEFORE"; fi
one this "$BIN"

prune() { # DIR: "kB seconds", and what it said it deleted
  /usr/bin/time -o "$WORK/time" -f '%M %e' "$BIN/toolgate" audit prune --tenant bench \
    --before "$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)" --data-dir "$1" --public-key "$KEY" \
    >"$WORK/out" 2>&1 || { cat "$WORK/out"; exit 1; }
  echo "$(cat "$WORK/time")  $(grep -o '[0-9]* rows and [0-9]* checkpoints deleted' "$WORK/out")"
}
echo "prune to the last row: one checkpoint: $(prune "$WORK/one")"
echo "                every row signed:      $(prune "$WORK/signed")"
echo "($N rows; $(nproc) cores; $(date -u +%Y-%m-%d))"
