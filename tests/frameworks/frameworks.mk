# Real frameworks from PyPI in cached virtual environments, one per requirements file:
# requirements.txt (PyTorch, CuPy, numba-cuda, cuda-python), requirements-tensorflow.txt
# (TensorFlow with its CUDA 12 libraries, which would clash with torch's CUDA 13 ones) and
# requirements-jax.txt (JAX with its CUDA 13 plugin). `make frameworks` installs each once per
# requirements file and Python version, outside the build tree so that a clean clone reuses them
# (FRAMEWORKS_CACHE, default ~/.cache/gpucap), under a lock so that concurrent runs wait for each
# other; `make test` runs it first, and the rows skip, saying why, when an environment is absent.
# Setting FRAMEWORKS_VENV, TENSORFLOW_VENV or JAX_VENV empty skips its rows.

FRAMEWORKS_CACHE ?= $(HOME)/.cache/gpucap
frameworks_key = $(shell { cat tests/frameworks/$(1); python3 --version 2>&1; } | cksum | \
                   cut -d' ' -f1)
FRAMEWORKS_VENV ?= $(FRAMEWORKS_CACHE)/frameworks-$(call frameworks_key,requirements.txt)
TENSORFLOW_VENV ?= $(FRAMEWORKS_CACHE)/tensorflow-$(call frameworks_key,requirements-tensorflow.txt)
JAX_VENV ?= $(FRAMEWORKS_CACHE)/jax-$(call frameworks_key,requirements-jax.txt)
export FRAMEWORKS_VENV TENSORFLOW_VENV JAX_VENV

# The three install at once (each waits only for another run installing the same environment):
# the downloads overlap.
.PHONY: frameworks
frameworks:
	$(Q)tests/frameworks/install.sh "$(FRAMEWORKS_VENV)" tests/frameworks/requirements.txt \
	  "PyTorch, CuPy, numba-cuda, cuda-python; about 6 GB" & \
	tests/frameworks/install.sh "$(TENSORFLOW_VENV)" tests/frameworks/requirements-tensorflow.txt \
	  "TensorFlow 2.21 and its CUDA 12 libraries; about 6 GB" & \
	tests/frameworks/install.sh "$(JAX_VENV)" tests/frameworks/requirements-jax.txt \
	  "JAX 0.10.2 and its CUDA 13 plugin; about 4.5 GB" & \
	wait

TEST_SCRIPTS += tests/frameworks/frameworks.sh tests/frameworks/readme.sh \
                tests/frameworks/tensorflow.sh tests/frameworks/jax.sh tests/frameworks/install_lock.sh
