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

CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $(OPT) -g -pthread -Iinclude -Isrc $(SANFLAGS) $(EXTRA_CFLAGS)
LDLIBS  := -ljansson -lpcre2-8 -lutf8proc -lm -pthread

LIB_SRC := $(sort $(wildcard src/base/*.c src/io/*.c src/tensor/*.c src/backend/*.c src/backend/cpu/*.c \
                             src/kv/*.c src/model/*.c src/engine/*.c src/tokenizer/*.c src/api/*.c))
CLI_SRC := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(B)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(B)/obj/%.o)
TESTS   := $(TEST_SRC:tests/%.c=$(B)/tests/%)

all: $(B)/celer $(B)/libceler.a

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# Kernels for AVX2/FMA/F16C live in *_avx2.c and are chosen at run time.
$(B)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -mavx2 -mfma -mf16c -MMD -MP -c $< -o $@

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

tests: $(TESTS) $(B)/celer $(FIXTURES)

test: deps
	@$(MAKE) --no-print-directory tests SAN=$(SAN) BUILD=$(BUILD)
	@tests/run.sh $(B)

# The README's run command: a tiny model the repo synthesizes itself (no download).
run: $(B)/celer
	@[ -f $(B)/tiny/model.safetensors ] || $(B)/celer synth --shape tiny -o $(B)/tiny
	$(B)/celer generate -m $(B)/tiny --tokens 1,2,3,4 -n 24

clean:
	rm -rf build build-san

.PHONY: all deps tests test run clean
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
