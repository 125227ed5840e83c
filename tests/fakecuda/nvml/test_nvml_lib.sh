#!/bin/sh
# TAP test of the fake NVML as a library: it exports exactly the functions nvml.h declares
# (exports.txt, reproduced by regen.sh when an nvml.h is installed), each a function, under the
# soname libnvidia-ml.so.1 beside the fake driver; nvmldefs.h declares exactly the entry points
# nv_*.c implement; the names NCCL and PyTorch look up are there; and the CUDA driver version
# when no libcuda.so.1 can be loaded, or one without cuDriverGetVersion.
. "$TOP/tests/integ/lib.sh"
here=$TOP/tests/fakecuda/nvml
lib=$FAKE_DIR/libnvidia-ml.so.1
tmp=$WORK
export LC_ALL=C

[ -f "$lib" ]
ok $? "$lib exists"
readelf -d "$lib" | grep -q 'Library soname: \[libnvidia-ml.so.1\]'
ok $? "soname libnvidia-ml.so.1"
[ "$(readlink "$FAKE_DIR/libnvidia-ml.so")" = libnvidia-ml.so.1 ]
ok $? "libnvidia-ml.so -> libnvidia-ml.so.1"

nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort >"$tmp/all"
cmp -s "$tmp/all" "$here/exports.txt"
ok $? "the exported names are exactly exports.txt"
diff "$tmp/all" "$here/exports.txt" | head -5 | sed 's/^/# /'
is "$(nm -D --defined-only "$lib" | awk 'NF >= 3 && $2 != "T"' | wc -l | tr -d ' ')" 0 \
  "every export is a function"
is "$(wc -l <"$here/exports.txt" | tr -d ' ')" 436 "exports.txt lists nvml.h's 436 functions"
sort -c -u "$here/exports.txt" 2>/dev/null
ok $? "exports.txt is sorted (C locale) and unique"
for name in nvmlInit nvmlInit_v2 nvmlDeviceGetCount nvmlDeviceGetCount_v2 \
  nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetHandleByPciBusId \
  nvmlDeviceGetHandleByPciBusId_v2 nvmlDeviceGetPciInfo nvmlDeviceGetPciInfo_v2 \
  nvmlDeviceGetPciInfo_v3 nvmlDeviceGetComputeRunningProcesses \
  nvmlDeviceGetComputeRunningProcesses_v2 nvmlDeviceGetComputeRunningProcesses_v3 \
  nvmlDeviceGetNvLinkRemotePciInfo nvmlDeviceGetNvLinkRemotePciInfo_v2; do
  grep -qx "$name" "$tmp/all" || echo "$name" >>"$tmp/missing-versions"
done
[ ! -s "$tmp/missing-versions" ]
ok $? "the legacy and the versioned names are both exported"

# What NCCL 2.28 dlsym()s (misc/nvmlwrap.cc) and PyTorch's c10 DriverAPI looks up: implemented
# (a definition in nv_*.c), not catch-alls.
sed -n -e 's/^NV_API [^(]*[ *]\(nvml[A-Za-z0-9_]*\)(.*/\1/p' \
  -e 's/^NV_[A-Z]*(\(nvml[A-Za-z0-9_]*\),.*/\1/p' "$here"/nv_*.c | sort >"$tmp/defined"
for name in nvmlInit nvmlInit_v2 nvmlShutdown nvmlDeviceGetCount nvmlDeviceGetCount_v2 \
  nvmlDeviceGetHandleByPciBusId nvmlDeviceGetHandleByIndex nvmlDeviceGetIndex nvmlErrorString \
  nvmlDeviceGetNvLinkState nvmlDeviceGetNvLinkRemotePciInfo nvmlDeviceGetNvLinkCapability \
  nvmlDeviceGetCudaComputeCapability nvmlDeviceGetP2PStatus nvmlDeviceGetFieldValues \
  nvmlDeviceGetGpuFabricInfoV nvmlDeviceGetPlatformInfo nvmlSystemGetConfComputeState \
  nvmlSystemGetConfComputeSettings nvmlDeviceGetPciInfo_v3 nvmlDeviceGetPciInfoExt \
  nvmlDeviceGetPcieLinkMaxSpeed nvmlDeviceGetCurrPcieLinkGeneration \
  nvmlDeviceGetCurrPcieLinkWidth nvmlDeviceGetHandleByPciBusId_v2 \
  nvmlDeviceGetNvLinkRemoteDeviceType nvmlDeviceGetNvLinkRemotePciInfo_v2 \
  nvmlDeviceGetComputeRunningProcesses nvmlSystemGetCudaDriverVersion_v2; do
  grep -qx "$name" "$tmp/defined" || echo "$name" >>"$tmp/unmodelled"
done
[ ! -s "$tmp/unmodelled" ]
ok $? "every entry point NCCL and PyTorch look up is modelled"
sed 's/^/# not modelled: /' "$tmp/unmodelled" 2>/dev/null

sed -n 's/^\(nvmlReturn_t\|const char\) \**\(nvml[A-Za-z0-9_]*\)(.*/\2/p' "$here/nvmldefs.h" |
  sort >"$tmp/declared"
is "$(comm -3 "$tmp/defined" "$tmp/declared" | tr -d '\t' | tr '\n' ' ')" "" \
  "nvmldefs.h declares exactly the $(wc -l <"$tmp/defined" | tr -d ' ') entry points nv_*.c define"
is "$(comm -23 "$tmp/defined" "$tmp/all" | tr '\n' ' ')" "" "each of them is exported"

sh -n "$here/regen.sh" && sh -n "$here/find-header.sh"
ok $? "regen.sh and find-header.sh parse as POSIX sh"
if header=$("$here/find-header.sh"); then
  "$here/regen.sh" "$tmp" 2>/dev/null
  ok $? "regen.sh runs against $header"
  cmp -s "$tmp/exports.txt" "$here/exports.txt"
  ok $? "regen.sh reproduces exports.txt"
else
  skip "regen.sh runs" "no nvml.h (make nvml-header, or set NVML_H)"
  skip "regen.sh reproduces exports.txt" "no nvml.h"
fi

# nvmlSystemGetCudaDriverVersion with no libcuda.so.1 to load, then with one that lacks
# cuDriverGetVersion: the test program and the fake NVML alone in a tree of their own, found
# through the program's $ORIGIN/../fakecuda.
prog=$TESTBIN/test_fakenvml
mkdir -p "$tmp/tree/tests" "$tmp/tree/fakecuda"
cp "$prog" "$tmp/tree/tests/" && cp "$lib" "$tmp/tree/fakecuda/"
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  skip "no libcuda.so.1: v2 LIBRARY_NOT_FOUND, v1 13000" "this system has a libcuda.so.1"
else
  is "$(env -u LD_LIBRARY_PATH "$tmp/tree/tests/test_fakenvml" child cudaversion 2>&1)" \
    "v2 12 0 v1 0 13000" \
    "no libcuda.so.1: v2 LIBRARY_NOT_FOUND, v1 the version NVML ships with (13000)"
fi
cp "$lib" "$tmp/tree/fakecuda/libcuda.so.1"
is "$(env -u LD_LIBRARY_PATH "$tmp/tree/tests/test_fakenvml" child cudaversion 2>&1)" \
  "v2 13 0 v1 0 13000" "a libcuda.so.1 without cuDriverGetVersion: v2 FUNCTION_NOT_FOUND, v1 13000"
done_testing
