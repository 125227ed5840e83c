#!/usr/bin/env bash
# The caps the cluster set (GPUCAP_DISCOVER): each source set in a program's environment (or, for
# dmem, in a cgroup tree named by GPUCAP_CGROUP_ROOT) and found in what the program sees
# (cuMemGetInfo's total, how many blocks fit, the fake driver's peak) and in `gpucap env`; the
# smallest wins, with gpucap's own settings too; a margin under every limit for a cap on
# allocations alone, the line itself for a cap that covers the process (the driver's own memory
# counted, measured: the fake's per-process figure within the line); a guarantee gives idle pool
# memory back (the fake driver's count of what the process holds); a source that cannot be
# parsed is a warning and ignored under LD_PRELOAD, an error (125) in gpucap run.
. "$TOP/tests/integ/lib.sh"

MiB=$((1 << 20))
GiB=$((1 << 30))
GPUCAP="$BUILD/gpucap"
export GPUCAP_REPORT=off


# margined LINE: the cap under a limit of LINE bytes (512 MiB under it, or a quarter).
margined() {
  local m=$(($1 / 4))
  [ "$m" -gt $((512 * MiB)) ] && m=$((512 * MiB))
  echo $(($1 - m))
}

# captest DEVICE BLOCK: the cap probe under the shim, the fake's stats in $WORK/stats.json.
captest() {
  FAKECUDA_STATS="$WORK/stats.json" with_shim "$TESTBIN/captest" "$@" 2>"$WORK/err"
}

# field OUTPUT KEY: the value of KEY=... in the probe's output.
field() {
  printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# genv [ARGS]: gpucap env over the fake driver; stdout, stderr in $WORK/env.err.
genv() {
  LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="${SAN_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 \
    "$GPUCAP" env "$@" 2>"$WORK/env.err"
}

# device_line OUTPUT N: gpucap env's line for device N, blanks squeezed.
device_line() {
  printf '%s\n' "$1" | grep "^  device $2 (" | tr -s ' ' | sed 's/^ //'
}

# check SOURCE DEVICE LINE [DESC]: with the source already exported, the probe on DEVICE sees
# LINE less its margin, the driver's peak stays within it, and gpucap env names SOURCE.
check() {
  local cap out env
  cap=$(margined "$3")
  out=$(captest "$2" $((64 * MiB)))
  is "$(field "$out" before_total)" "$cap" "$1 ${4:-}: cuMemGetInfo's total is its line less the margin"
  is "$(field "$out" allocs)" $((cap / (64 * MiB))) "  as many 64 MiB blocks fit, no more"
  peak_within "$WORK/stats.json" "$cap" "  "
  is "$(grep -c 'gpucap: ' "$WORK/err")" 0 "  and nothing is said"
  env=$(genv)
  like "$(device_line "$env" "$2")" "cap $cap_text from $1 \\(" "  gpucap env: device $2's cap from $1"
}

# Under GPUCAP_CAP_COVERS=process a line is the cap itself, the driver's memory inside it: the
# process never holds more than the line (the fake's own per-process figure, a context and its
# local memory included), and gpucap env says the line is the cap.
export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G
out=$(FAKECUDA_STATS="$WORK/whole.json" with_shim "$TESTBIN/captest" 0 $((64 * MiB)) 2>"$WORK/err")
is "$(field "$out" before_total)" $GiB "cap covering the process: cuMemGetInfo's total is the line"
peak_within "$WORK/whole.json" $GiB "  cap covering the process, 401 MiB of context inside: "
is "$(device_line "$(genv)" 0)" \
  "device 0 (0000:01:00.0, 16GiB): cap 1GiB from CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (the line; the driver's own memory counted in it)" \
  "  gpucap env: the line is the cap"
unset CUDA_MPS_PINNED_DEVICE_MEM_LIMIT

# The rest: each source's parsing, matching and precedence, on a cap on allocations alone (the
# margin under each line), on a device whose driver costs nothing beyond the allocations.
export GPUCAP_CAP_COVERS=allocations FAKECUDA_DRIVER_MEMORY=off

# ---- Each source.
export FAKECUDA_DEVICES=2
export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G,1=2G
cap_text=768MiB check CUDA_MPS_PINNED_DEVICE_MEM_LIMIT 0 $GiB "(0=1G)"
cap_text=1536MiB check CUDA_MPS_PINNED_DEVICE_MEM_LIMIT 1 $((2 * GiB)) "(1=2G)"
env=$(genv)
like "$env" "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='0=1G,1=2G'  limit, held by the MPS server" \
  "gpucap env lists the source, its value and what holds it"
is "$(device_line "$env" 0)" \
  "device 0 (0000:01:00.0, 16GiB): cap 768MiB from CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (1GiB less a margin of 256MiB)" \
  "  and device 0's cap: the line, the margin"
unset CUDA_MPS_PINNED_DEVICE_MEM_LIMIT

# Slurm keys by PCI bus id: the devices sit on buses 86 and 3b (out of ordinal order).
export FAKECUDA_PCI_BUS=0:86,1:3b SLURM_SHARD_MEM_PER_GPU=0000:3b:00.0=4096M
cap_text=3584MiB check SLURM_SHARD_MEM_PER_GPU 1 $((4 * GiB)) "(the device at 3b)"
out=$(captest 0 $((4 * GiB)))
is "$(field "$out" before_total)" $((16 * GiB)) "  the device at 86, which it does not name, is not capped"
is "$(device_line "$(genv)" 0)" "device 0 (0000:86:00.0, 16GiB): no cap" "  gpucap env says so"
export SLURM_SHARD_MEM_PER_GPU=00000000:86:00.0=2048M,0000:3B:00.0=1024M
out=$(captest 0 $((64 * MiB)))
is "$(field "$out" before_total)" $((1536 * MiB)) "  two devices in nvidia-smi's and the driver's spelling: 86"
out=$(captest 1 $((64 * MiB)))
is "$(field "$out" before_total)" $((768 * MiB)) "  and 3b"
unset SLURM_SHARD_MEM_PER_GPU FAKECUDA_PCI_BUS

export NVIDIA_GPU_MEMORY_LIMIT=2048
cap_text=1536MiB check NVIDIA_GPU_MEMORY_LIMIT 0 $((2 * GiB)) "(2048 MiB, every device)"
cap_text=1536MiB check NVIDIA_GPU_MEMORY_LIMIT 1 $((2 * GiB))
unset NVIDIA_GPU_MEMORY_LIMIT

export CUDA_DEVICE_MEMORY_LIMIT=3072m CUDA_DEVICE_MEMORY_LIMIT_1=1g
cap_text=2560MiB check CUDA_DEVICE_MEMORY_LIMIT 0 $((3 * GiB)) "(HAMi, every device)"
cap_text=768MiB check CUDA_DEVICE_MEMORY_LIMIT_1 1 $GiB "(HAMi, device 1: smaller)"
unset CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_MEMORY_LIMIT_1

export GPU_MEMORY_LIMIT=4294967296
cap_text=3584MiB check GPU_MEMORY_LIMIT 0 $((4 * GiB)) "(KAI, bytes)"
unset GPU_MEMORY_LIMIT

# dmem.max from a cgroup tree of our own: the process's cgroup path under GPUCAP_CGROUP_ROOT.
own=$(sed -n 's/^0:://p' /proc/self/cgroup)
if [ -n "$own" ] || grep -q '^0::' /proc/self/cgroup; then
  cg="$WORK/cgroup${own%/}"
  mkdir -p "$cg"
  printf 'drm/0000:01:00.0/vram0 2147483648\ndrm/0000:02:00.0/vram0 max\n' >"$cg/dmem.max"
  export GPUCAP_CGROUP_ROOT="$WORK/cgroup"
  cap_text=1536MiB check dmem.max 0 $((2 * GiB)) "(the cgroup's, keyed by PCI bus id)"
  out=$(captest 1 $((4 * GiB)))
  is "$(field "$out" before_total)" $((16 * GiB)) "  a device at max is not capped"
  like "$(genv)" "dmem.max \\($cg/dmem.max\\)='drm/0000:01:00.0/vram0 2147483648; drm/0000:02:00.0/vram0 max'" \
    "  gpucap env shows the file and its lines"
  rm -f "$cg/dmem.max"
else
  skip "dmem.max" "this process has no cgroup v2 path (a cgroup v1 system)"
fi

# ---- The smallest wins, gpucap's own settings included; GPUCAP_DISCOVER=off reads none.
export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G
out=$(GPUCAP_MEMORY_LIMIT=512MiB captest 0 $((64 * MiB)))
is "$(field "$out" before_total)" $((512 * MiB)) "GPUCAP_MEMORY_LIMIT below the MPS line less the margin: gpucap's wins"
like "$(device_line "$(GPUCAP_MEMORY_LIMIT=512MiB genv)" 0)" "cap 512MiB from GPUCAP_MEMORY_LIMIT$" \
  "  gpucap env says which won"
out=$(GPUCAP_MEMORY_FRACTION=0.5 captest 0 $((64 * MiB)))
is "$(field "$out" before_total)" $((768 * MiB)) "GPUCAP_MEMORY_FRACTION 0.5 (8 GiB) above it: the MPS line wins"
out=$(GPUCAP_DISCOVER=off captest 0 $((64 * MiB)))
is "$(field "$out" before_total)" $((16 * GiB)) "GPUCAP_DISCOVER=off: the MPS line is not read"
env=$(GPUCAP_DISCOVER=off genv)
unlike "$env" "CUDA_MPS_PINNED" "  nor listed by gpucap env"
like "$env" "GPUCAP_DISCOVER +off +environment" "  which shows the setting"
unset CUDA_MPS_PINNED_DEVICE_MEM_LIMIT

# ---- A guarantee: above it idle pool memory goes back at once (the idle release otherwise
# waits for GPUCAP_RELEASE_AFTER, here never). The oracle is the fake driver's count.
soft() {
  GPUCAP_RELEASE_AFTER=0 with_shim "$TESTBIN/softtest" 0 $((128 * MiB)) 6 4 2>"$WORK/err"
}
out=$(soft)
is "$(field "$out" held_after)" $((768 * MiB)) "no guarantee: the pool keeps 768 MiB after 512 MiB is freed"
out=$(NVIDIA_GPU_MEMORY_REQUEST=512 soft)
held=$(field "$out" held_after)
[ "$held" -le $((512 * MiB)) ] && [ "$held" -ge $((256 * MiB)) ]
ok $? "NVIDIA_GPU_MEMORY_REQUEST=512: the process holds $held bytes, down to the guarantee"
like "$(device_line "$(NVIDIA_GPU_MEMORY_REQUEST=512 genv)" 0)" "no cap; guarantee 512MiB from NVIDIA_GPU_MEMORY_REQUEST" \
  "  gpucap env shows the guarantee"
out=$(NVIDIA_GPU_MEMORY_REQUEST=512 GPUCAP_POOL=regions soft)
[ "$(field "$out" held_after)" -lt "$(field "$out" held_full)" ]
ok $? "  a region pool gives its wholly free regions back ($(field "$out" held_full) -> $(field "$out" held_after))"
if [ -n "${cg:-}" ]; then
  printf 'drm/0000:01:00.0/vram0 268435456\n' >"$cg/dmem.min"
  out=$(soft)
  held=$(field "$out" held_after)
  [ "$held" -le $((256 * MiB)) ]
  ok $? "dmem.min of 256 MiB: the process holds $held bytes, its blocks in use"
  like "$(device_line "$(genv)" 0)" "guarantee 256MiB from dmem.min" "  gpucap env shows it"
  printf 'drm/0000:01:00.0/vram0 0\n' >"$cg/dmem.min"
  out=$(soft)
  is "$(field "$out" held_after)" $((768 * MiB)) "dmem.min of 0 (the default) is no guarantee"
  rm -f "$cg/dmem.min"
fi

# ---- A source that cannot be parsed: never a silent cap of 0 or none.
export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G SLURM_SHARD_MEM_PER_GPU=gpu0=2048M
out=$(captest 0 $((64 * MiB)))
is "$(field "$out" before_total)" $((768 * MiB)) "a bad SLURM_SHARD_MEM_PER_GPU under LD_PRELOAD: ignored, the MPS line still caps"
is "$(grep -c '^gpucap: warning: ' "$WORK/err")" 1 "  one warning line"
like "$(cat "$WORK/err")" "^gpucap: warning: SLURM_SHARD_MEM_PER_GPU='gpu0=2048M': .*; accepted: PCI_BUS_ID=SIZE.*; this source is ignored" \
  "  naming the variable, its value and its accepted form"
LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="${SAN_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 \
  "$GPUCAP" run "$TESTBIN/captest" 0 $MiB >"$WORK/run.out" 2>"$WORK/run.err"
is $? 125 "gpucap run refuses it: exit 125"
like "$(cat "$WORK/run.err")" "^gpucap: error: SLURM_SHARD_MEM_PER_GPU='gpu0=2048M': .*accepted: PCI_BUS_ID=SIZE" \
  "  with the same message as an error"
[ ! -s "$WORK/run.out" ]
ok $? "  and the program never started"
env=$(genv)
is $? 125 "gpucap env: exit 125"
like "$env" "SLURM_SHARD_MEM_PER_GPU='gpu0=2048M'  invalid: ignored" "  lists it as invalid"
like "$(cat "$WORK/env.err")" "gpucap: error: SLURM_SHARD_MEM_PER_GPU=" "  and says why"
unset CUDA_MPS_PINNED_DEVICE_MEM_LIMIT SLURM_SHARD_MEM_PER_GPU

# ---- A shared budget takes the discovered cap as the budget's.
export CUDA_DEVICE_MEMORY_LIMIT=2g GPUCAP_SHARE="discover-$$"
out=$(captest 0 $((256 * MiB)))
is "$(field "$out" before_total)" $((1536 * MiB)) "under GPUCAP_SHARE the discovered cap is the budget's"
is "$(field "$out" allocs)" 6 "  six 256 MiB blocks fit"
unset CUDA_DEVICE_MEMORY_LIMIT GPUCAP_SHARE
rm -f "/dev/shm/gpucap-budget.$(id -u).discover-$$"

done_testing
