# Sourced by the GPU-machine scripts (bench/cuda/h200*.sh), with d set to their scratch folder:
# bench/cuda/pack.sh's binaries unpacked into .device/build (B; A its brisk), the carried
# libraries (libmicrohttpd, libcjson) on the library path, the Qwen2 vocabulary in $d/vocab.gguf;
# ops_memcheck CASES... runs test_cuda_ops under compute-sanitizer.
rm -rf .device/build; tar xJf .device/bin.tar.xz -C .device
B=.device/build; A=$B/brisk; export LD_LIBRARY_PATH=$PWD/.device/lib
mkdir -p "$d"; xz -dc .device/vocab.gguf.xz > "$d/vocab.gguf"
# compute-sanitizer's memcheck on test_cuda_ops' cases (the scripts' MEMCHECK=1): its summary lines
ops_memcheck() {
  local cs; cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout 300 "$cs" --tool memcheck $B/tests/test_cuda_ops "$@" 2>&1 | tail -3
}
