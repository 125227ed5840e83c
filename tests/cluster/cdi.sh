#!/usr/bin/env bash
# gpucap cdi: the Container Device Interface spec it writes, validated against a JSON schema of
# the CDI specification (tests/cluster/cdi.schema.json, by cdi_check.py; the checker shown to
# refuse broken specs too), its settings judged as gpucap run judges them, and, where podman
# can run a local root file system (rootful, no registry), a program run through podman with
# only the spec to put it under gpucap: the cap it sees is the spec's.
. "$TOP/tests/integ/lib.sh"

GiB=$((1 << 30))
GPUCAP="$BUILD/gpucap"
SCHEMA="$TOP/tests/cluster/cdi.schema.json"
CHECK="$TOP/tests/cluster/cdi_check.py"

# gcdi ARGS...: gpucap cdi (its stderr in $WORK/cdi.err).
gcdi() {
  LD_PRELOAD="${SAN_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 "$GPUCAP" cdi "$@" 2>"$WORK/cdi.err"
}

# ---- What gpucap cdi writes.
gcdi --name 8g --limit 8GiB --report off -o "$WORK/8g.json"
is $? 0 "gpucap cdi --name 8g --limit 8GiB --report off -o FILE"
json=$(cat "$WORK/8g.json")
like "$json" '"cdiVersion": "0.6.0"' "  CDI version 0.6.0 by default"
like "$json" '"kind": "gpucap.dev/cap"' "  kind gpucap.dev/cap"
like "$json" '"name": "8g"' "  the device's name"
like "$json" "\"LD_PRELOAD=$(realpath "$BUILD/libgpucap.so")\"" "  LD_PRELOAD names the library"
like "$json" '"GPUCAP_MEMORY_LIMIT=8GiB"' "  the limit, canonical"
like "$json" '"GPUCAP_REPORT=off"' "  and the report setting"
like "$json" "\"hostPath\": \"$(realpath "$BUILD/libgpucap.so")\"" "  the library is mounted"
like "$json" '"options": \["ro", "nosuid", "nodev", "bind"\]' "  read-only"
unlike "$json" "GPUCAP_POOL" "  settings no option gave are left out"
GPUCAP_MEMORY_FRACTION=0.5 gcdi >"$WORK/plain.json"
unlike "$(cat "$WORK/plain.json")" "GPUCAP_MEMORY_FRACTION" \
  "  the environment of gpucap cdi is not copied into the spec"
gcdi --cdi-version 0.5.0 --fraction 25% --container-lib /opt/gpucap/libgpucap.so \
  -o "$WORK/old.json"
json=$(cat "$WORK/old.json")
like "$json" '"cdiVersion": "0.5.0"' "--cdi-version 0.5.0 (for podman 4.3)"
unlike "$json" "annotations" "  without annotations, which 0.5.0 lacks"
like "$json" '"containerPath": "/opt/gpucap/libgpucap.so"' "  --container-lib: where the container sees it"
like "$json" '"LD_PRELOAD=/opt/gpucap/libgpucap.so"' "  and LD_PRELOAD names that path"
like "$json" '"GPUCAP_MEMORY_FRACTION=0.25"' "  25% as 0.25"
gcdi --cdi-version 0.8.0 >"$WORK/v08.json"
like "$(cat "$WORK/v08.json")" '"cdiVersion": "0.8.0"' "--cdi-version 0.8.0"

# ---- Refusals: exit 125 for a bad value or setting, 2 for a usage error; nothing written.
for args in "--limit 8GB" "--name bad/name" "--name trailing-" "--cdi-version 0.9.0" \
  "--lib /nonexistent/libgpucap.so" "--fraction 2" "extra"; do
  want=125
  [ "$args" = extra ] && want=2
  # shellcheck disable=SC2086
  gcdi $args -o "$WORK/refused.json"
  is $? $want "gpucap cdi $args: refused ($want)"
  [ ! -e "$WORK/refused.json" ]
  ok $? "  nothing written"
done
like "$(gcdi --limit 8GB 2>&1; cat "$WORK/cdi.err")" "GPUCAP_MEMORY_LIMIT comes from --limit" \
  "  a bad setting is named with the option it came from"
gcdi -o /nonexistent-dir/spec.json
is $? 1 "an output that cannot be written: exit 1"

# ---- The schema.
if ! python3 -c 'import jsonschema' 2>/dev/null; then
  skip "the specs against the CDI schema" \
    "SKIPPED: no Python module jsonschema (.ci/run installs python3-jsonschema)"
else
  out=$(python3 "$CHECK" "$SCHEMA" "$WORK/8g.json" "$WORK/plain.json" "$WORK/old.json" \
    "$WORK/v08.json")
  is $? 0 "every spec gpucap cdi wrote is a valid CDI spec"
  printf '%s\n' "$out" | sed 's/^/# /'
  # The checker must be able to fail: specs broken in the ways CDI forbids.
  bad() {
    python3 - "$WORK/8g.json" "$WORK/bad.json" "$1" <<'EOF'
import json, sys
spec = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(spec, open(sys.argv[2], "w"))
EOF
    python3 "$CHECK" "$SCHEMA" "$WORK/bad.json" >"$WORK/bad.out"
    is $? 1 "the schema refuses $2: $(cut -d: -f2- "$WORK/bad.out" | cut -c1-90)"
  }
  bad 'del spec["devices"]' "a spec without devices"
  bad 'spec["devices"] = []' "an empty device list"
  bad 'spec["kind"] = "gpucap"' "a kind without a vendor"
  bad 'spec["kind"] = "gpucap.dev/cap/x"' "a kind of three segments"
  bad 'spec["devices"][0]["name"] = "-x"' "a device name starting with '-'"
  bad 'spec["devices"][0]["containerEdits"]["env"].append("NOEQUALS")' "an env entry without '='"
  bad 'spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"] = "lib.so"' \
    "a relative container path"
  bad 'spec["cdiVersion"] = "0.5.0"' "annotations in a 0.5.0 spec"
  bad 'spec["cdiVersion"] = "2.0.0"' "an unreleased version"
  bad 'spec["devices"][0]["containerEdits"]["mounts"][0]["options"] = "ro"' \
    "mount options that are not a list"
fi

# ---- podman: a program run through it, the spec its only link to gpucap.
podman_skip() {
  skip "a program through podman with the spec" "$1"
  done_testing
}
command -v podman >/dev/null || podman_skip "no podman (.ci/run installs Debian's podman)"
[ "$(id -u)" = 0 ] || podman_skip "podman runs a local root file system here only as root"
[ -z "${SAN_PRELOAD:-}" ] || podman_skip "the sanitizer runtime is not in the container's root file system"
R="$WORK/rootfs"
mkdir -p "$R/fake" "$R/bin" "$R/proc" "$R/dev" "$R/sys" "$R/tmp" "$R/etc"
cp "$TESTBIN/captest" "$R/bin/"
cp -L "$FAKE_DIR/libcuda.so.1" "$R/fake/"
for f in $(LD_LIBRARY_PATH="$FAKE_DIR" ldd "$TESTBIN/captest" "$BUILD/libgpucap.so" |
  grep -v ':$' | grep -o '/[^ ]*' | grep -v "$FAKE_DIR" | sort -u); do
  mkdir -p "$R$(dirname "$f")"
  cp -L "$f" "$R$f"
done
name="test$$"
spec="/var/run/cdi/gpucap-$name.json"
mkdir -p /var/run/cdi
trap 'rm -f "$spec"; rm -rf "$WORK"' EXIT
# 0.5.0: the newest version Debian 12's podman (4.3) reads; the device's edits are the same.
gcdi --name "$name" --cdi-version 0.5.0 --limit 1GiB --report off \
  --container-lib /opt/gpucap/libgpucap.so -o "$spec"
ok $? "the spec in /var/run/cdi (device gpucap.dev/cap=$name)"
runtime=
command -v runc >/dev/null && runtime="--runtime runc" # crun refuses hybrid cgroups
# Limits at or below the caller's: a container may not raise them where CAP_SYS_RESOURCE lacks.
# podman_run [DEVICE] -- COMMAND...: COMMAND in the root file system, with the CDI device DEVICE.
# shellcheck disable=SC2086
podman_run() {
  local dev=$1
  shift 2
  timeout 120 podman $runtime run --rm --network=none --ulimit nofile=1024:1024 \
    --ulimit nproc=1024:1024 -e LD_LIBRARY_PATH=/fake -e FAKECUDA_DRIVER_MEMORY=off \
    ${dev:+--device "$dev"} --rootfs "$R" "$@"
}
podman_run "" -- /bin/captest 0 $((256 << 20)) >"$WORK/podman.out" 2>"$WORK/podman.err"
if [ $? -ne 0 ] && [ ! -s "$WORK/podman.out" ]; then
  podman_skip "podman cannot run a local root file system here: $(head -c 200 "$WORK/podman.err")"
fi
out=$(cat "$WORK/podman.out")
is "$(printf '%s\n' "$out" | tr ' ' '\n' | sed -n 's/^before_total=//p')" $((16 * GiB)) \
  "podman without the device: the program is not capped"
podman_run "gpucap.dev/cap=$name" -- /bin/captest 0 $((256 << 20)) \
  >"$WORK/podman.out" 2>"$WORK/podman.err"
is $? 0 "podman run --device gpucap.dev/cap=$name"
sed 's/^/# podman: /' "$WORK/podman.err"
out=$(cat "$WORK/podman.out")
is "$(printf '%s\n' "$out" | tr ' ' '\n' | sed -n 's/^before_total=//p')" $GiB \
  "  the program in the container sees the spec's 1 GiB"
is "$(printf '%s\n' "$out" | tr ' ' '\n' | sed -n 's/^allocs=//p')" 4 "  and four 256 MiB blocks fit"
[ ! -s "$WORK/podman.err" ]
ok $? "  and nothing is said (GPUCAP_REPORT=off from the spec)"

done_testing
