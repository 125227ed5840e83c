# The gpucap command-line tool ($(BUILD)/gpucap), its tests, `make install` / `make uninstall`
# and `make demo`. Include after core/report.mk: the tool links CONFIG_OBJS (the settings
# parser the shim uses) and REPORT_OBJS (the shim's report formatter, which needs CORE_OBJS).
#
# Fragments included after this one define SHIM_LIB ($(BUILD)/libgpucap.so) and DEMO_BIN
# ($(BUILD)/tests/workload); prerequisites are expanded when read, so they are named by path
# here, while recipes (expanded when run) use the variables.

CLI_SRCS := scripts/cli.c scripts/run.c scripts/preload.c scripts/json.c scripts/rjson.c \
            scripts/tracecsv.c scripts/timeline.c scripts/plot.c scripts/pickle.c \
            scripts/export.c scripts/target.c scripts/outpath.c scripts/driver.c scripts/top.c \
            scripts/found.c scripts/cdi.c
# gpucap top reads the shared budgets' ledgers through the shim's own (self-contained) module.
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/shim/budget.o
GPUCAP_CLI := $(BUILD)/gpucap
PROGRAMS += $(GPUCAP_CLI)

$(GPUCAP_CLI): $(BUILD)/obj/scripts/gpucap.o $(CLI_OBJS) $(CONFIG_OBJS) $(REPORT_OBJS) \
               $(CORE_OBJS)
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) -lm -ldl

# ---- Tests: C unit tests of the modules, then bats tests of the installed-looking command.
# test_cli_json builds its reports from real pools, so it links the pool too.
CLI_TEST_NAMES := test_cli_json test_cli_trace test_cli_export test_cli_preload
CLI_TEST_BINS := $(CLI_TEST_NAMES:%=$(BUILD)/tests/%)
TEST_PROGRAMS += $(CLI_TEST_BINS)
TEST_DEPS += $(GPUCAP_CLI)

$(CLI_TEST_BINS): $(BUILD)/tests/test_cli_%: $(BUILD)/obj/tests/cli/test_%.o $(CLI_OBJS) \
                  $(CONFIG_OBJS) $(REPORT_OBJS) $(CORE_OBJS)
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) -lm -ldl

# bats prints TAP when its output is not a terminal, as under prove. Without bats the CLI tests
# cannot run: one TAP script reports them skipped, with the fix (CI installs bats first).
ifneq ($(shell command -v bats 2>/dev/null),)
  TEST_SCRIPTS += $(sort $(wildcard tests/cli/*.bats))
else
  TEST_SCRIPTS += tests/cli/nobats.sh
endif

# ---- make install / make uninstall. The installed gpucap finds the library at
# ../lib/gpucap/libgpucap.so from its own directory (scripts/preload.h), so BINDIR and LIBDIR
# keep that relation; DESTDIR stages the whole tree elsewhere.
BINDIR := $(PREFIX)/bin
LIBDIR := $(PREFIX)/lib/gpucap
DOCDIR := $(PREFIX)/share/doc/gpucap
MAN1DIR := $(PREFIX)/share/man/man1
INSTALL_DOCS := $(sort $(wildcard docs/*.md))

install: $(GPUCAP_CLI) $(BUILD)/libgpucap.so
	$(Q)install -d '$(DESTDIR)$(BINDIR)' '$(DESTDIR)$(LIBDIR)' '$(DESTDIR)$(DOCDIR)/docs' \
	  '$(DESTDIR)$(MAN1DIR)'
	install -m 0755 $(GPUCAP_CLI) '$(DESTDIR)$(BINDIR)/gpucap'
	install -m 0755 $(SHIM_LIB) '$(DESTDIR)$(LIBDIR)/libgpucap.so'
	install -m 0644 README.md '$(DESTDIR)$(DOCDIR)/README.md'
	install -m 0644 $(INSTALL_DOCS) '$(DESTDIR)$(DOCDIR)/docs/'
	install -m 0644 scripts/gpucap.1 '$(DESTDIR)$(MAN1DIR)/gpucap.1'

uninstall:
	rm -f '$(DESTDIR)$(BINDIR)/gpucap' '$(DESTDIR)$(LIBDIR)/libgpucap.so' \
	  '$(DESTDIR)$(DOCDIR)/README.md' $(INSTALL_DOCS:docs/%='$(DESTDIR)$(DOCDIR)/docs/%') \
	  '$(DESTDIR)$(MAN1DIR)/gpucap.1'
	rmdir '$(DESTDIR)$(LIBDIR)' '$(DESTDIR)$(DOCDIR)/docs' '$(DESTDIR)$(DOCDIR)' 2>/dev/null || true

# ---- make demo: the bundled workload over the fake driver, uncapped, then under gpucap run
# with a cap, its exit report, and the timeline picture drawn from its trace.
DEMO_DIR := $(BUILD)/demo
DEMO_RUN := $(GPUCAP_CLI) run --limit 2GiB --json $(DEMO_DIR)/report.json \
            --trace $(DEMO_DIR)/trace.csv --
DEMO_PLOT := $(GPUCAP_CLI) plot $(DEMO_DIR)/trace.csv --json $(DEMO_DIR)/report.json \
             --title 'make demo: the workload capped at 2 GiB' -o $(DEMO_DIR)/timeline.svg

demo: $(GPUCAP_CLI) $(BUILD)/libgpucap.so $(BUILD)/tests/workload
	@mkdir -p $(DEMO_DIR)
	@echo "== The workload on a 16 GiB (fake) GPU, without gpucap:"
	@LD_LIBRARY_PATH=$(BUILD)/fakecuda $(DEMO_BIN)
	@echo
	@echo "== The same workload under gpucap, capped at 2 GiB:"
	@echo "\$$ $(DEMO_RUN) $(DEMO_BIN)"
	@LD_LIBRARY_PATH=$(BUILD)/fakecuda $(DEMO_RUN) $(DEMO_BIN)
	@echo
	@echo "== Its timeline:"
	@echo "\$$ $(DEMO_PLOT)"
	@$(DEMO_PLOT)
	@echo "Open $(abspath $(DEMO_DIR))/timeline.svg in a browser to see it."
