#!/usr/bin/env bash
# libgpucap.so exports exactly dlsym, dlopen, the hooked names of shim/base/hooks.def, the C
# library functions of shim/entry/libc.def and the NVML functions of shim/entry/nvml.def, needs nothing
# beyond libc (libdl, libpthread), and has no link-time dependency on the driver.
. "$TOP/tests/integ/lib.sh"

got=$(nm -D --defined-only "$SHIM" | awk '{print $3}' | sed 's/@.*//' | sort -u)
want=$( { echo dlsym; echo dlopen; sed -n 's/^HOOK([^,]*,[^,]*,[^,]*, *\([A-Za-z0-9_]*\)).*/\1/p' \
  "$TOP/shim/base/hooks.def"; sed -n 's/^LIBC(\([A-Za-z0-9_]*\))$/\1/p' "$TOP/shim/entry/libc.def"
  sed -n 's/^NVML(\([A-Za-z0-9_]*\))$/\1/p' "$TOP/shim/entry/nvml.def"; } \
  | sort -u)
is "$got" "$want" "exported symbols are dlsym and dlopen plus shim/base/hooks.def, shim/entry/libc.def and shim/entry/nvml.def"
needed=$(readelf -d "$SHIM" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
like "$needed" '^((ld-linux[-a-z0-9_]*|lib(c|dl|pthread|asan|ubsan|tsan|m|gcc_s|stdc\+\+))\.so[.0-9]* ?)+$' \
  "runtime dependencies: $needed"
printf '%s' "$needed" | grep -q libcuda
ok $((!$?)) "no link-time dependency on libcuda"

done_testing
