# brisk — one Makefile, one target per job.
#   make            build/brisk, build/libbrisk.a, build/libbrisk.so (+ CUDA when nvcc is found)
#   make test       every test (SAN=1: under AddressSanitizer + UBSan, in build-san/)
#   make demo       build and run the README's demo on the embedded default model
#   make fuzz       libFuzzer targets (FUZZ_SECONDS per target)
#   make bench      CPU benchmark side by side with llama.cpp (bench/)
#   make test-cuda  CUDA op parity + end-to-end checks (needs a GPU; tests/cuda/run.sh)
#   make docs       docs/gpu-switches.md from the GPU switches' table (src/backend/cuda/cuda_plan.c)
CC      ?= cc
SAN     ?= 0
BUILD   ?= build
OPT     ?= -O2
SHARED  ?= $(abspath ../shared)
LLAMACPP_LIBDIR ?= $(abspath .deps/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64)

ifeq ($(SAN),1)
BUILD   := build-san
OPT     := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDSAN   := -fsanitize=address,undefined
endif

# CUDA: on whenever nvcc is found (CI compiles and links it without a GPU);
# cudart is linked statically so the binary runs wherever a driver is.
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_ARCH ?= sm_90a
# nvcc itself says where its runtime lives (the layout differs between installs);
# without a static cudart next to it, brisk builds CPU-only rather than failing.
ifneq ($(NVCC),)
ifeq ($(origin CUDA_LIBDIR),undefined)
CUDA_LIBDIR := $(shell for d in $$($(NVCC) --dryrun -x cu /dev/null -o /dev/null 2>&1 | \
                   sed -n 's/^\#\$$ LIBRARIES=//p' | tr -d '"' | sed 's/-L//g') \
                   $(dir $(realpath $(NVCC)))../lib64; do \
                 [ -f $$d/libcudart_static.a ] && { echo $$d; break; }; done)
endif
ifeq ($(wildcard $(CUDA_LIBDIR)/libcudart_static.a),)
$(warning nvcc found at $(NVCC) but no libcudart_static.a beside it: building without CUDA)
override NVCC :=
endif
endif
ifneq ($(NVCC),)
NVCCFLAGS   := -std=c++17 -O3 -gencode=arch=$(CUDA_ARCH:sm_%=compute_%),code=$(CUDA_ARCH) \
               -Werror all-warnings -Xcompiler -fPIC,-Wall -Iinclude -Isrc -DBRISK_HAVE_CUDA $(EXTRA_NVCCFLAGS)
CU_SRC      := $(sort $(wildcard src/backend/cuda/*.cu))
CUDA_CFLAGS := -DBRISK_HAVE_CUDA
CUDA_LIBS   := -L$(CUDA_LIBDIR) -lcudart_static -lrt -ldl -lstdc++
endif

# gcc-only warning switches (clang rejects them)
GCC_WARN := $(if $(shell $(CC) --version 2>/dev/null | grep -qi 'free software foundation' && echo y),-Wshadow=local -Wno-format-truncation)
CFLAGS  := -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wno-unused-parameter $(GCC_WARN) \
           -fPIC -D_GNU_SOURCE -pthread -Iinclude -Isrc $(CUDA_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS  := -lpcre2-8 -lcjson -lmicrohttpd -lcurl -lm -lpthread -ldl $(CUDA_LIBS)
LDFLAGS := $(LDSAN) -pthread

# Per-ISA kernel files: the rest of the code stays portable x86-64.
ISA_AVX2   := -mavx2 -mfma -mf16c
ISA_AVX512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c


LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/cli/*' | sort)
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
# test_cuda_ops needs a GPU: it runs under `make test-cuda`, not `make test`.
TEST_SRC := $(filter-out tests/test_cuda_ops.c,$(sort $(wildcard tests/test_*.c)))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
DEPS     := $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
# The web chat page of `brisk serve`, embedded as a C array (tools/embed.sh).
LIB_OBJ  += $(BUILD)/obj/gen/webui.o

all: $(BUILD)/brisk $(BUILD)/libbrisk.a $(BUILD)/libbrisk.so

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_AVX2) -MMD -MP -c $< -o $@
$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_AVX512) -MMD -MP -c $< -o $@
$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/gen/webui.c: src/server/webui/index.html tools/embed.sh
	@mkdir -p $(dir $@)
	sh tools/embed.sh webui_index_html $< $@
$(BUILD)/obj/gen/webui.o: $(BUILD)/gen/webui.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# `brisk --version` names the commit; "unknown" when built from a tarball without git.
# (main.o is not rebuilt by a commit alone: `make clean` or touch src/cli/main.c for a fresh hash.)
BRISK_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
$(BUILD)/obj/src/cli/main.o: CFLAGS += -DBRISK_COMMIT=\"$(BRISK_COMMIT)\"

$(BUILD)/libbrisk.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libbrisk.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/brisk: $(CLI_OBJ) $(BUILD)/libbrisk.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libbrisk.a $(LDLIBS)

$(BUILD)/tests/%: tests/%.c tests/test.h $(BUILD)/libbrisk.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libbrisk.a $(LDFLAGS) $(LDLIBS)

# The llama.cpp reference harness (dlopens the npm build of llama.cpp v0.4.0).
$(BUILD)/llamacpp-ref: tests/llamacpp/harness.c tests/llamacpp/harness.h tests/llamacpp/spec.c tests/llamacpp/imatrix.c \
                      tests/llamacpp/imatrix.h .deps/llama.cpp/include/llama.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -g -D_GNU_SOURCE -I.deps/llama.cpp/include -I.deps/llama.cpp/ggml/include \
	    -o $@ tests/llamacpp/harness.c tests/llamacpp/spec.c tests/llamacpp/imatrix.c -ldl -lm -pthread

$(BUILD)/tests/test_cuda_ops: tests/test_cuda_ops.c $(wildcard tests/cuda/ops_*.c) tests/test.h $(BUILD)/libbrisk.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libbrisk.a $(LDFLAGS) $(LDLIBS)

# The matrix products' ladder decided on plain values (host code: runs without a GPU; CUDA builds only).
$(BUILD)/tests/test_cuda_ladder: tests/test_cuda_ladder.cu $(BUILD)/libbrisk.a
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(BUILD)/libbrisk.a $(LDLIBS) $(if $(LDSAN),-Xlinker -lasan -Xlinker -lubsan)

test-cuda: $(BUILD)/tests/test_cuda_ops $(if $(NVCC),$(BUILD)/tests/test_cuda_ladder) $(BUILD)/tests/test_pp \
           $(BUILD)/tests/test_expert_cache $(BUILD)/tests/test_mtp $(BUILD)/tests/test_eagle3 $(BUILD)/brisk
	@BUILD=$(BUILD) SHARED=$(SHARED) bash tests/cuda/run.sh

deps: .deps/llama.cpp/include/llama.h .deps/npm/node_modules/openai/package.json \
      .deps/npm/node_modules/@anthropic-ai/sdk/package.json .deps/npm/node_modules/playwright-core/package.json \
      .deps/npm/node_modules/@openai/codex/package.json .deps/npm/node_modules/@anthropic-ai/claude-code/package.json
# drives Debian's chromium in tests/t_webui.sh (no browser download)
.deps/npm/node_modules/playwright-core/package.json: | .deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle
	cd .deps/npm && npm install --omit=optional --no-audit --no-fund --loglevel=error playwright-core@1.64.1
# the server tests' client (a .deps installed before it was added gets it here)
.deps/npm/node_modules/openai/package.json: | .deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle
	cd .deps/npm && npm install --no-audit --no-fund --loglevel=error openai@5.23.2
# /v1/messages' client in tests/server/anthropic.mjs
.deps/npm/node_modules/@anthropic-ai/sdk/package.json: | .deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle
	cd .deps/npm && npm install --no-audit --no-fund --loglevel=error @anthropic-ai/sdk@0.71.0
# the agents of tests/t_agents.sh: native binaries in optional platform packages, named here as
# dependencies of their own so that --omit=optional (node-llama-cpp's GPU builds) keeps them
.deps/npm/node_modules/@openai/codex/package.json: | .deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle
	cd .deps/npm && npm install --omit=optional --no-audit --no-fund --loglevel=error @openai/codex@0.171.0 \
	    @openai/codex-linux-x64@npm:@openai/codex@0.171.0-linux-x64
.deps/npm/node_modules/@anthropic-ai/claude-code/package.json: | .deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle
	cd .deps/npm && npm install --omit=optional --no-audit --no-fund --loglevel=error @anthropic-ai/claude-code@2.1.332 \
	    @anthropic-ai/claude-code-linux-x64@2.1.332
.deps/llama.cpp/include/llama.h: | .deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle
	rm -rf .deps/llama.cpp
	git clone -q .deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle .deps/llama.cpp
	touch $@
.deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle:
	mkdir -p .deps/npm
	cd .deps/npm && npm install --omit=optional --no-audit --no-fund --loglevel=error \
	    node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 openai@5.23.2 @huggingface/jinja@0.5.13 playwright-core@1.64.1 \
	    @anthropic-ai/sdk@0.71.0

# The persistent decode kernel's instruction plan (issue 30, a lab in dev/kernels/) run on CPU threads
$(BUILD)/tests/test_pk_emu: dev/kernels/pk_emu.c dev/kernels/pk_plan.c dev/kernels/pk_plan.h tests/test.h \
                            $(BUILD)/libbrisk.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -Idev/kernels -o $@ dev/kernels/pk_emu.c dev/kernels/pk_plan.c $(BUILD)/libbrisk.a \
	    $(LDFLAGS) $(LDLIBS)

# the CUDA ladders' host-only table (no GPU needed) joins `make test` in CUDA builds
tests: $(TEST_BIN) $(BUILD)/brisk $(BUILD)/tests/test_pk_emu $(if $(NVCC),$(BUILD)/tests/test_cuda_ladder)

test: tests $(BUILD)/llamacpp-ref
	@BUILD=$(BUILD) SHARED=$(SHARED) LLAMACPP_LIBDIR=$(LLAMACPP_LIBDIR) SAN=$(SAN) bash tests/run.sh

# the page tests/t_gpu_switches.sh holds the table to
docs: $(BUILD)/brisk
	$(BUILD)/brisk info --gpu --markdown >docs/gpu-switches.md

demo: all
	@bash tools/demo.sh $(BUILD)

fuzz:
	@bash fuzz/run.sh

bench: all $(BUILD)/llamacpp-ref
	@BUILD=$(BUILD) LLAMACPP_LIBDIR=$(LLAMACPP_LIBDIR) bash bench/cpu_bench.sh

format:
	clang-format -i $$(find src include tests -name '*.[ch]')

clean:
	rm -rf build build-san

# What this build found: printed by CI so a failed link can be read off its log.
config:
	@echo "CC=$(CC) ($$($(CC) --version | head -1))"
	@echo "NVCC=$(if $(NVCC),$(NVCC) ($$($(NVCC) --version | tail -1)),none: CPU-only build)"
	@echo "CUDA_LIBDIR=$(CUDA_LIBDIR)"

.PHONY: config all test test-cuda tests demo docs fuzz bench format clean deps
-include $(DEPS)
