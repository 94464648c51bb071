#!/usr/bin/env bash
# Builds and runs bench/grammar_bench.c (grammar token masks, us/token) against build/libbrisk.a.
#   bash bench/grammar_bench.sh [VOCAB.gguf] [TOKENS]
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
make -s "$BUILD/libbrisk.a"
LIBS=$(make -s -p -n 2>/dev/null | sed -n 's/^LDLIBS := //p' | head -1)
cc -std=c11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -Iinclude -Isrc -o "$BUILD/grammar_bench" \
  bench/grammar_bench.c "$BUILD/libbrisk.a" $LIBS
exec "$BUILD/grammar_bench" "$@"
