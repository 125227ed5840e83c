#!/usr/bin/env bats
# gpucap itself: the command dispatch, the top-level --help (which lists the settings from the
# options table) and --version, `gpucap help COMMAND`, and the usage errors.

load helpers

# The commands of scripts/gpucap.c's table, "run, report, ...", in its order.
commands() {
  sed -n 's/^    {"\([a-z]*\)", [a-z_]*_main,.*/\1/p' "$TOP/scripts/gpucap.c" | paste -sd, - |
    sed 's/,/, /g'
}

@test "--help lists every command and every setting" {
  run --separate-stderr "$GPUCAP" --help
  status_is 0
  [ -z "$stderr" ]
  has "Usage: gpucap COMMAND [ARGS...]"
  for c in "run [OPTIONS] [--] COMMAND [ARGS...]" "report FILE.json" "plot TRACE.csv -o OUT.svg" \
      "env [OPTIONS]" "top [--once] [--json] [--clean]" "help [COMMAND]"; do
    has "  $c"
  done
  for v in $(sed -n 's/^CFG_OPT(\([A-Z_]*\),.*/GPUCAP_\1/p' "$TOP/config/options.def"); do
    has "$v  ("
  done
  run "$GPUCAP" -h
  status_is 0
  has "Usage: gpucap COMMAND"
}

@test "--version is the Makefile's version" {
  want=$(sed -n 's/^VERSION := //p' "$TOP/Makefile")
  run "$GPUCAP" --version
  status_is 0
  [ "$output" = "gpucap $want" ]
}

@test "every command has --help and --version" {
  [ "$(commands)" = "run, report, plot, export, env, top, cdi" ]
  for c in $(commands | tr -d ,); do
    run "$GPUCAP" "$c" --help
    status_is 0
    [[ "$output" == "Usage: gpucap $c"* ]]
    run "$GPUCAP" "$c" --version
    status_is 0
    [[ "$output" == "gpucap "* ]]
  done
}

@test "help COMMAND is COMMAND --help; help alone is --help" {
  for c in $(commands | tr -d ,); do
    run "$GPUCAP" help "$c"
    status_is 0
    [ "$output" = "$("$GPUCAP" "$c" --help)" ]
  done
  run "$GPUCAP" help
  status_is 0
  [ "$output" = "$("$GPUCAP" --help)" ]
  run --separate-stderr "$GPUCAP" help nosuch
  status_is 2
  err_has "help: no such command; commands: $(commands)"
  run --separate-stderr "$GPUCAP" help run plot
  status_is 2
  err_has "help: one command at a time"
}

@test "no command, an unknown command, an option before the command: usage errors (2)" {
  run --separate-stderr "$GPUCAP"
  status_is 2
  [ -z "$output" ]
  [[ "$stderr" == "Usage: gpucap COMMAND [ARGS...]"* ]]
  err_has "  top [--once] [--json] [--clean]"
  err_has "gpucap: error: no command given (commands: $(commands))"
  run --separate-stderr "$GPUCAP" start
  status_is 2
  err_has "gpucap: error: unknown command 'start'; commands: $(commands) (see gpucap --help)"
  run --separate-stderr "$GPUCAP" --limit 1GiB -- true
  status_is 2
  err_has "unknown option '--limit'; options go after the command: gpucap run --limit ..."
}

@test "help goes to stdout, errors to stderr" {
  run --separate-stderr "$GPUCAP" run --bogus
  [ -z "$output" ]
  [[ "$stderr" == "gpucap: error: "* ]]
  run --separate-stderr "$GPUCAP" plot --help
  [ -z "$stderr" ]
}

@test "a failed write to standard output is an error, reported once" {
  [ -w /dev/full ] || skip "no /dev/full"
  run --separate-stderr sh -c '"$0" --help >/dev/full' "$GPUCAP"
  status_is 1
  [ "$stderr" = "gpucap: error: cannot write to standard output" ]
  run --separate-stderr sh -c '"$0" env >/dev/full' "$GPUCAP"
  status_is 1
  run --separate-stderr sh -c '"$0" plot --help >/dev/full' "$GPUCAP"
  status_is 1
}

@test "README's example of a refused setting is what gpucap prints" {
  cmd=$(sed -n 's/^\$ \(gpucap run --limit 8GB .*\)$/\1/p' "$TOP/README.md")
  want=$(sed -n '/^\$ gpucap run --limit 8GB /,/^```/p' "$TOP/README.md" | sed '1d;$d')
  [ -n "$cmd" ] && [ -n "$want" ]
  run --separate-stderr "$GPUCAP" ${cmd#gpucap }
  status_is 125
  [ "$stderr" = "$want" ]
}

@test "README's command table and the man page name every command of the table, and no other" {
  want=$(commands | tr -d , | tr ' ' '\n' | sort)
  readme=$(sed -n 's/^| `gpucap \([a-z]*\).*/\1/p' "$TOP/README.md" | sort -u)
  [ "$readme" = "$want" ] || { printf 'README: %s\nwant: %s\n' "$readme" "$want" >&2; false; }
  man=$(sed -n 's/^\.B gpucap \([a-z]*\)$/\1/p' "$TOP/scripts/gpucap.1" | sort -u)
  [ "$man" = "$want" ] || { printf 'man page: %s\nwant: %s\n' "$man" "$want" >&2; false; }
  sections=$(sed -n '/^\.SH COMMANDS/,/^\.SH /{/^\.TP$/{n;s/^\.B \([a-z]*\)$/\1/p}}' \
    "$TOP/scripts/gpucap.1" | sort -u)
  [ "$sections" = "$want" ]
}
