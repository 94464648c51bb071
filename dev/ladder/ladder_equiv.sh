#!/bin/sh
# ladder_equiv.sh [OLD_COMMIT [CASES [SEED]]] — checks that cuda_matmul.cu's ladder makes the same calls as
# the dispatch it replaced (cuda_gemv.cu at OLD_COMMIT, default a9d24dc): both run over the work
# tree's predicates and recording mocks of the kernels on random plans, shapes and kernel refusals
# (dev/ladder/harness.cu.in). Host code: nvcc builds it, no GPU runs it. From the repository root.
set -e
old=${1:-a9d24dc}
cases=${2:-1000000}
seed=${3:-1}
out=${TMPDIR:-/tmp}/ladder_equiv.$$
python3 dev/ladder/gen.py "$old" "$out.cu"
${NVCC:-nvcc} -std=c++17 -O1 -Iinclude -Isrc -DBRISK_HAVE_CUDA -w "$out.cu" -o "$out"
"$out" "$cases" "$seed"
rc=$?
rm -f "$out" "$out.cu"
exit $rc
