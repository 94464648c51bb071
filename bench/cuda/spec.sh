#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here; carry [".device"]): speculative decoding on the GPU
# (issue 29), in one call:
#   1. tests/test_mtp and tests/test_eagle3 with the models on the GPU (test_mtp's gpu case: the MTP
#      head's logits against the CPU's; the greedy cases: speculative == plain, rolled back through the
#      kept recurrent inputs), tensor cores off as for make test-cuda's random-weight models;
#   2. synthetic qwen3.6-27b and qwen3.6-35b-a3b in Q4_K_M with an MTP block, `brisk synth --bigram`
#      (the head drafts the trunk's near-bigram: real acceptance on real shapes, greedy text that no
#      rounding moves), then per model: `bench --spec-replay 3:0.67` (tokens/s at 2 of 3 accepted and the
#      verify step's cost for k = 0..16), `bench --spec-mtp 3` (the head's own drafts) and
#      `bench --spec-mtp 3:0.67` (the head run each round, 2 of 3 accepted).
#   3. both engines' servers on the same files, plain and with MTP (section 3 below; llama.cpp's from
#      .device/s37c1.sh's build in the same lease).
# Results under $OUT: log.txt (elapsed seconds per step), test_mtp.txt, test_eagle3.txt, spec-*.txt,
# serve-*.log.
set -u
OUT=${OUT:-/tmp/spec}; mkdir -p "$OUT"; d=/tmp/bm
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/log.txt"; }
LIM=${LIM:-540}; left() { [ $(( $(date +%s) - T0 )) -lt "$LIM" ]; } # (a device call ends at 600 s)
. bench/cuda/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/smi.txt"
for p in ${MODELS:-qwen3.6-27b qwen3.6-35b-a3b}; do
  [ -f $d/$p-mtp.gguf ] || $A synth --preset $p --vocab $d/vocab.gguf --type q4_k_m --repeat-rows 256 --mtp 1 --bigram \
    $(case $p in *a3b) echo --expert-skew 1;; esac) -o $d/$p-mtp.gguf > /dev/null 2>&1 &
done
for t in test_mtp test_eagle3; do
  BRISK_CUDA_DISABLE=mma timeout 300 $B/tests/$t > "$OUT/$t.txt" 2>&1; el "$t rc=$?"
  grep -E "^(ok|FAIL|skip)|GPU vs CPU|mtp k=|passed" "$OUT/$t.txt" | tee -a "$OUT/log.txt"
done
wait; el models
for p in ${MODELS:-qwen3.6-27b qwen3.6-35b-a3b}; do
  f=$d/$p-mtp.gguf
  for s in --spec-replay:3:0.67 --spec-mtp:3 --spec-mtp:3:0.67; do
    left || break
    flag=${s%%:*} val=${s#*:}
    timeout 150 $A bench -m $f -n 128 -r 2 $flag $val > "$OUT/spec-$p${flag#--spec}-$val.txt" 2>&1
    el "$p $flag $val rc=$?"
    grep -E "^\| tg|^(mtp|replay):" "$OUT/spec-$p${flag#--spec}-$val.txt" | tee -a "$OUT/log.txt"
  done
done
el end-bench
# 2b. With .device/mv.tar.xz (branch lab/mmvq-rows' bench/cuda/mmvq_variants.sh): the verify step's cost with
#     the 2-16-token products at 4 and 8 rows a warp, beside main's, on the first model.
if [ -f .device/mv.tar.xz ] && left; then
  tar xf .device/mv.tar.xz -C .device
  p=${MODELS:-qwen3.6-27b}; p=${p%% *}
  for v in main r4 r8; do
    left || break
    bin=$([ $v = main ] && echo $A || echo .device/mv/brisk_$v)
    timeout 120 $bin bench -m $d/$p-mtp.gguf -n 64 -r 2 --spec-replay 3:0.67 > "$OUT/verify-$v.txt" 2>&1
    el "verify $v rc=$?"
    grep -E "^\| (tg|[0-9])" "$OUT/verify-$v.txt" | tr '\n' ' ' | sed 's/  */ /g' | tee -a "$OUT/log.txt"; echo | tee -a "$OUT/log.txt"
  done
fi
# 3. Beside llama.cpp (its build from .device/s37c1.sh's call, with llama-server: v0.4.0 speculates only
#    there): each engine's server on the same file, plain and with MTP (--spec-type draft-mtp / mtp,
#    3 drafts), the same /v1/completions requests (32 random token ids, 128 greedy tokens, 3 times): generation
#    tokens/s and drafts accepted from the response's timings.
L=/tmp/ll/b/bin
serve_bench() { # label cmd...
  local label=$1; shift
  left || { el "skipped $label (time)"; return; }
  "$@" > "$OUT/serve-$label.log" 2>&1 & local pid=$!
  for i in $(seq 240); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8199/health', timeout=1)" 2>/dev/null && break; sleep 0.5; done
  python3 - "$label" <<'PY' | tee -a "$OUT/log.txt"
import json, random, sys, urllib.request
random.seed(7)
rows = []
for r in range(3):
    body = {"prompt": [random.randrange(1000, 100000) for _ in range(32)], "max_tokens": 128, "temperature": 0}
    req = urllib.request.Request("http://127.0.0.1:8199/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t = json.load(urllib.request.urlopen(req, timeout=300)).get("timings", {})
    rows.append((t.get("predicted_per_second", 0), t.get("draft_n", 0), t.get("draft_n_accepted", 0)))
print(sys.argv[1], " ".join(f"{a:.1f} tok/s ({b} drafted, {c} accepted)" for a, b, c in rows))
PY
  kill $pid; wait $pid 2>/dev/null
}
for p in ${MODELS:-qwen3.6-27b qwen3.6-35b-a3b}; do
  f=$d/$p-mtp.gguf
  serve_bench "brisk-$p-plain" $A serve -m $f --port 8199 -c 4096
  serve_bench "brisk-$p-mtp" $A serve -m $f --port 8199 -c 4096 --spec-type mtp --draft-max 3
  [ -x $L/llama-server ] || { el "no llama-server"; continue; }
  serve_bench "llama-$p-plain" $L/llama-server -m $f --port 8199 -c 4096 -ngl 99 -fa on
  serve_bench "llama-$p-mtp" $L/llama-server -m $f --port 8199 -c 4096 -ngl 99 -fa on --spec-type draft-mtp --draft-max 3
done
el end-serve
