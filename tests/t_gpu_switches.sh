#!/usr/bin/env bash
# The GPU switches' table (src/backend/cuda/cuda_plan.c) against what is around it: the committed
# docs/gpu-switches.md is what `brisk info --gpu --markdown` prints (`make docs` rewrites it),
# every BRISK_* name the sources read or the scripts set is in the table, the table's own names
# stay under 20 (issue 31), and `brisk info --gpu` refuses a malformed setting, a path's old name
# and a removed setting's, and warns about an unknown name.
set -u
B=${BUILD:-build}/brisk
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }

$B info --gpu --markdown >"$T/page.md"
check "docs/gpu-switches.md is up to date (make docs)" 'diff -u docs/gpu-switches.md "$T/page.md"'

# names read in C (getenv("BRISK_...") and tp.c's lists) or set by the tests' and bench's scripts
{ grep -rhoE '"BRISK_[A-Z0-9_]+"' src tests --include='*.c' --include='*.cu' --include='*.h' \
    --exclude=test_cuda_plan.c | tr -d '"'
  grep -rhoE '\bBRISK_[A-Z0-9_]+=' tests bench dev tools --include='*.sh' --include='*.mjs' --include='*.py' \
    --exclude=t_gpu_switches.sh | tr -d '='
  grep -rhoE 'process\.env\.BRISK_[A-Z0-9_]+' tests | sed 's/process\.env\.//'
} | grep -vE '^BRISK_(OK|ERR_.*|KV_.*|ROPE_.*|H|HAVE_CUDA|.*_)$' | sort -u >"$T/names"
missing=$(while read -r n; do grep -q "\`$n\`" "$T/page.md" || echo "$n"; done <"$T/names")
check "every BRISK_* name in use is in the table${missing:+: missing $missing}" '[ -z "$missing" ]'

BRISK_CUDA_DISABLE=mmvs,nosuchpath $B info --gpu >/dev/null 2>"$T/e"; rc=$?
check "an unknown path in BRISK_CUDA_DISABLE: exit 1" '[ $rc -eq 1 ] && grep -q "nosuchpath" "$T/e"'
BRISK_CUDA_MMVS_PRE=abc $B info --gpu >/dev/null 2>"$T/e"; rc=$?
check "a malformed number: exit 1, says what it takes" '[ $rc -eq 1 ] && grep -q "MMVS_PRE=abc: expects an integer" "$T/e"'
BRISK_CUDA_GRAHPS=0 $B info --gpu >/dev/null 2>"$T/e"; rc=$?
check "an unknown BRISK_* name: warned about once" '[ $rc -eq 0 ] && [ $(grep -c GRAHPS "$T/e") -eq 1 ]'
BRISK_CUDA_DISABLE=graphs,pdl $B info --gpu >"$T/o" 2>&1
check "the list turns paths off" 'grep -qE "^graphs +\*off" "$T/o" && grep -qE "^pdl +\*off" "$T/o" && grep -qE "^mmvs +on" "$T/o"'
BRISK_CUDA_MMVS=0 $B info --gpu >/dev/null 2>"$T/e"; rc=$?
check "a path's old own name: exit 1, names the list entry" '[ $rc -eq 1 ] && grep -q "BRISK_CUDA_DISABLE=mmvs" "$T/e"'
BRISK_CUDA_NQ=3 $B info --gpu >/dev/null 2>"$T/e"; rc=$?
check "a removed setting: exit 1, points at docs/experiments.md" '[ $rc -eq 1 ] && grep -q "experiments.md" "$T/e"'
check "the lists, tunings and debugging names of the table: under 20" '[ $(grep -oE "^\| \`BRISK_CUDA_[A-Z0-9_]+\`" docs/gpu-switches.md | sort -u | wc -l) -lt 20 ]'
exit $fail
