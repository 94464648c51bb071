#!/usr/bin/env bash
# Prompt processing (pp256) of the qwen3-0.6b files in bench/models/, engines alternated in each
# round: a brisk build to compare with (BEFORE=path, optional), this tree's build/brisk and
# llama.cpp's CPU build (build/llamacpp-ref), two rounds of `bench -r 2` each, with the ratios.
#   bash bench/cpu_pp_ab.sh THREADS TYPE...      e.g. BEFORE=/tmp/brisk_old bash bench/cpu_pp_ab.sh 2 q8_0 q4_k_m
# Environment: BUILD (default build), ROUNDS (2), P (256). Run with nothing else on the machine.
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build}; t=${1:?threads}; shift
pp() { "$1" bench -m "$2" -p "${P:-256}" -n 0 -t "$t" -r 2 2>/dev/null | awk -F'|' '/^\| pp/ {split($3, a, " "); print a[1]}'; }
printf '| type | threads | before | now | llama.cpp | now / before | now / llama.cpp |\n|---|---|---|---|---|---|---|\n'
for ty in "$@"; do
  M=bench/models/qwen3-0.6b-$ty.gguf
  [ -f "$M" ] || { echo "no $M (bash bench/cpu_bench.sh makes them)" >&2; continue; }
  for r in $(seq "${ROUNDS:-2}"); do
    b=; [ -n "${BEFORE:-}" ] && b=$(pp "$BEFORE" "$M")
    n=$(pp "$B/brisk" "$M")
    l=$("$B/llamacpp-ref" bench -m "$M" -p "${P:-256}" -n 0 -t "$t" -r 2 2>/dev/null | grep -o '"tps_mean":[0-9.]*' | cut -d: -f2)
    python3 -c "
import sys; ty, t, b, n, l = sys.argv[1:]
r = lambda x, y: '%.2fx' % (float(x) / float(y)) if x and y else ''
print(f'| {ty} | {t} | {b} | {n} | {l} | {r(n, b)} | {r(n, l)} |')" "$ty" "$t" "$b" "$n" "$l"
  done
done
