#!/usr/bin/env bats
# gpucap itself: the command dispatch, the top-level --help (which lists the settings from the
# options table) and --version, `gpucap help COMMAND`, and the usage errors.

load helpers

@test "--help lists every command and every setting" {
  run --separate-stderr "$GPUCAP" --help
  status_is 0
  [ -z "$stderr" ]
  has "Usage: gpucap COMMAND [ARGS...]"
  for c in "run [OPTIONS] [--] COMMAND [ARGS...]" "report FILE.json" "plot TRACE.csv -o OUT.svg" \
      "env [OPTIONS]" "help [COMMAND]"; do
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
  for c in run report plot env; do
    run "$GPUCAP" "$c" --help
    status_is 0
    [[ "$output" == "Usage: gpucap $c"* ]]
    run "$GPUCAP" "$c" --version
    status_is 0
    [[ "$output" == "gpucap "* ]]
  done
}

@test "help COMMAND is COMMAND --help; help alone is --help" {
  for c in run report plot env; do
    run "$GPUCAP" help "$c"
    status_is 0
    [ "$output" = "$("$GPUCAP" "$c" --help)" ]
  done
  run "$GPUCAP" help
  status_is 0
  [ "$output" = "$("$GPUCAP" --help)" ]
  run --separate-stderr "$GPUCAP" help nosuch
  status_is 125
  err_has "help: no such command; commands: run, report, plot, export, env"
  run --separate-stderr "$GPUCAP" help run plot
  status_is 125
  err_has "help: one command at a time"
}

@test "no command, an unknown command, an option before the command: 125" {
  run --separate-stderr "$GPUCAP"
  status_is 125
  err_has "gpucap: error: no command given; try gpucap --help"
  [ -z "$output" ]
  run --separate-stderr "$GPUCAP" start
  status_is 125
  err_has "gpucap: error: unknown command 'start'; commands: run, report, plot, export, env"
  run --separate-stderr "$GPUCAP" --limit 1GiB -- true
  status_is 125
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
