#!/bin/sh
# Prints the path of NVIDIA's nvml.h (the NVML API header) if one is installed, else nothing:
# $NVML_H; build/nvml/include/nvml.h (what `make nvml-header` fetches from PyPI's
# nvidia-nvml-dev); $CUDA_HOME/include, /usr/local/cuda/include, /usr/include; the include
# folders of an installed nvidia-nvml-dev wheel (pip install nvidia-nvml-dev).
# Usage: tests/fakecuda/nvml/find-header.sh   (POSIX sh; exit status 0 when found, 1 when not)
top=$(cd "$(dirname "$0")/../../.." && pwd)
for f in "${NVML_H:-}" "$top/build/nvml/include/nvml.h" \
  "${CUDA_HOME:-/usr/local/cuda}/include/nvml.h" /usr/local/cuda/include/nvml.h \
  /usr/include/nvml.h; do
  if [ -n "$f" ] && [ -r "$f" ]; then
    echo "$f"
    exit 0
  fi
done
for d in $(python3 -c 'import sys; print(" ".join(p for p in sys.path if p))' 2>/dev/null); do
  for f in "$d"/nvidia/*/include/nvml.h; do
    if [ -r "$f" ]; then
      echo "$f"
      exit 0
    fi
  done
done
exit 1
