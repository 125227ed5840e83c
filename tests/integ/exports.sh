#!/usr/bin/env bash
# libgpucap.so exports exactly dlsym, dlopen, the hooked names of shim/hooks.def, the C
# library functions of shim/libc.def and the NVML functions of shim/nvml.def, needs nothing
# beyond libc (libdl, libpthread), and has no link-time dependency on the driver.
. "$TOP/tests/integ/lib.sh"

got=$(nm -D --defined-only "$SHIM" | awk '{print $3}' | sed 's/@.*//' | sort -u)
want=$( { echo dlsym; echo dlopen; sed -n 's/^HOOK([^,]*,[^,]*,[^,]*, *\([A-Za-z0-9_]*\)).*/\1/p' \
  "$TOP/shim/hooks.def"; sed -n 's/^LIBC(\([A-Za-z0-9_]*\))$/\1/p' "$TOP/shim/libc.def"
  sed -n 's/^NVML(\([A-Za-z0-9_]*\))$/\1/p' "$TOP/shim/nvml.def"; } \
  | sort -u)
is "$got" "$want" "exported symbols are dlsym and dlopen plus shim/hooks.def, shim/libc.def and shim/nvml.def"
needed=$(readelf -d "$SHIM" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
like "$needed" '^((ld-linux[-a-z0-9_]*|lib(c|dl|pthread|asan|ubsan|tsan|m|gcc_s|stdc\+\+))\.so[.0-9]* ?)+$' \
  "runtime dependencies: $needed"
printf '%s' "$needed" | grep -q libcuda
ok $((!$?)) "no link-time dependency on libcuda"

done_testing
