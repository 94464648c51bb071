#!/usr/bin/env bash
# The `brisk` command end to end: output, exit codes and one-line errors.
# Under SAN=1 the same runs go through AddressSanitizer (leaks included).
set -u
B=${BUILD:-build}/brisk
S=${SHARED:-../shared}/data
M=$S/stories260K/stories260K.gguf
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }

$B >/dev/null 2>&1; check "no args exits 2" '[ $? -eq 2 ]'
for v in --version version; do
  $B $v >"$T/o" 2>"$T/e"; rc=$?
  # a CUDA build adds its runtime and driver, then a line per GPU: name and compute capability
  ndev=$(sed -n 's/^CUDA: compiled in, runtime [0-9]*\.[0-9]*, driver [0-9]*\.[0-9]*, \([0-9]*\) devices\{0,1\}$/\1/p' "$T/o")
  check "$v: version, commit and CUDA lines (and one per GPU), exit 0" '[ $rc -eq 0 ] && [ ! -s "$T/e" ] &&
    grep -q "^brisk [0-9]*\.[0-9]*\.[0-9]*$" "$T/o" && grep -q "^commit: [0-9a-f]*\|^commit: unknown$" "$T/o" &&
    { { grep -q "^CUDA: not compiled in$" "$T/o" && [ $(wc -l <"$T/o") -eq 3 ]; } ||
      { [ -n "$ndev" ] && [ $(wc -l <"$T/o") -eq $((3 + ndev)) ] &&
        [ $(grep -c "^GPU [0-9]*: .*, compute capability [0-9]*\.[0-9]*$" "$T/o") -eq "$ndev" ]; }; }'
done
$B run -p hi >/dev/null 2>"$T/e"; rc=$?
check "run without -m: exit 2, one line" '[ $rc -eq 2 ] && [ $(wc -l <"$T/e") -eq 1 ] && grep -q "^brisk: " "$T/e"'
$B run -m /nonexistent.gguf -p hi >/dev/null 2>"$T/e"; rc=$?
check "missing file: exit 1, one line" '[ $rc -eq 1 ] && [ $(wc -l <"$T/e") -eq 1 ] && grep -q "nonexistent.gguf" "$T/e"'
head -c 5000 "$M" >"$T/trunc.gguf"
$B run -m "$T/trunc.gguf" -p hi >/dev/null 2>"$T/e"; rc=$?
check "truncated file: exit 1, one line" '[ $rc -eq 1 ] && [ $(wc -l <"$T/e") -eq 1 ]'
$B run -m "$M" -p hi -n abc >/dev/null 2>"$T/e"; rc=$?
check "bad number: exit 2" '[ $rc -eq 2 ] && grep -q "expected an integer" "$T/e"'
$B run -m "$M" -p hi --bogus >/dev/null 2>"$T/e"; rc=$?
check "unknown flag: exit 2" '[ $rc -eq 2 ]'

$B run -m "$M" -p "Once upon a time" -n 24 --temp 0 >"$T/o" 2>"$T/e"; rc=$?
check "greedy run prints the continuation" '[ $rc -eq 0 ] && grep -q "^, there was a little girl named Lily" "$T/o"'
check "timings on stderr" 'grep -q "generation: 24 tokens" "$T/e" && grep -q "prompt: 5 tokens" "$T/e"'
$B run -m "$M" -p "Once upon a time" -n 24 --temp 0 -b 2 -ub 64 >"$T/o" 2>/dev/null; rc=$?
check "-b 2 -ub 64 (passes of at most -b): the same continuation" '[ $rc -eq 0 ] && grep -q "^, there was a little girl named Lily" "$T/o"'
# llama.cpp's CPU placement flags: threads pinned (strict: one CPU each), the same text; bad values refused
$B run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 2 -Cr 0-0 -C 0x1 --cpu-strict 1 --poll 0 --prio 0 >"$T/o" 2>"$T/e"; rc=$?
check "-C/-Cr/--cpu-strict/--poll/--prio: the same continuation" '[ $rc -eq 0 ] && grep -q "^, there was a little girl named Lily" "$T/o"'
$B run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 2 --numa distribute >"$T/o" 2>"$T/e"; rc=$?
check "--numa distribute: the same continuation" '[ $rc -eq 0 ] && grep -q "^, there was a little girl named Lily" "$T/o"'
$B run -m "$M" -p hi -n 1 --numa isolate -C 1 >/dev/null 2>"$T/e"; rc=$?
check "--numa with -C: exit 1, says why" '[ $rc -eq 1 ] && grep -q "not both" "$T/e"'
for bad in "-C xyz" "-C 0" "-Cr 5-2" "-Cr 7" "--poll 101" "--prio 4" "--cpu-strict 2" "-Cb 1" "--poll-batch 1" "--numa x"; do
  $B run -m "$M" -p hi -n 1 $bad >/dev/null 2>"$T/e"; rc=$?
  check "$bad: exit 2, one line" '[ $rc -eq 2 ] && [ $(wc -l <"$T/e") -eq 1 ]'
done
$B run -m "$M" -p hi -n 1 -C "0x8$(printf '0%.0s' $(seq 255))" >/dev/null 2>"$T/e"; rc=$? # CPU 1023
check "-C of a CPU this machine lacks: exit 1, says so" '[ $rc -eq 1 ] && grep -q "names no CPU this process may run on" "$T/e"'
$B run -m "$M" -p "Once upon a time" -n 32 --seed 7 >"$T/o1" 2>/dev/null
$B run -m "$M" -p "Once upon a time" -n 32 --seed 7 >"$T/o2" 2>/dev/null
check "seeded sampling is reproducible" 'cmp -s "$T/o1" "$T/o2" && [ -s "$T/o1" ]'
python3 -c 'print("Once upon a time " * 400)' >"$T/long.txt"
$B run -m "$M" -f "$T/long.txt" -c 256 >/dev/null 2>"$T/e"; rc=$?
check "oversized prompt: clear error" '[ $rc -eq 1 ] && grep -q "more than the context size" "$T/e"'

# llama.cpp's RoPE flags (their numerics against llama.cpp: test_conformance's yarn_flags):
# they reach the model, --rope-scale N is --rope-freq-scale 1/N, none on an unscaled model
# changes nothing, and a bad value is one line with exit 2
greedy() { $B run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 2 "$@" 2>/dev/null; }
greedy >"$T/r0"
greedy --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 16 >"$T/r1"
greedy --rope-scaling yarn --rope-freq-scale 0.25 --yarn-orig-ctx 16 >"$T/r2"
greedy --rope-scaling none >"$T/r3"
check "rope flags: yarn changes the continuation, --rope-scale 4 = --rope-freq-scale 0.25, none = default" \
  '[ -s "$T/r1" ] && ! cmp -s "$T/r0" "$T/r1" && cmp -s "$T/r1" "$T/r2" && cmp -s "$T/r0" "$T/r3"'
for bad in "--rope-scale 0" "--rope-scaling ntk" "--yarn-ext-factor 2" "--yarn-beta-fast -1" "--rope-freq-base nan"; do
  $B run -m "$M" -p hi $bad >/dev/null 2>"$T/e"; rc=$?
  check "bad $bad: exit 2, one line" '[ $rc -eq 2 ] && [ $(wc -l <"$T/e") -eq 1 ] && grep -q "^brisk: ${bad%% *}" "$T/e"'
done

# llama.cpp's habitual flags: -fa on|auto (and bare), -ub N and --jinja accepted (same text), --mlock locks
# and runs (a warning, not a failure, under a low `ulimit -l`), -fa off refused in one line
greedy -fa on -ub 64 --jinja >"$T/l1"; greedy -fa >"$T/l2"; greedy --flash-attn auto --ubatch-size 512 >"$T/l3"
greedy --mlock >"$T/l4"; rc=$?
check "-fa on|auto, -ub N, --jinja, --mlock: accepted, the default's text" \
  '[ $rc -eq 0 ] && [ -s "$T/r0" ] && cmp -s "$T/r0" "$T/l1" && cmp -s "$T/r0" "$T/l2" && cmp -s "$T/r0" "$T/l3" && cmp -s "$T/r0" "$T/l4"'
if [ "$(id -u)" != 0 ]; then
  (ulimit -l 0; $B run -m "$M" -p hi -n 2 -t 1 --mlock >/dev/null 2>"$T/e"); rc=$?
  check "--mlock over ulimit -l 0: a warning, runs" '[ $rc -eq 0 ] && grep -q "^brisk: warning: --mlock: " "$T/e"'
fi
for c in "run -p hi" "bench -p 8 -n 2 -r 1" "perplexity -f $T/long.txt" "serve"; do
  $B $c -m "$M" -t 1 -fa off >/dev/null 2>"$T/e"; rc=$?
  check "${c%% *} -fa off: exit 2, one line saying why" '[ $rc -eq 2 ] && [ $(wc -l <"$T/e") -eq 1 ] && grep -q "^brisk: -fa off: brisk.s attention is always fused" "$T/e"'
  $B ${c%% *} --help >"$T/o"
  check "${c%% *} --help lists the llama.cpp flags" 'grep -q -- "--mlock" "$T/o" && grep -q -- "-fa, --flash-attn" "$T/o" && grep -q -- "-ub, --ubatch-size" "$T/o" && grep -q -- "--jinja" "$T/o"'
done
$B run -m "$M" -p hi -ub 0 >/dev/null 2>"$T/e"; rc=$?
check "-ub 0: exit 2" '[ $rc -eq 2 ] && grep -q "^brisk: -ub: expected an integer" "$T/e"'

printf "Once upon a time" | $B tokenize -m "$M" >"$T/o"
check "tokenize" '[ "$(cat "$T/o")" = "403 407 261 378" ]'
printf "Once upon a time" | $B tokenize -m "$M" --add-special >"$T/o"
check "tokenize --add-special adds BOS" '[ "$(cat "$T/o")" = "1 403 407 261 378" ]'
printf "Hello world" | $B tokenize -m "$S/llama.cpp-vocab/ggml-vocab-gpt-2.gguf" >"$T/o"; rc=$?
check "tokenize on a vocab-only gguf" '[ $rc -eq 0 ] && [ "$(cat "$T/o")" = "15496 995" ]'

$B info "$M" >"$T/o"; rc=$?
check "info" '[ $rc -eq 0 ] && grep -q "llama.embedding_length" "$T/o" && grep -q "blk.4.ffn_up.weight" "$T/o"'
$B info -m "$M" >"$T/o2"; rc=$?
check "info -m FILE: as info FILE" '[ $rc -eq 0 ] && cmp -s "$T/o" "$T/o2"'
$B info "$T/trunc.gguf" >/dev/null 2>"$T/e"; rc=$?
check "info on a truncated file" '[ $rc -eq 1 ] && [ $(wc -l <"$T/e") -eq 1 ]'

$B bench -m "$M" -p 32 -n 8 -r 2 -t 1 >"$T/o" 2>&1; rc=$?
check "bench table" '[ $rc -eq 0 ] && grep -q "| pp32 " "$T/o" && grep -q "| tg8 " "$T/o" && grep -q "peak RSS" "$T/o"'
$B bench -m "$M" -p 32 -n 0 -r 1 -t 1 --no-warmup >"$T/o" 2>&1; rc=$?
check "bench --no-warmup (llama-bench's flag): one timed prefill" '[ $rc -eq 0 ] && grep -q "| pp32 " "$T/o" && ! grep -q "| tg" "$T/o"'

python3 - "$T/story.txt" <<'PY'
import sys
open(sys.argv[1], "w").write(("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
  "One day, she saw a big red ball. She wanted to play with it, but it was too high. ") * 20)
PY
$B perplexity -m "$M" -f "$T/story.txt" -c 128 >"$T/o" 2>/dev/null; rc=$?
ppl=$(sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' "$T/o")
check "perplexity of in-domain text is low" '[ $rc -eq 0 ] && awk -v p="$ppl" "BEGIN{exit !(p > 1 && p < 8)}"'

# KV cache types: q8_0 on a model with 64-wide heads stays within 1% of f16's perplexity
$B synth --preset tiny-qwen3 -o "$T/tq.gguf" >/dev/null 2>&1
$B perplexity -m "$T/tq.gguf" -f "$T/story.txt" -c 128 --chunks 2 >"$T/o16" 2>/dev/null
$B perplexity -m "$T/tq.gguf" -f "$T/story.txt" -c 128 --chunks 2 -ctk q8_0 -ctv q8_0 >"$T/o8" 2>/dev/null; rc=$?
p16=$(sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' "$T/o16"); p8=$(sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' "$T/o8")
check "q8_0 KV cache: perplexity within 1% of f16" '[ $rc -eq 0 ] && awk -v a="$p8" -v b="$p16" "BEGIN{d=a/b-1; exit !(b > 0 && d < 0.01 && d > -0.01)}"'
$B run -m "$M" -p hi -n 2 --kv-type q8_0 >/dev/null 2>"$T/e"; rc=$?
check "q8_0 KV on 8-wide heads: clear error" '[ $rc -eq 1 ] && grep -q "multiple of 32" "$T/e"'
$B run -m "$M" -p hi -n 2 --kv-type q4_0 >/dev/null 2>"$T/e"; rc=$?
check "q4_0 KV on 8-wide heads: clear error" '[ $rc -eq 1 ] && grep -q "q4_0 KV cache needs a head size that is a multiple of 32" "$T/e"'
# q4_0 KV cache end to end: a greedy run on a trained model (64-wide heads) starts as f16's does
K=models/brisk-kjv-6m.gguf
$B run -m "$K" -p "In the beginning God" -n 24 --temp 0 -t 2 >"$T/k16" 2>/dev/null
$B run -m "$K" -p "In the beginning God" -n 24 --temp 0 -t 2 -ctk q4_0 -ctv q4_0 >"$T/k4" 2>"$T/e"; rc=$?
check "q4_0 KV cache: greedy run, first words as f16's" \
  '[ $rc -eq 0 ] && [ $(wc -c <"$T/k4") -gt 40 ] && [ "$(head -c 10 "$T/k4")" = "$(head -c 10 "$T/k16")" ]'
# notices: a GPU asked for on a machine without one, a context beyond the trained 2048 without RoPE scaling
if [ "$($B --version | tail -1)" = "CUDA: not compiled in" ] || $B --version | grep -q "compiled in, 0 devices"; then
  $B run -m "$K" -p "In the beginning" -n 4 --temp 0 -t 2 -ngl 99 -c 4096 >/dev/null 2>"$T/e"; rc=$?
  check "-ngl 99 without a GPU, -c 4096 > 2048 trained: a one-line notice each, runs" \
    '[ $rc -eq 0 ] && [ $(grep -c "^brisk: notice: -ngl 99 asks for a GPU, but there is none" "$T/e") -eq 1 ] &&
     [ $(grep -c "^brisk: notice: a context of 4096 tokens is beyond the model.s trained 2048" "$T/e") -eq 1 ]'
  $B run -m "$K" -p "In the beginning" -n 4 --temp 0 -t 2 --device 0 >/dev/null 2>"$T/e"; rc=$?
  check "--device 0 without a GPU: the notice" '[ $rc -eq 0 ] && grep -q "^brisk: notice: --device 0 asks for a GPU" "$T/e"'
fi
$B run -m "$K" -p "In the beginning" -n 4 --temp 0 -t 2 -ngl 0 -c 2048 >/dev/null 2>"$T/e"; rc=$?
check "-ngl 0 -c 2048: no notice" '[ $rc -eq 0 ] && ! grep -q "notice" "$T/e"'
$B run -m "$K" -p "In the beginning" -n 4 --temp 0 -t 2 -c 4096 --rope-scaling yarn --rope-scale 2 >/dev/null 2>"$T/e"; rc=$?
check "-c 4096 with YaRN x2: no context notice" '[ $rc -eq 0 ] && ! grep -q "notice" "$T/e"'
$B run -m "$K" -p "In the beginning" -n 4 --temp 0 -t 2 -c 4096 --rope-scaling linear --rope-scale 2 >/dev/null 2>"$T/e"; rc=$?
check "-c 4096 with linear x2: no context notice" '[ $rc -eq 0 ] && ! grep -q "notice" "$T/e"'
$B run -m "$M" -p hi -n 2 --kv-type q3 >/dev/null 2>"$T/e"; rc=$?
check "unknown KV type: exit 2" '[ $rc -eq 2 ] && grep -q "unknown KV cache type" "$T/e"'
$B run -m "$M" -p hi -n 2 -ctk q8_0 -ctv f16 >/dev/null 2>"$T/e"; rc=$?
check "different K and V types: exit 2" '[ $rc -eq 2 ] && [ $(wc -l <"$T/e") -eq 1 ]'

# Partial offload (-ngl below the layer count), with a second CPU backend in the GPU's place
$B run -m "$M" -p "Once upon a time" -n 32 --temp 0 -ngl 0 >"$T/o0" 2>/dev/null
BRISK_SPLIT_CPU=1 $B run -m "$M" -p "Once upon a time" -n 32 --temp 0 -ngl 2 >"$T/o2" 2>"$T/e"; rc=$?
check "-ngl 2 split (BRISK_SPLIT_CPU=1): the text of -ngl 0, the split said at load" \
  '[ $rc -eq 0 ] && [ -s "$T/o0" ] && cmp -s "$T/o0" "$T/o2" && grep -q "^offloaded 2/5 layers to a second CPU backend: layers 3-4" "$T/e"'
# --no-mmap: the model read into memory gives the same text as the mapped file
$B run -m "$M" -p "Once upon a time" -n 32 --temp 0 -ngl 0 --no-mmap >"$T/o4" 2>/dev/null; rc=$?
check "--no-mmap: the text of the mapped model" '[ $rc -eq 0 ] && [ -s "$T/o4" ] && cmp -s "$T/o0" "$T/o4"'
# --n-cpu-moe: the experts of the first layers on the host, the rest of those layers on the "GPU"
$B synth --preset tiny-qwen3moe -o "$T/moe.gguf" >/dev/null 2>&1
$B run -m "$T/moe.gguf" -p "Once upon a time" -n 16 --temp 0 --ignore-eos -ngl 0 >"$T/o0" 2>/dev/null
BRISK_SPLIT_CPU=1 $B run -m "$T/moe.gguf" -p "Once upon a time" -n 16 --temp 0 --ignore-eos --n-cpu-moe 2 -ngl 3 \
  >"$T/o2" 2>"$T/e"; rc=$?
check "--n-cpu-moe 2 -ngl 3 (BRISK_SPLIT_CPU=1): the text of -ngl 0, said at load" \
  '[ $rc -eq 0 ] && [ -s "$T/o0" ] && cmp -s "$T/o0" "$T/o2" && grep -q "^experts of layers 0-1 in host memory (--n-cpu-moe 2): [0-9.]* MiB stay off a second CPU backend" "$T/e"'
BRISK_SPLIT_CPU=1 $B run -m "$T/moe.gguf" -p "Once upon a time" -n 16 --temp 0 --ignore-eos --gpu-mem 1G >"$T/o3" 2>"$T/e"; rc=$?
check "--gpu-mem 1G (BRISK_SPLIT_CPU=1): every expert fits, the text of -ngl 0" \
  '[ $rc -eq 0 ] && cmp -s "$T/o0" "$T/o3" && ! grep -q "in host memory" "$T/e"'
# --gpu-mem alone where the experts do not all fit: the hot-expert cache by default, said in a
# notice; --cache-experts off: whole layers' experts on the host, as before (both the text of -ngl 0).
# The budget: what the model needs with every expert on the host (a build with CUDA counts its own
# buffers, one without does not) and 10 MiB, one of the model's four 6 MiB layers of experts.
BRISK_SPLIT_CPU=1 $B run -m "$T/moe.gguf" -p hi -n 2 --gpu-mem 64K >/dev/null 2>"$T/e"
G=$(( $(sed -n 's/.*the GPU still needs \([0-9]*\) MiB.*/\1/p' "$T/e") + 10 ))M
BRISK_SPLIT_CPU=1 $B run -m "$T/moe.gguf" -p "Once upon a time" -n 16 --temp 0 --ignore-eos --gpu-mem $G >"$T/o5" 2>"$T/e"; rc=$?
check "--gpu-mem $G (BRISK_SPLIT_CPU=1): the expert cache by default, a notice, the text of -ngl 0" \
  '[ $rc -eq 0 ] && cmp -s "$T/o0" "$T/o5" && grep -q "^brisk: notice: the experts do not all fit --gpu-mem" "$T/e" &&
   grep -q "all of them, for the expert cache" "$T/e" && grep -q "^expert cache: " "$T/e"'
BRISK_SPLIT_CPU=1 $B run -m "$T/moe.gguf" -p "Once upon a time" -n 16 --temp 0 --ignore-eos --gpu-mem $G \
  --cache-experts off >"$T/o6" 2>"$T/e"; rc=$?
check "--gpu-mem $G --cache-experts off: whole layers fit to the budget, no cache, the text of -ngl 0" \
  '[ $rc -eq 0 ] && cmp -s "$T/o0" "$T/o6" && grep -q "fit to --gpu-mem" "$T/e" && ! grep -q "notice\|^expert cache" "$T/e"'
BRISK_SPLIT_CPU=1 $B run -m "$T/moe.gguf" -p hi -n 2 --gpu-mem 64K >/dev/null 2>"$T/e"; rc=$?
check "--gpu-mem 64K: exit 1, what it needs" '[ $rc -eq 1 ] && [ $(wc -l <"$T/e") -eq 1 ] && grep -q "every expert in host memory" "$T/e"'
$B run -m "$T/moe.gguf" -p hi -n 2 --gpu-mem 12X >/dev/null 2>"$T/e"; rc=$?
check "--gpu-mem 12X: exit 2" '[ $rc -eq 2 ] && grep -q "expected a size" "$T/e"'
$B run -m "$M" -p hi -n 2 --n-cpu-moe x >/dev/null 2>"$T/e"; rc=$?
check "--n-cpu-moe x: exit 2" '[ $rc -eq 2 ] && grep -q "expected an integer" "$T/e"'
# The README's flags are listed by the --help of the command they go with (run's for the flags it
# names in prose), so that the front page never names a flag the command does not document.
help_has() { "$B" "$1" --help 2>&1 | grep -qE -- "(^|[ ,/(\[|])$2([] ,/=)|]|$)"; }
missing=
while read -r _ cmd rest; do
  for f in $(grep -oE '(^| |\()--?[a-zA-Z][a-zA-Z0-9-]*' <<<"$rest" | tr -d ' ('); do
    help_has "$cmd" "$f" || missing="$missing $cmd:$f"
  done
done < <(grep -E '^build/brisk [a-z]+ ' README.md)
for f in $(grep -vE '^build/brisk ' README.md | tr '\n' ' ' | grep -oE '`-[^`]*`' | grep -oE '(^|[` ])--?[a-zA-Z][a-zA-Z0-9-]*' |
           tr -d '` ' | grep -vx -- '--help' | sort -u); do
  help_has run "$f" || missing="$missing run:$f"
done
check "every flag the README names is in its command's --help${missing:+:$missing}" '[ -z "$missing" ]'
exit $fail
