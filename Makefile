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
HDRS    := $(wildcard firmware/*.h driver/*.h conf/*.h libemp/*.h tests/*.h tools/*.h)
# the sockets shim (libempsock.so, emp-run) and its socket test programs
PRE_SRC  := $(filter-out preload/emp-run.c,$(sort $(wildcard preload/*.c)))
PRE_OBJ  := $(PRE_SRC:%.c=$(B)/obj/%.o)
PRE_HDRS := $(wildcard preload/*.h)
SOCK_PROGS := $(patsubst preload/tests/%.c,$(B)/tests/sock/%,$(sort $(wildcard preload/tests/*.c)))
SHIM_TEST_SRC := $(sort $(wildcard tests/shim/*.c)) tests/runner.c tests/unit/harness.c
NS_PROGS := $(patsubst tests/ns/progs/%.c,$(B)/tests/ns/%,$(sort $(wildcard tests/ns/progs/*.c)))

.PHONY: all deps test-unit test-asan fuzz-smoke fuzz test-ns check demo clean install
all: $(B)/lib/libemp.so $(B)/lib/libemp.a $(TOOLS) $(B)/tests/test-unit $(B)/tests/test-shim \
	$(B)/lib/libempsock.so $(B)/lib/libempsock-asan.so $(B)/bin/emp-run $(SOCK_PROGS) $(NS_PROGS)

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

$(B)/tests/test-shim-asan: $(SHIM_TEST_SRC) $(PRE_SRC) $(CORE_SRC) $(HDRS) $(PRE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Ipreload -O1 -g -pthread $(SAN) -DEMP_SANITIZE $(SHIM_TEST_SRC) $(PRE_SRC) $(CORE_SRC) -o $@ $(LDLIBS)

# libFuzzer targets (clang): one per parser.
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZERS  := $(patsubst tests/fuzz/%.c,$(B)/fuzz/%,$(FUZZ_SRC))
$(B)/fuzz/%: tests/fuzz/%.c $(CORE_SRC) $(HDRS) $(wildcard tests/fuzz/*.h)
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

# T=NAME runs one test (or those whose name contains it); the runners' --list names them
UNIT_BINS := $(B)/tests/test-unit $(B)/tests/test-shim
test-unit: $(UNIT_BINS)
	@ran=0; for t in $(UNIT_BINS); do \
	  if [ -z "$(T)" ] || $$t --list | grep -qF -- "$(T)"; then $$t $(T) || exit 1; ran=1; fi; done; \
	  [ $$ran = 1 ] || { echo "no test matches '$(T)' (--list shows the names)" >&2; exit 1; }

test-asan: $(B)/tests/test-unit-asan $(B)/tests/test-shim-asan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 EMP_TEST_TIMEOUT_SCALE=3 $(B)/tests/test-unit-asan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 EMP_TEST_TIMEOUT_SCALE=3 $(B)/tests/test-shim-asan

test-ns: all
	bash tests/ns/run $(T)

check: deps
	$(MAKE) all
	$(MAKE) test-unit
	$(MAKE) test-asan
	$(MAKE) fuzz-smoke
	$(MAKE) test-ns

clean:
	rm -rf $(B)

# ---- preload: sockets over EMP (libempsock.so, emp-run, socket test programs) ----


$(B)/obj/preload/%.o: preload/%.c $(HDRS) $(PRE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Ipreload $(CFLAGS) -c $< -o $@

# The shim carries its own copy of the engine so that LD_PRELOAD needs one file.
$(B)/lib/libempsock.so: $(PRE_OBJ) $(CORE_OBJ) preload/exports.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,--version-script=preload/exports.map -o $@ $(PRE_OBJ) $(CORE_OBJ) $(LDLIBS)

# The shim under AddressSanitizer (tests/ns t_sock_closerace: EMP_SOCK_LIB, ASAN_OPTIONS=verify_asan_link_order=0).
$(B)/lib/libempsock-asan.so: $(PRE_SRC) $(CORE_SRC) $(HDRS) $(PRE_HDRS) preload/exports.map
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Ipreload -O1 -g -fPIC -pthread -fsanitize=address -fno-omit-frame-pointer -shared \
		-Wl,--version-script=preload/exports.map $(PRE_SRC) $(CORE_SRC) -o $@ $(LDLIBS)

$(B)/bin/emp-run: preload/emp-run.c preload/elfkind.h $(CONF_SRC) conf/conf.h driver/sys.c driver/sys.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) preload/emp-run.c $(CONF_SRC) driver/sys.c -o $@ -ldl

# the shim's own tests, linked with its objects (its internals are theirs to call)
$(B)/tests/test-shim: $(SHIM_TEST_SRC) $(PRE_OBJ) $(CORE_OBJ) $(HDRS) $(PRE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Ipreload $(CFLAGS) $(SHIM_TEST_SRC) $(PRE_OBJ) $(CORE_OBJ) -o $@ $(LDLIBS)

$(B)/tests/ns/%: tests/ns/progs/%.c $(B)/lib/libemp.a $(HDRS) $(wildcard tests/ns/progs/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(B)/lib/libemp.a $(LDLIBS)

$(B)/tests/sock/%: preload/tests/%.c preload/tests/socklib.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@

demo:
	@bash scripts/demo
# ---- end preload ----

# ---- install: make install [PREFIX=/usr/local] [DESTDIR=] [SYSCONFDIR=/etc]; make uninstall ----
# Installs libemp.so/.a (and libempsock.so, emp-run if built), the public
# headers into $(INCLUDEDIR)/emp (pkg-config adds -I for it: #include <emp.h>),
# libemp.pc, the commands of build/bin, the man pages and
# $(SYSCONFDIR)/emp/emp.conf.example. The library itself reads
# /etc/emp/emp.conf (or $EMP_CONF) whatever SYSCONFDIR is.
PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
MANDIR       ?= $(PREFIX)/share/man
SYSCONFDIR   ?= /etc
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL      ?= install
EMP_VERSION  ?= 0.1.0
INST_HDRS    := libemp/emp.h libemp/stats.h firmware/fw.h firmware/proto.h conf/conf.h driver/driver.h driver/sim.h
INST_CMDS     = $(notdir $(TOOLS)) emp-run
INST_MAN     := $(sort $(wildcard man/*.[135]))
PC_SUBST      = -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(EMP_VERSION)|' \
		-e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|' \
		-e 's|@INCLUDEDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|'

.PHONY: uninstall
install: $(B)/lib/libemp.so $(B)/lib/libemp.a $(TOOLS)
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/emp \
		$(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(SYSCONFDIR)/emp
	$(INSTALL) -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)/
	$(INSTALL) -m 755 $(B)/lib/libemp.so $(DESTDIR)$(LIBDIR)/
	$(INSTALL) -m 644 $(B)/lib/libemp.a $(DESTDIR)$(LIBDIR)/
	if [ -f $(B)/lib/libempsock.so ]; then $(INSTALL) -m 755 $(B)/lib/libempsock.so $(DESTDIR)$(LIBDIR)/; fi
	if [ -f $(B)/bin/emp-run ]; then $(INSTALL) -m 755 $(B)/bin/emp-run $(DESTDIR)$(BINDIR)/; fi
	$(INSTALL) -m 644 $(INST_HDRS) $(DESTDIR)$(INCLUDEDIR)/emp/
	sed $(PC_SUBST) libemp/libemp.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/libemp.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/libemp.pc
	$(INSTALL) -m 644 conf/emp.conf.example $(DESTDIR)$(SYSCONFDIR)/emp/
	for m in $(INST_MAN); do s=$${m##*.}; $(INSTALL) -d $(DESTDIR)$(MANDIR)/man$$s && \
		$(INSTALL) -m 644 $$m $(DESTDIR)$(MANDIR)/man$$s/ || exit 1; done

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(INST_CMDS))
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,libemp.so libemp.a libempsock.so)
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/emp/,$(notdir $(INST_HDRS)))
	rm -f $(DESTDIR)$(PKGCONFIGDIR)/libemp.pc $(DESTDIR)$(SYSCONFDIR)/emp/emp.conf.example
	for m in $(INST_MAN); do rm -f $(DESTDIR)$(MANDIR)/man$${m##*.}/$${m##*/}; done
	rmdir $(DESTDIR)$(INCLUDEDIR)/emp $(DESTDIR)$(SYSCONFDIR)/emp 2>/dev/null || true
# ---- end install ----

# ---- bench: EMP sockets vs kernel TCP on a namespace cluster (root); full run: bash scripts/bench ----
.PHONY: bench
bench: all
	bash scripts/bench --quick
# ---- end bench ----

# ---- check-valgrind: namespace transfers with both ends under valgrind memcheck (root) ----
# emp-verify -s/-c over libemp, and socat under emp-run --strict; any memcheck error or
# definite/possible leak fails (suppressions, each with its reason: tests/ns/progs/valgrind.supp).
.PHONY: check-valgrind
check-valgrind: all
	bash tests/ns/progs/valgrind.sh
# ---- end check-valgrind ----
