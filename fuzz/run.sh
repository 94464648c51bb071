#!/usr/bin/env bash
# Builds every fuzz/fuzz_<name>.c as a libFuzzer target (clang, ASan + UBSan)
# linked against the library sources compiled with clang, and runs each for
# FUZZ_SECONDS (default 600) on a scratch copy of fuzz/corpus/<name>/.
#   bash fuzz/run.sh              every target
#   bash fuzz/run.sh gguf ...     only these (names without the fuzz_ prefix)
# Environment: FUZZ_SECONDS, FUZZ_CC (clang), FUZZ_JOBS (parallel compiles),
# FUZZ_ARGS (extra libFuzzer flags). Crashes land in build-fuzz/artifacts/<name>/.
# Exit status: 0 iff every target built and ran without a finding.
set -u
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-600}
CC=${FUZZ_CC:-clang}
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
OUT=build-fuzz
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
CFLAGS="-std=c11 -g -O1 -fno-omit-frame-pointer $SAN -fsanitize=fuzzer-no-link -D_GNU_SOURCE -pthread -Iinclude -Isrc"
LDLIBS="-lpcre2-8 -lcjson -lm -lpthread -ldl"

if [ $# -gt 0 ]; then names=("$@"); else
  names=(); for f in fuzz/fuzz_*.c; do [ -f "$f" ] && names+=("$(basename "$f" .c | sed 's/^fuzz_//')"); done
fi
[ ${#names[@]} -gt 0 ] || { echo "fuzz: no fuzz/fuzz_*.c targets"; exit 1; }

# The library, once for all targets. A source that does not compile (work in
# progress elsewhere) is left out with a warning; the link says if it was needed.
rm -rf "$OUT/obj"; mkdir -p "$OUT/obj"
compile() {
  local src=$1 obj=$OUT/obj/${1%.c}.o isa=
  case $src in *_avx2.c) isa="-mavx2 -mfma -mf16c";;
    *_avx512.c) isa="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c";; esac
  mkdir -p "$(dirname "$obj")"
  # shellcheck disable=SC2086
  $CC $CFLAGS $isa -c "$src" -o "$obj" 2>"$obj.log" ||
    { echo "fuzz: warning: $src does not compile, left out:"; head -n 5 "$obj.log"; rm -f "$obj"; }
}
export -f compile; export CC CFLAGS OUT
find src -name '*.c' -not -path 'src/cli/*' | sort | xargs -P "$JOBS" -I{} bash -c 'compile {}'
rm -f "$OUT/libbrisk-fuzz.a"
find "$OUT/obj" -name '*.o' | sort | xargs ar rcs "$OUT/libbrisk-fuzz.a"

rc=0
for name in "${names[@]}"; do
  src=fuzz/fuzz_$name.c bin=$OUT/fuzz_$name
  [ -f "$src" ] || { echo "fuzz: no $src"; rc=1; continue; }
  # shellcheck disable=SC2086
  if ! $CC $CFLAGS -fsanitize=fuzzer "$src" "$OUT/libbrisk-fuzz.a" $LDLIBS -o "$bin"; then
    echo "fuzz: $name: build failed"; rc=1; continue
  fi
  run=fuzz/corpus-run/$name art=$OUT/artifacts/$name/
  rm -rf "$run"; mkdir -p "$run" "$art"
  [ -d "fuzz/corpus/$name" ] && cp -r "fuzz/corpus/$name/." "$run/"
  echo "fuzz: $name for ${FUZZ_SECONDS}s (corpus $(ls "$run" | wc -l) files)"
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -artifact_prefix="$art" ${FUZZ_ARGS:-} "$run" \
    >"$OUT/$name.log" 2>&1
  st=$?
  execs=$(awk '/stat::number_of_executed_units/{print $2}' "$OUT/$name.log")
  if [ $st -ne 0 ]; then
    rc=1; tail -n 60 "$OUT/$name.log"
    echo "fuzz: $name: FAILED after ${execs:-?} execs (artifacts in $art, log $OUT/$name.log)"
  else
    echo "fuzz: $name: ok, ${execs:-?} execs in ${FUZZ_SECONDS}s, corpus $(ls "$run" | wc -l) files"
  fi
done
exit $rc
