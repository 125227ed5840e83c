#!/usr/bin/env bash
# The fake driver's modules over real device code: nvcc builds tests/fakecuda/module.cu as a
# cubin, a fat binary (plain, zstd- and LZ4-compressed), PTX, PTX for compute_80 alone and a
# cubin for sm_80 alone; module_check (linked against the fake) loads each and checks kernels,
# variables, attributes, launches and libraries. Skipped without a toolkit.
. "$TOP/tests/integ/lib.sh"

if ! command -v nvcc >/dev/null; then
  skip "modules over real device code" "no nvcc on PATH"
  done_testing
fi
src="$TOP/tests/fakecuda/module.cu"
build() { nvcc "$@" "$src" 2>>"$WORK/nvcc.err"; }
build -arch=sm_90 -cubin -o "$WORK/m.cubin" &&
  build -arch=sm_90 -fatbin -o "$WORK/m.fatbin" &&
  build -arch=sm_90 -fatbin -Xfatbin -compress-all -o "$WORK/mz.fatbin" &&
  build -arch=sm_90 -fatbin --compress-mode=speed -o "$WORK/mlz4.fatbin" &&
  build -arch=sm_90 -ptx -o "$WORK/m.ptx" &&
  build -gencode arch=compute_80,code=compute_80 -fatbin -o "$WORK/mptx80.fatbin" &&
  build -gencode arch=compute_80,code=sm_80 -fatbin -o "$WORK/m80.fatbin"
ok $? "nvcc built the seven images"
sed 's/^/# /' "$WORK/nvcc.err" | head -5

tap_program "modules, kernels, launches and libraries over nvcc's images" \
  without_shim "$TESTBIN/fakecuda_module_check" "$WORK/m.cubin" "$WORK/m.fatbin" \
  "$WORK/mz.fatbin" "$WORK/mlz4.fatbin" "$WORK/m.ptx" "$WORK/mptx80.fatbin" "$WORK/m80.fatbin"
done_testing
