# Helpers shared by the reliability scripts (sourced after tests/integ/lib.sh).

# field OUTPUT KEY: the value of KEY=... in a program's key=value output.
field() {
  printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# json_sum_live FILE KEY: the sum of "KEY" over the pools of an exit report whose context was
# not destroyed before exit (their memory went with the context); 0 when absent.
json_sum_live() {
  [ -f "$1" ] || { echo 0; return; }
  awk -v key="\"$2\":" '
    /^    \{/ { skip = 0 }
    /"context_destroyed": true/ { skip = 1 }
    !skip && $1 == key { v = $2; sub(/,$/, "", v); s += v }
    END { print s + 0 }' "$1"
}

# json_max FILE KEY: the largest numeric "KEY": value in FILE (empty when absent).
json_max() {
  { [ -f "$1" ] && grep -o "\"$2\": *[0-9][0-9]*" "$1"; } | sed 's/.*: *//' |
    awk 'NR == 1 || $1 > m { m = $1 } END { if (NR) print m }'
}

# record_figure NAME TEXT: keeps the latest figure of a run for docs/reliability.md.
record_figure() {
  local f="$BUILD/tests/reliability/figures.txt"
  mkdir -p "${f%/*}"
  { grep -v "^$1: " "$f" 2>/dev/null; echo "$1: $2"; } > "$f.tmp" && mv "$f.tmp" "$f"
}

# relay PREFIX < TAP: re-emits a nested program's checks as this script's own, numbered in
# sequence and prefixed (a TODO check stays one, and does not fail this script); comments pass
# through, the nested plan is dropped. Returns 1 if no check was read.
relay() {
  local line status desc seen=1
  while IFS= read -r line; do
    case "$line" in
      "ok "* | "not ok "*)
        status=0
        [ "${line#not ok }" != "$line" ] && status=1
        desc=$(printf '%s' "$line" | sed 's/^\(not \)\{0,1\}ok [0-9]* - //')
        seen=0
        case $desc in
        *" # TODO "*)
          tap_n=$((tap_n + 1))
          echo "$([ "$status" = 0 ] || echo 'not ')ok $tap_n - $1$desc"
          continue
          ;;
        esac
        ok "$status" "$1$desc"
        ;;
      "#"*) echo "$line" ;;
    esac
  done
  return $seen
}

# run_tap DESCRIPTION CMD...: runs a nested TAP program as one check of this script; its output
# (in $out) and stderr are shown only when it fails.
run_tap() {
  local desc=$1 status
  shift
  out=$("$@" 2>"$WORK/stderr")
  status=$?
  ok "$status" "$desc"
  if [ "$status" -ne 0 ]; then
    printf '%s\n' "$out" | grep -v '^ok ' | sed 's/^/#   /'
    grep -v '^ \|^Bin\|^Stats\|^[A-Z][A-Za-z]*: ' "$WORK/stderr" | head -10 |
      sed 's/^/#   stderr: /'
  fi
}
