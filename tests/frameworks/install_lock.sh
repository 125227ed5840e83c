#!/usr/bin/env bash
# tests/frameworks/install.sh under concurrency, with a stand-in python3 on PATH (nothing is
# downloaded): its "pip install" fills the environment slowly and checks at the end that every
# file it wrote is still there. Two installs of one environment at once must not destroy each
# other's half-built environment: one installs, the other waits and finds it complete. An
# install killed half-way is redone by the next; a failing pip leaves VENV.failed, which the next
# successful install removes; an empty VENV (the rows switched off) installs nothing.
. "$TOP/tests/tap.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpucap-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
install="$TOP/tests/frameworks/install.sh"
mkdir -p "$WORK/bin"
# python3 -m venv DIR: DIR/bin/python is this script. DIR/bin/python -m pip install ... -r REQ:
# one line per run in $PIP_LOG, five package files a fifth of a second apart (STUB_PIP_SLEEP),
# then every file checked; STUB_PIP_FAIL=1 fails at once.
cat > "$WORK/bin/python3" <<'EOF'
#!/usr/bin/env bash
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
fi
[ "$1 $2 $3" = "-m pip install" ] || exit 2
[ "${STUB_PIP_FAIL:-0}" = 1 ] && { echo "ERROR: network is unreachable"; exit 1; }
prefix=$(cd "$(dirname "$0")/.." && pwd)
echo "pip $$ $prefix" >> "$PIP_LOG"
mkdir -p "$prefix/lib"
for i in 1 2 3 4 5; do
  echo "package $i of $$" > "$prefix/lib/pkg$i"
  sleep "${STUB_PIP_SLEEP:-0.2}"
done
for i in 1 2 3 4 5; do
  grep -q "of $$" "$prefix/lib/pkg$i" 2>/dev/null || { echo "pkg$i is gone"; exit 1; }
done
EOF
chmod +x "$WORK/bin/python3"
echo "stub==1.0" > "$WORK/req.txt"
export PATH="$WORK/bin:$PATH" PIP_LOG="$WORK/pip.log"
venv="$WORK/cache/env"

# Two installs at once.
: > "$PIP_LOG"
"$install" "$venv" "$WORK/req.txt" stub > "$WORK/a.out" 2>&1 &
a=$!
"$install" "$venv" "$WORK/req.txt" stub > "$WORK/b.out" 2>&1 &
b=$!
wait $a
ra=$?
wait $b
rb=$?
is "$ra/$rb" "0/0" "two concurrent installs both end well"
is "$(wc -l < "$PIP_LOG")" 1 "pip ran once: the second install waited for the first"
ok "$([ -f "$venv/.complete" ] && [ ! -e "$venv.failed" ]; echo $?)" \
  "the environment is complete and nothing failed"
is "$(cat "$venv"/lib/pkg* | sort -u | sed 's/.* of //' | sort -u | wc -l)" 1 \
  "every package file is the one install's"
ok "$(grep -q waiting "$WORK/a.out" "$WORK/b.out"; echo $?)" "one of them said it was waiting"
"$install" "$venv" "$WORK/req.txt" stub > "$WORK/c.out" 2>&1
is "$(wc -l < "$PIP_LOG")/$(wc -c < "$WORK/c.out")" "1/0" \
  "a complete environment is reused silently"

# An install killed half-way (its pip too: the whole process group) is redone by the next.
rm -rf "$venv"
: > "$PIP_LOG"
( # a subshell reaps it, so that the shell's "Killed" notice goes nowhere
  setsid env STUB_PIP_SLEEP=5 "$install" "$venv" "$WORK/req.txt" stub > /dev/null 2>&1 &
  echo $! > "$WORK/k.pid"
  wait
) 2>/dev/null &
outer=$!
i=0
while [ ! -f "$venv/lib/pkg1" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
kill -KILL -- "-$(cat "$WORK/k.pid")" 2>/dev/null
wait $outer
ok "$([ -d "$venv" ] && [ ! -f "$venv/.complete" ]; echo $?)" "a killed install leaves a partial environment"
"$install" "$venv" "$WORK/req.txt" stub > /dev/null 2>&1
ok "$([ -f "$venv/.complete" ] && [ -f "$venv/lib/pkg5" ]; echo $?)" \
  "the next install redoes it (the killed one's lock went with it)"

# A failing pip: VENV.failed says why; the next successful install removes it.
rm -rf "$venv"
STUB_PIP_FAIL=1 "$install" "$venv" "$WORK/req.txt" stub > "$WORK/f.out" 2>&1
is "$?" 0 "a failed install still exits 0 (make test goes on, the rows skip)"
ok "$([ -f "$venv.failed" ] && [ ! -e "$venv" ] && grep -q 'PyPI' "$venv.failed"; echo $?)" \
  "... leaving VENV.failed with the reason and no environment"
ok "$(grep -q 'will be skipped' "$WORK/f.out"; echo $?)" "... and saying so"
"$install" "$venv" "$WORK/req.txt" stub > /dev/null 2>&1
ok "$([ -f "$venv/.complete" ] && [ ! -e "$venv.failed" ]; echo $?)" \
  "a later install succeeds and removes VENV.failed"

# An empty VENV: that environment's rows are off.
before=$(ls -A "$WORK")
( cd "$WORK" && "$install" "" "$WORK/req.txt" stub )
is "$?/$(ls -A "$WORK")" "0/$before" "an empty VENV installs nothing"
done_testing
