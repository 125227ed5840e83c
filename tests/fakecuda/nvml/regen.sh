#!/bin/sh
# Regenerates exports.txt, the fake NVML's list of exported names, from NVIDIA's nvml.h: every
# function the header declares (after `DECLDIR`), the versioned names (nvmlInit_v2, ...) and the
# legacy ones it declares under NVML_NO_UNVERSIONED_FUNC_DEFS (nvmlInit, ...) alike, as NVIDIA's
# libnvidia-ml.so.1 exports both. Sorted in the C locale.
# Usage: tests/fakecuda/nvml/regen.sh [OUTDIR]   (nvml.h found by find-header.sh; OUTDIR
# defaults to the directory of this script). POSIX sh + grep + sed + sort only.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
LC_ALL=C
export LC_ALL
if ! header=$("$here/find-header.sh"); then
  echo "regen.sh: error: no nvml.h found (run 'make nvml-header' or set NVML_H)" >&2
  exit 1
fi
grep -o 'DECLDIR[^(;]*(' "$header" |
  sed -n 's/^DECLDIR[ *a-z]*[ *]\(nvml[A-Za-z0-9_]*\) *($/\1/p' | sort -u >"$out/exports.txt.tmp"
mv "$out/exports.txt.tmp" "$out/exports.txt"
