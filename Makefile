# celer build. `make` builds build/celer and build/libceler.a; `make test` installs
# missing Debian packages, builds and runs every test; SAN=1 builds into build-san/
# with AddressSanitizer + UndefinedBehaviorSanitizer.
CC      ?= cc
SAN     ?= 0
OPT     ?= -O2
BUILD   ?= build
ifeq ($(SAN),1)
B       := $(BUILD)-san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
OPT     := -O1 -g
else
B       := $(BUILD)
SANFLAGS :=
endif

CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wpointer-arith -Werror $(OPT) -g -pthread -Iinclude -Isrc $(SANFLAGS) $(EXTRA_CFLAGS)
LDLIBS  := -ljansson -lpcre2-8 -lutf8proc -lmicrohttpd -lm -ldl -pthread
# celer pull downloads over HTTPS with libcurl (Debian's libcurl4-openssl-dev); --as-needed:
# binaries that never download (tests, the CUDA test programs) do not need libcurl.so.
LDLIBS  += -Wl,--as-needed -lcurl
# Line editing and history in `celer run` (Debian's libedit-dev, which `make deps`
# installs): on wherever its header is; EDITLINE=0 builds without.
EDITLINE ?= $(if $(wildcard /usr/include/histedit.h),1,0)
ifeq ($(EDITLINE),1)
CFLAGS  += -DCELER_HAVE_EDITLINE
LDLIBS  += -ledit
endif

# CUDA is built where nvcc exists (CI compiles it; `make test-cuda` runs it on a GPU).
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

LIB_SRC := $(sort $(wildcard src/base/*.c src/io/*.c src/tensor/*.c src/backend/*.c src/backend/cpu/*.c \
                             src/kv/*.c src/model/*.c src/engine/*.c src/grammar/*.c src/tokenizer/*.c src/server/*.c))
CLI_SRC := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(B)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(B)/obj/%.o)
TESTS   := $(TEST_SRC:tests/%.c=$(B)/tests/%)

all: $(B)/celer $(B)/libceler.a

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# Kernels for AVX2/FMA/F16C live in *_avx2.c, for AVX-512 F/BW/VL/DQ in *_avx512.c;
# cpu_level() picks them at run time, so the binary runs on any x86-64.
$(B)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -mavx2 -mfma -mf16c -MMD -MP -c $< -o $@
$(B)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -MMD -MP -c $< -o $@
# *_avx512dot.c add the dot-product extensions (AVX512_BF16, AVX512_VNNI), run only where present.
$(B)/obj/%_avx512dot.o: %_avx512dot.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni -MMD -MP -c $< -o $@

# The version: one place, the VERSION file; the commit from `git describe --always --dirty`
# when the tree is a git checkout ("unknown" otherwise). version.h is rewritten only when
# either changes, so a rebuild recompiles main.c only then.
CELER_VERSION := $(strip $(file < VERSION))
CELER_COMMIT  := $(or $(shell git describe --always --dirty 2>/dev/null),unknown)
$(B)/gen/version.h: FORCE
	@mkdir -p $(dir $@)
	@printf '#define CELER_VERSION "%s"\n#define CELER_COMMIT "%s"\n' '$(CELER_VERSION)' '$(CELER_COMMIT)' >$@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(B)/obj/src/cli/main.o: $(B)/gen/version.h
$(B)/obj/src/cli/main.o: CFLAGS += -I$(B)/gen

# The chat page of `celer serve` (GET /): src/server/page/chat.html as a C byte list
# (xxd, Debian's xxd package) that src/server/page.c includes.
$(B)/gen/chat_html.inc: src/server/page/chat.html
	@mkdir -p $(dir $@)
	xxd -i <$< >$@.tmp && mv $@.tmp $@
$(B)/obj/src/server/page.o: $(B)/gen/chat_html.inc
$(B)/obj/src/server/page.o: CFLAGS += -I$(B)/gen

$(B)/libceler.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/celer: $(CLI_OBJ) $(B)/libceler.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(B)/libceler.a $(LDLIBS)

$(B)/tests/%: tests/%.c tests/harness.h $(B)/libceler.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(B)/libceler.a $(LDLIBS)

deps:
	@scripts/deps.sh

# Big fixture files are committed xz-compressed; tests read them unpacked.
FIXTURE_XZ := $(wildcard tests/fixtures/*/*/*.xz)
FIXTURES   := $(FIXTURE_XZ:.xz=)
$(FIXTURES): %: %.xz
	xz -dkc $< > $@.tmp && mv $@.tmp $@

# Kernel micro-benchmarks (bench/*.c) are built with the tests, so a change to an
# interface they use breaks the build instead of leaving them to rot.
BENCHES := $(patsubst bench/%.c,$(B)/%,$(filter-out bench/bench_cuda_%.c,$(wildcard bench/*.c)))
tests: $(TESTS) $(BENCHES) $(B)/celer $(FIXTURES) $(if $(and $(NVCC),$(filter 0,$(SAN))),cuda)

test: deps
	@$(MAKE) --no-print-directory tests SAN=$(SAN) BUILD=$(BUILD)
	@tests/run.sh $(B)

# The README's run command: chat with the embedded default model (models/default).
# Installs missing Debian packages first (as `make test` does), then builds in a
# second make so that the Makefile sees the headers just installed (EDITLINE).
run: deps
	@$(MAKE) --no-print-directory $(B)/celer SAN=$(SAN) BUILD=$(BUILD)
	$(B)/celer run

# Kernel micro-benchmarks (bench/*.c, BENCHES above): `make bench`, then e.g. build/bench_mm -f q4 -t 2.
bench: $(BENCHES)
$(B)/bench_%: bench/bench_%.c $(B)/libceler.a
	$(CC) $(CFLAGS) -o $@ $< $(B)/libceler.a $(LDLIBS)

clean:
	rm -rf build build-san

# Coverage-guided fuzzing of every parser (clang + libFuzzer): FUZZ_SECONDS each.
FUZZ_SECONDS ?= 60
fuzz:
	@fuzz/run.sh $(FUZZ_SECONDS)

# Server soak (not in `make test`): SOAK_SECONDS of mixed concurrent load against
# `celer serve` on models/default, then correctness, RSS and exit checks (tests/server/soak.py).
SOAK_SECONDS ?= 600
soak: $(B)/celer
	SOAK_SECONDS=$(SOAK_SECONDS) python3 tests/server/soak.py $(B)/celer

.PHONY: all deps tests test run clean fuzz soak bench FORCE
FORCE:
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)

# ---- CUDA (built where nvcc exists; `make test-cuda` runs on a machine with a GPU) ----
# The CUDA backend is a shared library, libceler-cuda.so, next to the celer binary;
# celer loads it with dlopen when asked for a GPU (or finds one), so the binary itself
# needs no CUDA library to run.
# CUDA_PTX=0 leaves out the compute_90 PTX (the H200 runs the sm_90a code): a smaller
# library for bench/gpu/pack.sh, whose archive travels with the tree under 64 MiB.
CUDA_PTX ?= 1
NVFLAGS := -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a $(if $(filter 0,$(CUDA_PTX)),,-gencode=arch=compute_90,code=compute_90) \
           -Iinclude -Isrc -Xcompiler -fPIC,-Wall,-Wextra,-Werror -Werror all-warnings
CUDA_SRC := $(sort $(wildcard src/backend/cuda/*.cu))
CUDA_OBJ := $(CUDA_SRC:%.cu=$(B)/obj/%.o)
CUDA_C_SRC := $(sort $(wildcard src/backend/cuda/*.c))
CUDA_C_OBJ := $(CUDA_C_SRC:%.c=$(B)/obj/%.o)
# Static jansson/pcre2/utf8proc so the GPU machine, which lacks them, can run these binaries.
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcublas -lcudart_static -ldl -lrt -lstdc++ \
               -Wl,-Bstatic -ljansson -lpcre2-8 -lutf8proc -Wl,-Bdynamic -lm -pthread

$(B)/obj/%.o: %.cu $(wildcard src/backend/cuda/*.cuh src/backend/cuda/*.h src/backend/*.h src/base/settings.h src/tensor/weight.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(CUDA_C_OBJ): $(B)/obj/%.o: %.c $(wildcard src/backend/cuda/*.h src/backend/*.h src/base/settings.h src/tensor/weight.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -I$(CUDA_HOME)/include -c $< -o $@

$(B)/libceler_cuda.a: $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The library links nothing of libceler: what it calls of the program (err_*, settings,
# the CPU router) comes through the table its entry is given (host.c); -z defs fails
# the link on any symbol left undefined.
$(B)/libceler-cuda.so: $(CUDA_OBJ) $(CUDA_C_OBJ)
	$(CC) -shared -Wl,-z,defs -o $@ $^ -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart_static -ldl -lrt -lstdc++ -lm -pthread

$(B)/tests/cuda/test_cuda_kernels: tests/cuda/test_cuda_kernels.c $(B)/libceler_cuda.a $(B)/libceler.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -Itests -o $@ $< $(B)/libceler_cuda.a $(B)/libceler.a $(CUDA_LDLIBS)

$(B)/tests/cuda/test_cuda_qgemm: tests/cuda/test_cuda_qgemm.c tests/harness.h $(B)/libceler_cuda.a $(B)/libceler.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -Itests -o $@ $< $(B)/libceler_cuda.a $(B)/libceler.a $(CUDA_LDLIBS)

$(B)/tests/cuda/test_cuda_sample: tests/cuda/test_cuda_sample.c tests/harness.h $(B)/libceler_cuda.a $(B)/libceler.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -Itests -o $@ $< $(B)/libceler_cuda.a $(B)/libceler.a $(CUDA_LDLIBS)

# GPU micro-benchmarks: CUDA and cuBLAS only (no libceler)
$(B)/bench_cuda_%: bench/bench_cuda_%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -o $@ $< -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart_static -ldl -lrt -lm -pthread

$(B)/tests/cuda/test_cuda_kv: tests/cuda/test_cuda_kv.c tests/harness.h tests/fixture_util.h $(B)/libceler.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(B)/libceler.a $(LDLIBS)

$(B)/tests/cuda/test_cuda_precision: tests/cuda/test_cuda_precision.c tests/harness.h tests/fixture_util.h tests/precision_envelope.h $(B)/libceler.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(B)/libceler.a $(LDLIBS)

$(B)/tests/cuda/test_cuda_graph: tests/cuda/test_cuda_graph.c tests/harness.h tests/fixture_util.h $(B)/libceler.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(B)/libceler.a $(LDLIBS)

$(B)/tests/cuda/test_cuda_decode: tests/cuda/test_cuda_decode.c tests/harness.h $(B)/libceler.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(B)/libceler.a $(LDLIBS)

$(B)/tests/cuda/test_cuda_batch: tests/cuda/test_cuda_batch.c tests/harness.h tests/fixture_util.h $(B)/libceler.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(B)/libceler.a $(LDLIBS)

cuda: $(B)/tests/cuda/test_cuda_qgemm $(B)/tests/cuda/test_cuda_batch $(B)/tests/cuda/test_cuda_decode $(B)/tests/cuda/test_cuda_graph $(B)/tests/cuda/test_cuda_kernels $(B)/tests/cuda/test_cuda_sample $(B)/tests/cuda/test_cuda_kv $(B)/tests/cuda/test_cuda_precision $(B)/libceler-cuda.so $(B)/bench_cuda_products

# On the GPU machine: kernel tests, every model fixture on the GPU, then the kernel benchmark.
test-cuda: cuda tests
	$(B)/tests/cuda/test_cuda_kernels
	$(B)/tests/cuda/test_cuda_sample
	$(B)/tests/cuda/test_cuda_qgemm
	CELER_DEVICE=cuda $(B)/tests/test_fixtures_models
	$(B)/tests/cuda/test_cuda_precision
	$(B)/tests/cuda/test_cuda_kv
	$(B)/tests/cuda/test_cuda_graph
	$(B)/tests/cuda/test_cuda_decode
	$(B)/tests/cuda/test_cuda_batch
	$(B)/tests/cuda/test_cuda_kernels --bench-only

.PHONY: cuda test-cuda
