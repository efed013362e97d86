# Makefile: builds libemp, the tools and the tests into build/; `make check` runs every test.
CC      ?= gcc
CLANG   ?= clang
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g -Wall -Wextra -Wno-unused-parameter -fPIC -pthread
CPPFLAGS += -D_GNU_SOURCE -Ifirmware -Idriver -Iconf -Ilibemp -Itests
LDLIBS  += -lev -lpthread -ldl

B       := build
FW_SRC  := $(sort $(wildcard firmware/*.c))
DRV_SRC := $(sort $(wildcard driver/*.c))
CONF_SRC:= $(sort $(wildcard conf/*.c))
LIB_SRC := $(sort $(wildcard libemp/*.c))
CORE_SRC:= $(FW_SRC) $(DRV_SRC) $(CONF_SRC) $(LIB_SRC)
CORE_OBJ:= $(CORE_SRC:%.c=$(B)/obj/%.o)
UNIT_SRC:= $(sort $(wildcard tests/unit/*.c)) tests/runner.c
TOOLS   := $(patsubst tools/%.c,$(B)/bin/%,$(sort $(wildcard tools/*.c)))
HDRS    := $(wildcard firmware/*.h driver/*.h conf/*.h libemp/*.h tests/*.h)

.PHONY: all deps test-unit test-asan fuzz-smoke fuzz test-ns check demo clean install
all: $(B)/lib/libemp.so $(B)/lib/libemp.a $(TOOLS) $(B)/tests/test-unit

$(B)/obj/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(B)/lib/libemp.so: $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $^ $(LDLIBS)

$(B)/lib/libemp.a: $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(B)/bin/%: tools/%.c $(B)/lib/libemp.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(B)/lib/libemp.a $(LDLIBS) -lm

$(B)/tests/test-unit: $(UNIT_SRC) $(B)/lib/libemp.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(UNIT_SRC) -o $@ $(B)/lib/libemp.a $(LDLIBS)

# The unit suite under AddressSanitizer and UndefinedBehaviorSanitizer.
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
$(B)/tests/test-unit-asan: $(UNIT_SRC) $(CORE_SRC) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -O1 -g -pthread $(SAN) -DEMP_SANITIZE $(UNIT_SRC) $(CORE_SRC) -o $@ $(LDLIBS)

# libFuzzer targets (clang): one per parser.
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZERS  := $(patsubst tests/fuzz/%.c,$(B)/fuzz/%,$(FUZZ_SRC))
$(B)/fuzz/%: tests/fuzz/%.c $(CORE_SRC) $(HDRS)
	@mkdir -p $(dir $@)
	$(CLANG) $(CPPFLAGS) -O1 -g -pthread -fsanitize=fuzzer,address,undefined $< $(CORE_SRC) -o $@ $(LDLIBS)

FUZZ_SECONDS ?= 10
fuzz-smoke: $(FUZZERS)
	@for f in $(FUZZERS); do n=$$(basename $$f); mkdir -p $(B)/corpus/$$n; \
	  cp -n tests/fuzz/corpus/$$n/* $(B)/corpus/$$n/ 2>/dev/null; \
	  echo "fuzz $$n for $(FUZZ_SECONDS)s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $(B)/corpus/$$n 2>$(B)/fuzz/$$n.log \
	    || { tail -40 $(B)/fuzz/$$n.log; exit 1; }; \
	  grep -E 'stat::number_of_executed_units' $(B)/fuzz/$$n.log; done
fuzz:
	$(MAKE) fuzz-smoke FUZZ_SECONDS=$${FUZZ_SECONDS:-300}

deps:
	@bash scripts/deps

test-unit: $(B)/tests/test-unit
	$(B)/tests/test-unit

test-asan: $(B)/tests/test-unit-asan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 EMP_TEST_TIMEOUT_SCALE=3 $(B)/tests/test-unit-asan

test-ns: all
	bash tests/ns/run

check: deps
	$(MAKE) all
	$(MAKE) test-unit
	$(MAKE) test-asan
	$(MAKE) fuzz-smoke
	$(MAKE) test-ns

clean:
	rm -rf $(B)
