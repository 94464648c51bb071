#!/usr/bin/env bash
# On the GPU machine (after `LAB=1 bash bench/cuda/pack.sh` here): issue 28's prefill rows that pick a
# default forward-pass size (-ub), in one call of under 600 s:
#   1. the llama.cpp build (background) and the models (depth.sh's prep, without its lab);
#   2. -ub 2048 against 512 on the synthetic qwen3-8b: perplexity and KL divergence of two 8K chunks
#      (the same numbers expected: a pass boundary moves no arithmetic but the batch's tiling);
#   3. time to first token (`bench -p N -n 0 -r 1 --no-warmup`) at -ub 512 / 2048 (/ 4096) for
#      qwen3-8b, qwen3.6-27b and qwen3.6-35b-a3b at 4K and 32K, the 8b at 128K;
#   4. attn_lab's key-range split swept 1-8 at a 512-entry ubatch (`attn_lab 262144 splits`);
#   5. `bench --spec-replay 4:0.5` (acceptance length 3) on qwen3.6-27b and qwen3-8b: the verify
#      step's cost for k = 1..16 against a one-token step, and the tokens/s it gives;
#   6. llama.cpp's TTFT of the 8b at 32K and 128K (if its build finished).
# Results under $OUT: log.txt (elapsed seconds per step), ub.txt, splits.txt, spec-*.txt, ll.txt.
set -u
d=/tmp/bm; L=/tmp/ll/b/bin; OUT=${OUT:-/tmp/pub}; mkdir -p "$OUT"; export OUT
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
STEP=prep OPS=0 LAB=0 bash bench/cuda/depth.sh > $OUT/prep.txt 2>&1
. bench/cuda/device_env.sh
el prep done | tee -a $OUT/log.txt
M8=$d/qwen3-8b.gguf; M27=$d/qwen3.6-27b.gguf; M35=$d/qwen3.6-35b-a3b.gguf
pp() { # model prompt [ub]
  timeout 150 $A bench -m $1 -p $2 -n 0 -r 1 --no-warmup ${3:+-ub $3} 2>$OUT/err.txt | grep -E '^\| pp' |
    sed "s|^|$(basename $1) ub=${3:-default} |" | tee -a $OUT/ub.txt
  grep -iE "rror|fail" $OUT/err.txt | head -3 | tee -a $OUT/ub.txt
}
timeout 90 $A perplexity -m $M8 -f .device/kjv.txt -c 8192 --chunks 2 -ub 512 --kl-divergence-base $d/base.kld 2>&1 |
  tail -3 | sed "s/^/ppl ub=512 /" | tee -a $OUT/ub.txt
timeout 90 $A perplexity -m $M8 --chunks 2 -ub 2048 --kl-divergence-base $d/base.kld --kl-divergence 2>&1 |
  tail -8 | sed "s/^/kld ub=2048 /" | tee -a $OUT/ub.txt
for u in 512 2048 4096; do pp $M8 32768 $u; done
el ub8 | tee -a $OUT/log.txt
for u in 512 2048; do pp $M27 32768 $u; pp $M35 32768 $u; done
for u in 512 2048; do pp $M8 4096 $u; pp $M35 4096 $u; done
el ub27/35 | tee -a $OUT/log.txt
if [ -f .device/attn_lab.xz ]; then
  xz -dc .device/attn_lab.xz > /tmp/attn_lab && chmod +x /tmp/attn_lab
  timeout 120 /tmp/attn_lab 262144 splits > $OUT/splits.txt 2>&1; el splits rc=$? | tee -a $OUT/log.txt
fi
for M in $M27 $M8; do
  timeout 90 $A bench -m $M -n 64 -r 1 --spec-replay 4:0.5 > $OUT/spec-$(basename $M .gguf).txt 2>&1
  el spec $M rc=$? | tee -a $OUT/log.txt
done
for u in 512 2048; do pp $M8 131072 $u; done
el ub128k | tee -a $OUT/log.txt
for i in $(seq 40); do [ -f /tmp/ll/done ] && break; sleep 2; done; cat /tmp/ll/done 2>&1 | tee -a $OUT/log.txt
for p in 32768 131072; do
  timeout 100 $L/llama-bench -m $M8 -p $p -n 0 -fa 1 -ngl 99 -r 1 --no-warmup 2>&1 | grep -E '^\| [a-z]' | tee -a $OUT/ll.txt
done
el done | tee -a $OUT/log.txt
