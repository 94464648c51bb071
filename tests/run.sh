#!/usr/bin/env bash
# Runs every test program and test script; prints "N passed, N failed, N skipped"
# and lists each skip with its reason. Each test program prints its own cases
# (tests/test.h); the totals here add them up. A script passes with exit 0,
# fails with anything but 0 or 77, and is skipped as a whole with exit 77; any
# line of its output "skip WHAT: WHY" is a skip of one of its checks.
# A skip whose reason ends in "[required]" lacks something `make test` must
# have (../shared, the llama.cpp reference, the npm clients): the suite fails.
set -u
BUILD=${BUILD:-build}
export SHARED=${SHARED:-$(cd .. && pwd)/shared} BUILD LLAMACPP_LIBDIR=${LLAMACPP_LIBDIR:-} SAN=${SAN:-0}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# No test may hang the suite: each runs under timeout(1), its whole process group killed past the
# limit (a server a script started goes too), with stdin from /dev/null; timeout's own SIGCHLD
# handler also gives each test that signal at its default (a SIGCHLD ignored by whoever started
# the suite makes script(1) and other waiters hang: .ci/run).
LIMIT=${TEST_LIMIT:-900}
run_one() { timeout -k 10 "$LIMIT" "$@" </dev/null 2>&1; }
timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }
pass=0; fail=0; skip=0; failed=(); skips=()
# the summary's field n (1 passed, 3 failed, 5 skipped) of a test program's output
field() { printf '%s\n' "$1" | awk -v n="$2" '/^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$/{v=$n} END{print v+0}'; }
# the "skip WHAT: WHY" lines of an output, WHAT prefixed with the program's name
skip_lines() { printf '%s\n' "$2" | sed -n "s/^skip \([^:]*\): /skip $1 \1: /p"; }
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  t0=$SECONDS; out=$(run_one "$t"); rc=$?; dt=$((SECONDS - t0))
  timed_out $rc && out+=$'\n'"TIMEOUT $(basename "$t"): still running after $LIMIT s, killed"
  p=$(field "$out" 1); f=$(field "$out" 3); s=$(field "$out" 5)
  if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  while IFS= read -r l; do [ -n "$l" ] && skips+=("$l"); done < <(skip_lines "$(basename "$t")" "$out")
  if [ $rc -ne 0 ]; then failed+=("$t"); printf '%s\n' "$out" | grep -v '^ok ' | tail -n 40; fi
  echo "$(basename "$t"): $p passed, $f failed, $s skipped ($dt s)"
done
for sc in tests/t_*.sh; do
  [ -f "$sc" ] || continue
  name=$(basename "$sc")
  t0=$SECONDS; out=$(run_one bash "$sc"); rc=$?; dt=$((SECONDS - t0))
  timed_out $rc && out+=$'\n'"TIMEOUT $name: still running after $LIMIT s, killed"
  mine=()
  while IFS= read -r l; do [ -n "$l" ] && mine+=("$l"); done < <(skip_lines "$name" "$out")
  if [ $rc -eq 77 ]; then
    skip=$((skip + 1))
    [ ${#mine[@]} -gt 0 ] || mine=("skip $name: (no reason given: the script must print a skip line)")
    echo "skip $name ($dt s)"
  elif [ $rc -eq 0 ]; then pass=$((pass + 1)); skip=$((skip + ${#mine[@]})); echo "ok   $name ($dt s)"
  else # the lines that say what failed: a long script's passing cases would push them out of a plain tail
    fail=$((fail + 1)); failed+=("$sc")
    printf '%s\n' "$out" | grep -Ev '^(ok |[0-9]+ passed, 0 failed)' | tail -n 40; echo "FAIL $name ($dt s)"; fi
  [ ${#mine[@]} -gt 0 ] && skips+=("${mine[@]}")
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
required=0
if [ ${#skips[@]} -gt 0 ]; then
  echo "skipped:"
  for l in "${skips[@]}"; do
    echo "  ${l#skip }"
    case $l in *"[required]") required=$((required + 1)) ;; esac
  done
fi
echo "$pass passed, $fail failed, $skip skipped"
if [ $required -gt 0 ]; then
  echo "$required skipped for want of what make test must have ([required]: ../shared, make deps): failing"
  exit 1
fi
[ $fail -eq 0 ]
