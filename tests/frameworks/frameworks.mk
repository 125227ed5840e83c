# Real frameworks from PyPI (tests/frameworks/requirements.txt) in a cached virtual environment.
# `make frameworks` installs them once per requirements file and Python version, outside the
# build tree so that a clean clone reuses them (FRAMEWORKS_CACHE, default ~/.cache/gpucap);
# `make test` runs it first, and frameworks.sh skips its rows, saying why, when they are absent.

FRAMEWORKS_CACHE ?= $(HOME)/.cache/gpucap
FRAMEWORKS_KEY := $(shell { cat tests/frameworks/requirements.txt; python3 --version 2>&1; } \
                    | cksum | cut -d' ' -f1)
FRAMEWORKS_VENV ?= $(FRAMEWORKS_CACHE)/frameworks-$(FRAMEWORKS_KEY)
export FRAMEWORKS_VENV

.PHONY: frameworks
frameworks:
	$(Q)tests/frameworks/install.sh $(FRAMEWORKS_VENV)

TEST_SCRIPTS += tests/frameworks/frameworks.sh tests/frameworks/readme.sh
