# Sourced by the GPU-machine scripts (bench/cuda/h200*.sh), with d set to their scratch folder:
# bench/cuda/pack.sh's binaries unpacked into .device/build (B; A its brisk), the carried
# libraries (libmicrohttpd, libcjson) on the library path, the Qwen2 vocabulary in $d/vocab.gguf.
rm -rf .device/build; tar xJf .device/bin.tar.xz -C .device
B=.device/build; A=$B/brisk; export LD_LIBRARY_PATH=$PWD/.device/lib
mkdir -p "$d"; xz -dc .device/vocab.gguf.xz > "$d/vocab.gguf"
