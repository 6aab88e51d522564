# skiplm build. `make` builds the library and the CLI, `make test` runs the suite,
# `make check-layers` checks that src/'s folders include only the layers below them and that no
# two files of a layer call each other in a loop.
# Options: make SAN=1 (ASan+UBSan build in build-san/), make BLAS=openblas|none, BLAS_PKG=<pkg-config name>,
# make MPI=1 (data-parallel training over MPI: mpicc, -DSK_HAVE_MPI, in build-mpi/), ZLIB=auto|0|1,
# DNNL=auto|0|1 (oneDNN, libdnnl-dev: bf16 GEMMs for train --bf16 on the CPU).
# make fuzz: libFuzzer harnesses (clang, build-fuzz/), each run FUZZ_SECONDS (scripts/fuzz.sh).
# make cuda: the CLI with the CUDA backend in build-cuda/ (nvcc; NVCC=..., CUDA_ARCH=sm_90;
# with MPI=1 in build-cuda-mpi/, multi-GPU, NCCL when found), make cuda-test: build it and run
# the GPU/CPU parity test (docs/cuda.md). The default build never looks for nvcc.
CC      ?= cc
BUILD   ?= build
OPT     ?= -O3 -march=native
OMP     ?= -fopenmp
BLAS    ?= openblas

ifeq ($(FUZZ),1)
# single-threaded (no OpenMP), no BLAS: every byte the readers touch is instrumented
BUILD   := build-fuzz
CC      := clang
OMP     := -Wno-unknown-pragmas
BLAS    := none
DNNL    := 0
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
endif

# -fno-trapping-math: nothing here reads floating-point exception flags, and without it gcc
# keeps the selects of src/core/vmath.h (exp/erf/tanh for GELU, softmax) as branches, which it
# vectorises only with AVX-512's masks: on AVX2 those loops ran scalar. Values are unchanged
# (no reassociation, no finite-math assumptions).
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc $(OMP) $(OPT) -fno-trapping-math
LDLIBS  += -lm $(filter -fopenmp,$(OMP))

ifeq ($(SAN),1)
BUILD   := build-san
OPT     := -O1 -g -fno-omit-frame-pointer
CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDLIBS  += -fsanitize=address,undefined
endif

# MPI=1: the same sources built with Open MPI's compiler wrapper into build-mpi/
# (build-mpi-san/ with SAN=1; run with mpirun -np N build-mpi/skiplm train ...; see
# docs/distributed.md).
ifeq ($(MPI),1)
CC      := mpicc
BUILD   := $(if $(filter 1,$(SAN)),build-mpi-san,build-mpi)
CFLAGS  += -DSK_HAVE_MPI
endif

# Another CBLAS through pkg-config: make BLAS_PKG=blis (or flexiblas, blas-netlib, ...)
ifneq ($(BLAS_PKG),)
BLAS    := pkg
CFLAGS  += -DSK_HAVE_BLAS $(shell pkg-config --cflags $(BLAS_PKG))
LDLIBS  += $(shell pkg-config --libs $(BLAS_PKG))
endif

ifeq ($(BLAS),openblas)
# Prefer Debian's OpenBLAS built on OpenMP: its GEMMs then run on skiplm's own OpenMP
# thread pool. With the pthread build, OpenBLAS's threads and OpenMP's (spinning after each
# parallel region) compete for the cores: training steps measured 1.5-2.5x slower on 2 cores.
OPENBLAS_OMP := $(firstword $(wildcard /usr/lib/*-linux-gnu/openblas-openmp))
ifneq ($(OPENBLAS_OMP),)
BLAS_CFLAGS := -I$(subst /usr/lib/,/usr/include/,$(OPENBLAS_OMP))
BLAS_LIBS   := -L$(OPENBLAS_OMP) -Wl,-rpath,$(OPENBLAS_OMP) -lopenblas
else
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/openblas-pthread)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
endif
CFLAGS  += -DSK_HAVE_BLAS $(BLAS_CFLAGS)
LDLIBS  += $(BLAS_LIBS)
endif

# skiplm serve's HTTP library, libmicrohttpd (Debian: libmicrohttpd-dev), when pkg-config finds
# it; without it `skiplm serve` says how to get it. MHD=0 leaves it out.
MHD ?= $(shell pkg-config --exists libmicrohttpd 2>/dev/null && echo 1 || echo 0)
ifeq ($(MHD),1)
CFLAGS  += -DSK_HAVE_MHD $(shell pkg-config --cflags libmicrohttpd)
LDLIBS  += $(shell pkg-config --libs libmicrohttpd)
endif
LDLIBS  += -pthread
# zlib (optional): prepare reads .txt.gz / .jsonl.gz with it. ZLIB=auto uses it when its
# header is installed (zlib1g-dev; scripts/install_deps.sh), ZLIB=0 builds without it (prepare
# then refuses .gz inputs, naming them), ZLIB=1 requires it.
ZLIB    ?= auto
ifeq ($(ZLIB),auto)
ZLIB    := $(if $(wildcard /usr/include/zlib.h),1,0)
endif
ifeq ($(ZLIB),1)
CFLAGS  += -DSK_HAVE_ZLIB
LDLIBS  += -lz
endif

# oneDNN (optional; Debian: libdnnl-dev, installed by scripts/install_deps.sh): the bf16 GEMMs of
# bf16 mixed precision on the CPU (train --bf16, bench --bf16; src/core/gemm_bf16.c). DNNL=auto
# uses it when its header is installed, DNNL=0 builds without it (train --bf16 on the CPU then
# refuses, saying what to install), DNNL=1 requires it. Debian's library runs on OpenMP (libgomp):
# its GEMMs share skiplm's thread pool, as OpenBLAS's do.
DNNL    ?= auto
ifeq ($(DNNL),auto)
DNNL    := $(if $(wildcard /usr/include/oneapi/dnnl/dnnl.h),1,0)
ifeq ($(DNNL)$(MAKELEVEL),00)
$(info skiplm: oneDNN not found (/usr/include/oneapi/dnnl/dnnl.h): building without it, so train --bf16 on the CPU is off; install libdnnl-dev (bash scripts/install_deps.sh) and rebuild to turn it on)
endif
endif
ifeq ($(DNNL),1)
CFLAGS  += -DSK_HAVE_DNNL
LDLIBS  += -ldnnl
endif

# The library, one folder a layer (docs/architecture.md): base <- core <- io, train; text
# beside them on base (and io for file paths); src/cuda/ is the GPU backend (make cuda).
LAYERS   := base core io train text
LIB_SRC  := $(foreach d,$(LAYERS),$(wildcard src/$(d)/*.c))
LIB_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/src/%.o)
LIB_HDR  := $(wildcard include/*.h $(LAYERS:%=src/%/*.h))

# CUDA=1 (set by `make cuda`): the same library and CLI plus src/cuda/ (kernels in .cu by
# nvcc, the device model in C), compiled with -DSKIPLM_CUDA into build-cuda/.
NVCC      ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_ARCH ?= sm_90
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCCFLAGS ?= -O3 -arch=$(CUDA_ARCH) -lineinfo -std=c++17 -Xcompiler -Wall
# MPI=1 too: build-cuda-mpi/, one GPU per rank; NCCL (NCCL_HOME, default CUDA_HOME) when its
# header is there (NCCL=0 turns it off: the gradient mean then goes through host memory).
NCCL_HOME ?= $(CUDA_HOME)
NCCL      ?= $(if $(wildcard $(NCCL_HOME)/include/nccl.h),1,0)
CUDA_BUILD := build-cuda$(if $(filter 1,$(MPI)),-mpi)
ifeq ($(CUDA),1)
BUILD    := $(CUDA_BUILD)
CFLAGS   += -DSKIPLM_CUDA -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++
ifeq ($(MPI)$(NCCL),11)
CFLAGS   += -DSKIPLM_NCCL -I$(NCCL_HOME)/include
LDLIBS   += -L$(NCCL_HOME)/lib64 -Wl,-rpath,$(NCCL_HOME)/lib64 -lnccl
endif
LIB_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/src/%.o)
LIB_OBJ  += $(patsubst src/cuda/%.c,$(BUILD)/src/cuda/%.o,$(wildcard src/cuda/*.c))
LIB_OBJ  += $(patsubst src/cuda/%.cu,$(BUILD)/src/cuda/%.cu.o,$(wildcard src/cuda/*.cu))
endif
# CUDA_EMU=1 (set by `make cuda-emu-test`): the same CUDA sources on the CPU emulator of
# tests/cuda/emu (g++, fibers for threads, NaN-filled device memory), into build-cuda-emu/.
# With MPI=1 (make cuda-emu-mpi-test): build-cuda-emu-mpi/, with the NCCL emulator over MPI.
# With SAN=1 (make cuda-emu-san-test): build-cuda-emu-san/, kernels, emulator and library
# under ASan + UBSan: an out-of-bounds device access is a heap overflow there.
ifeq ($(CUDA_EMU),1)
BUILD    := build-cuda-emu$(if $(filter 1,$(MPI)),-mpi)$(if $(filter 1,$(SAN)),-san)
CFLAGS   += -DSKIPLM_CUDA -Itests/cuda/emu $(if $(filter 1,$(MPI)),-DSKIPLM_NCCL)
LDLIBS   += -lstdc++
EMU_SAN  := -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
EMU_OPT  := -O2 $(if $(filter 1,$(SAN)),$(EMU_SAN))
EMU_CXX  := $(CXX) -std=c++17 $(EMU_OPT) -g -ffp-contract=off -Wall -Wno-unknown-pragmas -DSK_CUDA_EMU -Itests/cuda/emu -Isrc/cuda -Iinclude
LIB_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/src/%.o) $(BUILD)/emu/emu.o $(if $(filter 1,$(MPI)),$(BUILD)/emu/nccl_emu.o)
LIB_OBJ  += $(patsubst src/cuda/%.c,$(BUILD)/src/cuda/%.o,$(wildcard src/cuda/*.c))
LIB_OBJ  += $(patsubst src/cuda/%.cu,$(BUILD)/src/cuda/%.emu.o,$(wildcard src/cuda/*.cu))
endif
CLI_SRC  := $(wildcard cli/*.c)
CLI_OBJ  := $(CLI_SRC:cli/%.c=$(BUILD)/cli/%.o)
# the server (docs/serving.md) is an app of its own beside the CLI, linked into the same binary
SRV_SRC  := $(wildcard server/*.c)
SRV_OBJ  := $(SRV_SRC:server/%.c=$(BUILD)/server/%.o) $(BUILD)/server/chat_html.o
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_SRC := $(wildcard tests/tool_*.c)
TEST_BIN += $(TOOL_SRC:tests/%.c=$(BUILD)/tests/%)

all: $(BUILD)/libskiplm.a $(BUILD)/skiplm $(TEST_BIN)

$(BUILD)/src/%.o: src/%.c $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/src/cuda/%.o: src/cuda/%.c $(LIB_HDR) $(wildcard src/cuda/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/src/cuda/%.emu.o: src/cuda/%.cu src/cuda/cuda_kernels.h $(wildcard src/cuda/*.cuh) $(wildcard tests/cuda/emu/*.h)
	@mkdir -p $(dir $@)
	$(EMU_CXX) -x c++ -c $< -o $@
$(BUILD)/emu/emu.o: tests/cuda/emu/emu.cpp $(wildcard tests/cuda/emu/*.h)
	@mkdir -p $(dir $@)
	$(EMU_CXX) -c $< -o $@
$(BUILD)/emu/nccl_emu.o: tests/cuda/emu/nccl_emu.c tests/cuda/emu/nccl.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/src/cuda/%.cu.o: src/cuda/%.cu src/cuda/cuda_kernels.h $(wildcard src/cuda/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(BUILD)/cli/%.o: cli/%.c $(LIB_HDR) $(wildcard cli/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/server/%.o: server/%.c $(LIB_HDR) $(wildcard cli/*.h server/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Icli -c $< -o $@
# the chat page of GET / (server/chat.html), compiled into the binary as a C array
$(BUILD)/server/chat_html.c: server/chat.html scripts/embed.sh
	@mkdir -p $(dir $@)
	bash scripts/embed.sh $< srv_chat_html > $@.tmp && mv $@.tmp $@
$(BUILD)/server/chat_html.o: $(BUILD)/server/chat_html.c
	$(CC) $(CFLAGS) -c $< -o $@
# made anew each time: `ar r` on an old archive would keep members whose source is gone
$(BUILD)/libskiplm.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^
$(BUILD)/skiplm: $(CLI_OBJ) $(SRV_OBJ) $(BUILD)/libskiplm.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libskiplm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -UNDEBUG $< $(BUILD)/libskiplm.a -o $@ $(LDLIBS)
# test_gemm_rows also links src/core/gemm_rows_bf16.c and gemm_q8dot.c built for AVX2 and for
# SSE2 (x86-64), names suffixed, to check that every build of them computes the same bits.
ifeq ($(shell uname -m),x86_64)
ROWS_VARIANTS := $(foreach f,bf16 q8dot,$(foreach a,avx2 sse2,$(BUILD)/tests/rows_$(f)_$(a).o))
ROWS_RENAME = $(foreach s,sk_linear_forward_bf16 sk_rows_set_emulate sk_rows_bf16_kernel sk_rows_bf16_native \
              sk_linear_forward_q8_prompt sk_q8_prompt_native sk_q8_prompt_kernel sk_q8_prompt_set_emulate,-D$(s)=$(s)_$*)
ROWS_ARCH = -march=$(if $(filter avx2,$*),x86-64-v3,x86-64)
$(BUILD)/tests/rows_bf16_%.o: src/core/gemm_rows_bf16.c $(LIB_HDR) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -march=%,$(CFLAGS)) $(ROWS_ARCH) $(ROWS_RENAME) -c $< -o $@
$(BUILD)/tests/rows_q8dot_%.o: src/core/gemm_q8dot.c $(LIB_HDR) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -march=%,$(CFLAGS)) $(ROWS_ARCH) $(ROWS_RENAME) -c $< -o $@
$(BUILD)/tests/test_gemm_rows: tests/test_gemm_rows.c $(wildcard tests/*.h) $(BUILD)/libskiplm.a $(ROWS_VARIANTS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -UNDEBUG -DSK_ROWS_VARIANTS $< $(ROWS_VARIANTS) $(BUILD)/libskiplm.a -o $@ $(LDLIBS)
endif

# The shared library (docs/library.md): $(BUILD)/libskiplm.so (soname libskiplm.so.0) of the
# same sources compiled again with -fPIC into $(BUILD)/pic/ (the archive and the CLI keep their
# own objects), exporting exactly the functions the public headers but skiplm_cuda.h declare
# (the CUDA builds make no .so): scripts/export_syms.sh lists them into a linker version script
# and everything else is local. examples/*.c are built against it. `make install
# PREFIX=/usr/local` (DESTDIR too) copies the libraries, the public headers and the CLI.
PUB_HDR  := $(filter-out include/skiplm_cuda.h,$(wildcard include/*.h))
PIC_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/pic/src/%.o)
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
PREFIX   ?= /usr/local
ifeq ($(CUDA)$(CUDA_EMU),)
all: $(BUILD)/libskiplm.so $(EXAMPLES)
endif
$(BUILD)/pic/src/%.o: src/%.c $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -fno-semantic-interposition -c $< -o $@
$(BUILD)/libskiplm.map: $(PUB_HDR) scripts/export_syms.sh
	@mkdir -p $(dir $@)
	bash scripts/export_syms.sh --version-script "$(CC)" "$(CFLAGS)" $(PUB_HDR) > $@.tmp && mv $@.tmp $@
$(BUILD)/libskiplm.so: $(PIC_OBJ) $(BUILD)/libskiplm.map
	$(CC) $(CFLAGS) -shared -Wl,-soname,libskiplm.so.0 -Wl,--version-script=$(BUILD)/libskiplm.map -Wl,--no-undefined \
	    -Wl,--as-needed $(PIC_OBJ) -o $@.0 $(LDLIBS)
	ln -sf libskiplm.so.0 $@
$(BUILD)/examples/%: examples/%.c $(PUB_HDR) $(BUILD)/libskiplm.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ -L$(BUILD) -lskiplm -Wl,-rpath,'$$ORIGIN/..'
install: $(BUILD)/libskiplm.so $(BUILD)/libskiplm.a $(BUILD)/skiplm
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BUILD)/libskiplm.so.0 $(DESTDIR)$(PREFIX)/lib/
	ln -sf libskiplm.so.0 $(DESTDIR)$(PREFIX)/lib/libskiplm.so
	install -m 644 $(BUILD)/libskiplm.a $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(PUB_HDR) $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/skiplm $(DESTDIR)$(PREFIX)/bin/
.PHONY: install

# The whole suite: C unit tests, PyTorch comparisons, CLI end-to-end tests.
test:
	@bash scripts/install_deps.sh
	@bash scripts/setup.sh >/dev/null
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bash tests/run_tests.sh

# The mutation catalogue (tests/mutations/, docs/testing.md): each small bug applied to a scratch
# copy of the tree, the copy rebuilt, the named tests run; fails if a mutation survives or no
# longer applies. MUT="name ..." runs the mutations whose names contain one of them; FAST=1 the
# ten marked fast (what .ci/run runs).
mutation-test:
	@bash scripts/install_deps.sh
	@bash scripts/setup.sh >/dev/null
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) MUT="$(MUT)" /usr/bin/python3 tests/mutations/run.py $(if $(filter 1,$(FAST)),--fast)

clean:
	rm -rf build build-san build-san-native build-mpi build-mpi-san build-fuzz build-cuda build-cuda-mpi build-cuda-emu build-cuda-emu-mpi build-cuda-emu-san

.PHONY: all test mutation-test clean

# The layering of src/ (docs/architecture.md): the core never includes a text header, ...
check-layers:
	@bash scripts/check_layers.sh
.PHONY: check-layers

# Fuzz harnesses (fuzz/fuzz_*.c), linked with libFuzzer: make FUZZ=1 fuzz-build; `make fuzz`
# builds them and runs each for FUZZ_SECONDS (default 20) on its seed corpus.
FUZZ_SRC := $(wildcard fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:fuzz/%.c=$(BUILD)/fuzz/%)
# the apps' own parsers are fuzzed too (the server's requests): the CLI's and the server's
# objects but the commands, main.c and the HTTP layer
FUZZ_CLI := $(filter-out $(BUILD)/cli/main.o $(BUILD)/cli/cmd_%.o,$(CLI_OBJ))
FUZZ_CLI += $(filter-out $(BUILD)/server/serve_http.o $(BUILD)/server/cmd_serve.o,$(SRV_OBJ))
$(BUILD)/fuzz/%: fuzz/%.c fuzz/fuzz_util.h $(BUILD)/libskiplm.a $(FUZZ_CLI)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -Icli -Iserver $< $(FUZZ_CLI) $(BUILD)/libskiplm.a -o $@ $(LDLIBS)
fuzz-build: $(FUZZ_BIN)
fuzz:
	@bash scripts/fuzz.sh
.PHONY: fuzz fuzz-build

# Attention benchmark (not part of `all`): make bench-attention
$(BUILD)/bench/%: bench/%.c $(BUILD)/libskiplm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libskiplm.a -o $@ $(LDLIBS)
bench-attention: $(BUILD)/bench/bench_attention
.PHONY: bench-attention
# The token mask of constrained decoding, per step: make bench-json-mask
bench-json-mask: $(BUILD)/bench/bench_json_mask
.PHONY: bench-json-mask

# CUDA backend (docs/cuda.md): build-cuda/skiplm (train/bench/sample --device cuda) and the
# parity tests (training: test_cuda_parity, cached generation: test_cuda_infer); compile
# only, no GPU needed. `make cuda-test` also runs them (needs a GPU). CASE="name" runs only
# the cases whose name contains it.
CUDA_TESTS := test_cuda_parity test_cuda_infer
cuda:
	@test -x "$(NVCC)" || { echo "make cuda: nvcc not found at '$(NVCC)' (give NVCC=/path/to/nvcc)"; exit 1; }
	@$(MAKE) --no-print-directory CUDA=1 NVCC="$(NVCC)" $(CUDA_BUILD)/skiplm $(CUDA_TESTS:%=$(CUDA_BUILD)/tests/cuda/%)
cuda-test: cuda
	./$(CUDA_BUILD)/tests/cuda/test_cuda_parity "$(CASE)"
	./$(CUDA_BUILD)/tests/cuda/test_cuda_infer "$(CASE)"
	@if [ -z "$(CASE)" ]; then SKIPLM=$(CURDIR)/$(CUDA_BUILD)/skiplm bash tests/cuda/test_cuda_cli.sh; fi
# The same tests with the CUDA sources on the CPU emulator (no GPU, no nvcc; slow: minutes).
cuda-emu-test:
	@$(MAKE) --no-print-directory CUDA_EMU=1 build-cuda-emu/skiplm $(CUDA_TESTS:%=build-cuda-emu/tests/cuda/%)
	./build-cuda-emu/tests/cuda/test_cuda_parity "$(CASE)"
	./build-cuda-emu/tests/cuda/test_cuda_infer "$(CASE)"
	@if [ -z "$(CASE)" ]; then bash tests/cuda/test_cuda_cli.sh; fi
# The emulator tests under ASan + UBSan (build-cuda-emu-san/; slower still), with blocks and
# threads run in reverse order (SK_EMU_ORDER=reverse: data races show as wrong numbers).
# The parity and generation tests only by default; CLI=1 adds the command-line test.
cuda-emu-san-test:
	@$(MAKE) --no-print-directory CUDA_EMU=1 SAN=1 build-cuda-emu-san/skiplm $(CUDA_TESTS:%=build-cuda-emu-san/tests/cuda/%)
	SK_EMU_ORDER=reverse ./build-cuda-emu-san/tests/cuda/test_cuda_parity "$(CASE)"
	SK_EMU_ORDER=reverse ./build-cuda-emu-san/tests/cuda/test_cuda_infer "$(CASE)"
	@if [ "$(CLI)" = 1 ]; then SK_EMU_ORDER=reverse SKIPLM=$(CURDIR)/build-cuda-emu-san/skiplm bash tests/cuda/test_cuda_cli.sh; fi
# Multi-GPU data parallelism on the emulator: 2 ranks of build-cuda-emu-mpi/skiplm (NCCL
# emulated over MPI, and the host-memory path) against 2 CPU ranks of build-mpi/skiplm.
cuda-emu-mpi-test:
	@$(MAKE) --no-print-directory MPI=1 build-mpi/skiplm
	@$(MAKE) --no-print-directory CUDA_EMU=1 MPI=1 build-cuda-emu-mpi/skiplm
	bash tests/cuda/test_cuda_mpi.sh
.PHONY: cuda cuda-test cuda-emu-test cuda-emu-san-test cuda-emu-mpi-test
