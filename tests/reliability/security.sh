#!/usr/bin/env bash
# Files gpucap writes, and who chooses them:
#  - GPUCAP_REPORT, GPUCAP_REPORT_JSON and GPUCAP_TRACE are never written through a symlink
#    another user owns (planted at the path, to an existing file or to a new one), and the run
#    goes on with one warning; a link of the user's own is followed, /dev/stdout into a pipe
#    is written, and the file stdout is redirected to is refused;
#  - they are created with mode 0666 less the user's umask (077, 022, 0), and an existing file
#    is truncated, not appended to, and keeps its mode;
#  - a FIFO planted at the path must not hang the program;
#  - in a set-group-ID program (AT_SECURE: secure_getenv answers NULL) the three settings are
#    ignored while the cap still holds; the same binary without the bit writes them;
#  - a run writes nothing but the files asked for: no file in the working directory, HOME or
#    TMPDIR, and (under strace, when available) no file opened for writing, created, renamed
#    or removed anywhere else but its own entry for gpucap top in /dev/shm.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
. "$TOP/tests/reliability/rlib.sh"

MiB=$((1 << 20))
SECURE="$TESTBIN/reliability/secure"

# workload: a capped run of captest that allocates, with gpucap's file settings from the
# environment; stderr in $WORK/err.
workload() {
  GPUCAP_MEMORY_LIMIT=16MiB with_shim "$TESTBIN/captest" 0 "$MiB" 4 >/dev/null 2>"$WORK/err"
}

# A link another user owns may have been planted; one of the user's own (or root's) is followed,
# as `gpucap run` checks before the program starts.
planter=$(id -u nobody 2>/dev/null)
for var in GPUCAP_REPORT GPUCAP_REPORT_JSON GPUCAP_TRACE; do
  d="$WORK/$var"
  mkdir -p "$d"
  if [ "$(id -u)" -ne 0 ] || [ -z "$planter" ]; then
    skip "$var: a link of another user is not followed" "needs root to give a link away"
  else
    echo precious > "$d/target"
    ln -s "$d/target" "$d/existing"
    ln -s "$d/absent" "$d/dangling"
    chown -h "$planter" "$d/existing" "$d/dangling"
    for link in existing dangling; do
      (export "$var=$d/$link" && workload)
      status=$?
      [ "$status" -eq 0 ] && [ "$(cat "$d/target")" = precious ] && [ ! -e "$d/absent" ] &&
        [ -L "$d/$link" ]
      ok $? "$var: a symlink of another user ($link target) is not followed"
      like "$(cat "$WORK/err")" \
        "^gpucap: warning: $var: '$d/$link' is a symbolic link of another user \\(uid $planter\\)" \
        "  one warning names the setting, the path and the link's owner"
    done
  fi
  echo old > "$d/mine"
  ln -s "$d/mine" "$d/ownlink"
  ln -s "$d/new" "$d/owndangling"
  for link in ownlink owndangling; do
    (export "$var=$d/$link" && workload)
    ok $? "$var: a run through a link of one's own ($link) succeeds"
    [ -L "$d/$link" ] && [ -s "$d/$link" ] && ! grep -qx old "$d/$link"
    ok $? "  the file the link reaches is written, and the link stays a link"
  done
done

# /dev/stdout is root's link: into a pipe it is written; into the file stdout is redirected to,
# it would truncate what the program wrote, so it is refused.
got=$(GPUCAP_REPORT_JSON=/dev/stdout GPUCAP_MEMORY_LIMIT=16MiB with_shim "$TESTBIN/captest" 0 \
  "$MiB" 4 2>"$WORK/err" | cat)
like "$got" '"devices": \[' "GPUCAP_REPORT_JSON=/dev/stdout into a pipe: the JSON report arrives"
GPUCAP_REPORT_JSON=/dev/stdout GPUCAP_MEMORY_LIMIT=16MiB with_shim "$TESTBIN/captest" 0 "$MiB" \
  4 >"$WORK/job.log" 2>"$WORK/err"
ok $? "GPUCAP_REPORT_JSON=/dev/stdout with stdout in a file: the run succeeds"
[ -s "$WORK/job.log" ] && ! grep -q '"devices"' "$WORK/job.log"
ok $? "  the program's own output is kept, not overwritten by the report"
like "$(cat "$WORK/err")" \
  "gpucap: warning: GPUCAP_REPORT_JSON: '/dev/stdout' is the file the program's standard output goes to" \
  "  one warning says why"

for mask in 077 022 000; do
  d="$WORK/umask$mask"
  mkdir -p "$d"
  (umask "$mask" && GPUCAP_REPORT="$d/report.txt" GPUCAP_REPORT_JSON="$d/report.json" \
    GPUCAP_TRACE="$d/trace.csv" workload)
  want=$(printf '%o' $((0666 & ~0$mask)))
  got=$(stat -c '%a' "$d/report.txt" "$d/report.json" "$d/trace.csv" 2>&1 | tr '\n' ' ')
  is "$got" "$want $want $want " "umask $mask: report, JSON and trace files have mode $want"
done

d="$WORK/existing"
mkdir -p "$d"
head -c 200000 /dev/zero | tr '\0' x > "$d/report.json"
chmod 600 "$d/report.json"
GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$d/report.json" workload
[ "$(head -c 1 "$d/report.json")" = '{' ] && [ "$(tail -c 2 "$d/report.json")" = '}' ] &&
  [ "$(wc -c < "$d/report.json")" -lt 100000 ]
ok $? "an existing report file is truncated and rewritten, not appended to"
is "$(stat -c %a "$d/report.json")" 600 "  and keeps its mode"

for var in GPUCAP_REPORT_JSON GPUCAP_TRACE; do
  d="$WORK/fifo-$var"
  mkdir -p "$d"
  mkfifo "$d/fifo"
  start=$SECONDS
  (export GPUCAP_REPORT=off "$var=$d/fifo" GPUCAP_MEMORY_LIMIT=16MiB &&
    LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$(preload)" timeout 2 "$TESTBIN/captest" 0 "$MiB" 4 \
      >/dev/null 2>&1)
  status=$?
  [ "$status" -ne 124 ]
  ok $? "$var: a FIFO planted at the path does not hang the program (status $status after $((SECONDS - start)) s)"
done

# Secure execution: a set-group-ID copy of a program linked with gpucap.
d="$WORK/setgid"
mkdir -p "$d"
cp "$SECURE" "$d/secure"
group=$(id -gn nobody 2>/dev/null || echo nogroup)
if [ "$(id -u)" = 0 ] && chgrp "$group" "$d/secure" 2>/dev/null && chmod g+s "$d/secure" &&
   [ "$(GPUCAP_REPORT=off "$d/secure" 2>/dev/null | sed -n 's/^at_secure=//p')" = 1 ]; then
  out=$(cd "$d" && GPUCAP_MEMORY_LIMIT=4MiB GPUCAP_REPORT="$d/report.txt" \
    GPUCAP_REPORT_JSON="$d/report.json" GPUCAP_TRACE="$d/trace.csv" ./secure 2>"$WORK/err")
  is "$(field "$out" allocs)" 4 "set-group-ID: GPUCAP_MEMORY_LIMIT (not a path) still caps at 4 MiB"
  [ ! -e "$d/report.txt" ] && [ ! -e "$d/report.json" ] && [ ! -e "$d/trace.csv" ]
  ok $? "set-group-ID: GPUCAP_REPORT, GPUCAP_REPORT_JSON and GPUCAP_TRACE are ignored"
  like "$(cat "$WORK/err")" '^gpucap: memory report' "  the report goes to stderr instead"
  chmod g-s "$d/secure"
  out=$(cd "$d" && GPUCAP_MEMORY_LIMIT=4MiB GPUCAP_REPORT="$d/report.txt" \
    GPUCAP_REPORT_JSON="$d/report.json" GPUCAP_TRACE="$d/trace.csv" ./secure 2>"$WORK/err")
  [ "$(field "$out" at_secure)" = 0 ] && [ -s "$d/report.txt" ] && [ -s "$d/report.json" ] &&
    [ -s "$d/trace.csv" ]
  ok $? "control: the same binary without the bit writes all three files"
else
  for i in 1 2 3 4; do
    skip "set-group-ID checks" "needs root, a group to chgrp to and a suid-capable filesystem"
  done
fi

# Nothing written anywhere else.
d="$WORK/clean"
mkdir -p "$d/cwd" "$d/home" "$d/tmp" "$d/out"
(cd "$d/cwd" && HOME="$d/home" TMPDIR="$d/tmp" GPUCAP_REPORT="$d/out/report.txt" \
  GPUCAP_REPORT_JSON="$d/out/report.json" GPUCAP_TRACE="$d/out/trace.csv" workload)
is "$(ls -A "$d/cwd" "$d/home" "$d/tmp" | grep -v ':$' | grep -v '^$')" "" \
  "nothing appears in the working directory, HOME or TMPDIR"
is "$(ls "$d/out" | tr '\n' ' ')" "report.json report.txt trace.csv " "  only the files asked for"
if command -v strace >/dev/null && strace -f -o /dev/null true 2>/dev/null; then
  rm -f "$d/out"/*
  calls=open,openat,openat2,creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat,link
  calls=$calls,linkat,symlink,symlinkat,truncate,mknod,mknodat
  (cd "$d/cwd" && GPUCAP_REPORT="$d/out/report.txt" GPUCAP_REPORT_JSON="$d/out/report.json" \
    GPUCAP_TRACE="$d/out/trace.csv" GPUCAP_MEMORY_LIMIT=16MiB LD_LIBRARY_PATH="$FAKE_DIR" \
    strace -f -qq -o "$WORK/strace" -e "trace=$calls" \
    env LD_PRELOAD="$(preload)" "$TESTBIN/captest" 0 "$MiB" 4 >/dev/null 2>&1)
  changes='O_WRONLY|O_RDWR|O_CREAT|creat\(|mkdir|rename|unlink|link\(|linkat|symlink|truncate'
  writes=$(grep -v ' = -1 ' "$WORK/strace" | grep -E "$changes|mknod" |
    grep -o '"[^"]*"' | tr -d '"' | sort -u | tr '\n' ' ')
  # The process's entry for gpucap top (shim/accounting/roster.h): an unnamed file in /dev/shm linked in
  # place through /proc/self/fd, removed at exit.
  entry="/dev/shm /dev/shm/gpucap-proc\\.$(id -u)\\.[0-9]+ /proc/self/fd/[0-9]+ "
  like "$(grep -oE "/dev/shm[^ ]* |/proc/self/fd/[0-9]+ " <<<"$writes" | tr -d '\n')" "^$entry\$" \
    "strace: besides them, only its gpucap top entry in /dev/shm"
  is "$(sed -E "s#/dev/shm[^ ]* |/proc/self/fd/[0-9]+ ##g" <<<"$writes")" \
    "$d/out/report.json $d/out/report.txt $d/out/trace.csv " \
    "strace: the only files opened for writing or created are the three asked for"
else
  skip "strace: besides them, only its gpucap top entry in /dev/shm" "strace cannot trace here"
  skip "strace: the only files opened for writing or created are the three asked for" \
    "strace cannot trace here"
fi
done_testing
