# skiplm build. `make` builds the library and the CLI, `make test` runs the suite.
# Options: make SAN=1 (ASan+UBSan build in build-san/), make BLAS=openblas|none.
CC      ?= cc
BUILD   ?= build
OPT     ?= -O3 -march=native
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc -fopenmp $(OPT)
LDLIBS  += -lm -fopenmp
BLAS    ?= openblas

ifeq ($(SAN),1)
BUILD   := build-san
OPT     := -O1 -g -fno-omit-frame-pointer
CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDLIBS  += -fsanitize=address,undefined
endif

ifeq ($(BLAS),openblas)
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/openblas-pthread)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
CFLAGS  += -DSK_HAVE_BLAS $(BLAS_CFLAGS)
LDLIBS  += $(BLAS_LIBS)
endif

LIB_SRC  := $(wildcard src/*.c)
LIB_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/src/%.o)
CLI_SRC  := $(wildcard cli/*.c)
CLI_OBJ  := $(CLI_SRC:cli/%.c=$(BUILD)/cli/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_SRC := $(wildcard tests/tool_*.c)
TEST_BIN += $(TOOL_SRC:tests/%.c=$(BUILD)/tests/%)

all: $(BUILD)/libskiplm.a $(BUILD)/skiplm $(TEST_BIN)

$(BUILD)/src/%.o: src/%.c include/skiplm.h $(wildcard src/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/cli/%.o: cli/%.c include/skiplm.h $(wildcard src/*.h cli/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/libskiplm.a: $(LIB_OBJ)
	ar rcs $@ $^
$(BUILD)/skiplm: $(CLI_OBJ) $(BUILD)/libskiplm.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/tests/%: tests/%.c tests/test.h $(BUILD)/libskiplm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -UNDEBUG $< $(BUILD)/libskiplm.a -o $@ $(LDLIBS)

# The whole suite: C unit tests, PyTorch comparisons, CLI end-to-end tests.
test:
	@bash scripts/install_deps.sh
	@bash scripts/setup.sh >/dev/null
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bash tests/run_tests.sh

clean:
	rm -rf build build-san

.PHONY: all test clean

# Attention benchmark (not part of `all`): make bench-attention
$(BUILD)/bench/%: bench/%.c $(BUILD)/libskiplm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libskiplm.a -o $@ $(LDLIBS)
bench-attention: $(BUILD)/bench/bench_attention
.PHONY: bench-attention
