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
# gpucap top reads the shared budgets' files and the processes' entries through the shim's own
# (self-contained) modules.
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/shim/accounting/budget.o $(BUILD)/obj/shim/accounting/roster.o
GPUCAP_CLI := $(BUILD)/gpucap
PROGRAMS += $(GPUCAP_CLI)

$(GPUCAP_CLI): private LINK_LIBS = -lm -ldl
$(GPUCAP_CLI): $(BUILD)/obj/scripts/gpucap.o $(CLI_OBJS) $(CONFIG_OBJS) $(REPORT_OBJS) \
               $(CORE_OBJS)
	$(link)

# ---- Tests: C unit tests of the modules, then bats tests of the installed-looking command.
# test_cli_json builds its reports from real pools, so it links the pool too.
CLI_TEST_NAMES := test_cli_json test_cli_trace test_cli_export test_cli_preload
CLI_TEST_BINS := $(CLI_TEST_NAMES:%=$(BUILD)/tests/%)
TEST_PROGRAMS += $(CLI_TEST_BINS)
TEST_DEPS += $(GPUCAP_CLI)

$(CLI_TEST_BINS): private LINK_LIBS = -lm -ldl
$(CLI_TEST_BINS): $(BUILD)/tests/test_cli_%: $(BUILD)/obj/tests/cli/test_%.o $(CLI_OBJS) \
                  $(CONFIG_OBJS) $(REPORT_OBJS) $(CORE_OBJS)
	$(link)

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

# install records, in $(LIBDIR)/installed-dirs, the folders it made (that did not exist), so that
# uninstall removes them again once empty, and no folder that was there before.
INSTALL_DIRS := '$(DESTDIR)$(BINDIR)' '$(DESTDIR)$(LIBDIR)' '$(DESTDIR)$(DOCDIR)/docs' \
                '$(DESTDIR)$(MAN1DIR)'
INSTALLED_DIRS := '$(DESTDIR)$(LIBDIR)/installed-dirs'

install: $(GPUCAP_CLI) $(BUILD)/libgpucap.so
	$(Q)for d in $(INSTALL_DIRS); do \
	  while [ ! -d "$$d" ]; do printf '%s\n' "$$d"; d=$$(dirname "$$d"); done; \
	done >'$(BUILD)/install-dirs'
	$(Q)install -d $(INSTALL_DIRS)
	install -m 0755 $(GPUCAP_CLI) '$(DESTDIR)$(BINDIR)/gpucap'
	install -m 0755 $(SHIM_LIB) '$(DESTDIR)$(LIBDIR)/libgpucap.so'
	$(if $(SPANK_PLUGIN),install -m 0755 $(SPANK_PLUGIN) '$(DESTDIR)$(LIBDIR)/gpucap_spank.so')
	install -m 0644 README.md '$(DESTDIR)$(DOCDIR)/README.md'
	install -m 0644 $(INSTALL_DOCS) '$(DESTDIR)$(DOCDIR)/docs/'
	install -m 0644 scripts/gpucap.1 '$(DESTDIR)$(MAN1DIR)/gpucap.1'
	$(Q)cat $(INSTALLED_DIRS) '$(BUILD)/install-dirs' 2>/dev/null | sort -u >'$(BUILD)/install-dirs.all'
	$(Q)install -m 0644 '$(BUILD)/install-dirs.all' $(INSTALLED_DIRS)

uninstall:
	rm -f '$(DESTDIR)$(BINDIR)/gpucap' '$(DESTDIR)$(LIBDIR)/libgpucap.so' \
	  '$(DESTDIR)$(LIBDIR)/gpucap_spank.so' \
	  '$(DESTDIR)$(DOCDIR)/README.md' $(INSTALL_DOCS:docs/%='$(DESTDIR)$(DOCDIR)/docs/%') \
	  '$(DESTDIR)$(MAN1DIR)/gpucap.1'
	$(Q)made=$$(cat $(INSTALLED_DIRS) 2>/dev/null); rm -f $(INSTALLED_DIRS); \
	  printf '%s\n' "$$made" '$(DESTDIR)$(DOCDIR)/docs' '$(DESTDIR)$(DOCDIR)' '$(DESTDIR)$(LIBDIR)' | \
	  awk 'NF { print length($$0) "\t" $$0 }' | sort -rn | cut -f 2- | \
	  while IFS= read -r d; do rmdir "$$d" 2>/dev/null || true; done

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
