#!/usr/bin/env bash
# Runs every test program and test script; prints "N passed, N failed".
# Each test program prints its own cases; the totals here add them up.
set -u
BUILD=${BUILD:-build}
export SHARED=${SHARED:-$(cd .. && pwd)/shared} BUILD LLAMACPP_LIBDIR=${LLAMACPP_LIBDIR:-} SAN=${SAN:-0}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
pass=0; fail=0; failed=()
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  out=$("$t" 2>&1); rc=$?
  p=$(printf '%s\n' "$out" | awk '/^[0-9]+ passed, [0-9]+ failed$/{print $1}' | tail -n1)
  f=$(printf '%s\n' "$out" | awk '/^[0-9]+ passed, [0-9]+ failed$/{print $3}' | tail -n1)
  p=${p:-0}; f=${f:-0}
  if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
  pass=$((pass + p)); fail=$((fail + f))
  if [ $rc -ne 0 ]; then failed+=("$t"); printf '%s\n' "$out" | grep -v '^ok ' | tail -n 40; fi
  echo "$(basename "$t"): $p passed, $f failed"
done
for s in tests/t_*.sh; do
  [ -f "$s" ] || continue
  out=$(bash "$s" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "ok   $(basename "$s")"
  else fail=$((fail+1)); failed+=("$s"); printf '%s\n' "$out" | tail -n 30; echo "FAIL $(basename "$s")"; fi
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
