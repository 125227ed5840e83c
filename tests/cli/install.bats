#!/usr/bin/env bats
# make install / make uninstall with PREFIX and DESTDIR, the installed gpucap finding its
# library relative to itself (also when moved or reached through a symlink), and make demo.
#
# The nested make installs what this build already made (-o: never remade here), and inherits
# the outer make's variables (SANITIZER) through MAKEFLAGS.

load helpers

# mk TARGET VAR=VALUE...: make in the source tree for this build, quietly.
mk() {
  make -C "$TOP" --no-print-directory -s BUILD="$BUILD" -o "$BUILD/gpucap" \
    -o "$BUILD/libgpucap.so" -o "$BUILD/tests/workload" "$@"
}

# installed_run ROOT ARGS...: the installed gpucap run, over the fake driver.
installed_run() {
  local root=$1
  shift
  LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$(preload_env)" "$root/bin/gpucap" run "$@"
}

@test "make install DESTDIR PREFIX: the layout" {
  run mk install DESTDIR="$SCRATCH/stage" PREFIX=/opt/gpucap
  status_is 0
  root="$SCRATCH/stage/opt/gpucap"
  [ -x "$root/bin/gpucap" ]
  [ -f "$root/lib/gpucap/libgpucap.so" ]
  [ -f "$root/share/doc/gpucap/README.md" ]
  # Every document README.md links to is installed, so its links work in the installed tree.
  for d in $(grep -o '(docs/[a-z]*\.md)' "$TOP/README.md" | tr -d '()' | sort -u); do
    [ -f "$root/share/doc/gpucap/$d" ] || { echo "not installed: $d" >&2; return 1; }
  done
  for d in "$TOP"/docs/*.md; do
    cmp "$d" "$root/share/doc/gpucap/docs/${d##*/}"
  done
  head -n 5 "$root/share/man/man1/gpucap.1" | grep -q '^\.TH GPUCAP 1'
  grep -q '`share/man/man1/gpucap.1`' "$TOP/README.md" # where README says it goes
  ndocs=$(ls "$TOP"/docs/*.md | wc -l)
  # The Slurm plug-in is built, and installed beside the library, where Slurm's headers are.
  nplugin=0
  if [ -f "$BUILD/gpucap_spank.so" ]; then
    cmp "$root/lib/gpucap/gpucap_spank.so" "$BUILD/gpucap_spank.so"
    nplugin=1
  fi
  # and the list of the folders install made, for uninstall
  [ "$(find "$SCRATCH/stage" -type f | wc -l)" -eq $((5 + ndocs + nplugin)) ]
  grep -qx "$root/share/man/man1" "$root/lib/gpucap/installed-dirs"
  cmp "$root/lib/gpucap/libgpucap.so" "$BUILD/libgpucap.so"
}

@test "the installed gpucap finds the installed library and caps a run" {
  mk install DESTDIR="$SCRATCH/stage" PREFIX=/usr
  root="$SCRATCH/stage/usr"
  run "$root/bin/gpucap" env
  status_is 0
  [ "$(grep '^GPUCAP_LIB ' <<<"$output" | tr -s ' ')" = \
    "GPUCAP_LIB $root/lib/gpucap/libgpucap.so default (next to gpucap)" ]
  run --separate-stderr installed_run "$root" --limit 1GiB -- "$WORKLOAD"
  status_is 0
  has "total     1024 MiB"
  err_has "gpucap: memory report"
  run --separate-stderr env LD_PRELOAD="$(preload_env)" ASAN_OPTIONS=detect_leaks=0 \
    "$root/bin/gpucap" run -- sh -c 'printf %s "$LD_PRELOAD"'
  [ "$output" = "${SAN_PRELOAD:+$SAN_PRELOAD:}$root/lib/gpucap/libgpucap.so" ]
}

@test "an installed tree still works when moved, and through a symlink" {
  mk install DESTDIR="$SCRATCH/stage" PREFIX=/usr
  mv "$SCRATCH/stage/usr" "$SCRATCH/moved"
  run --separate-stderr installed_run "$SCRATCH/moved" --limit 1GiB -- "$WORKLOAD"
  status_is 0
  has "total     1024 MiB"
  mkdir bin && ln -s "$SCRATCH/moved/bin/gpucap" bin/gpucap
  run bin/gpucap env
  [[ "$output" == *"GPUCAP_LIB               $SCRATCH/moved/lib/gpucap/libgpucap.so"* ]]
}

@test "an installed gpucap without its library says so, and GPUCAP_LIB fixes it" {
  mk install DESTDIR="$SCRATCH/stage" PREFIX=/usr
  mv "$SCRATCH/stage/usr/lib/gpucap/libgpucap.so" "$SCRATCH/elsewhere.so"
  run --separate-stderr "$SCRATCH/stage/usr/bin/gpucap" run -- true
  status_is 125
  err_has "cannot find libgpucap.so: looked for '$SCRATCH/stage/usr/bin/../lib/gpucap/libgpucap.so'"
  err_has "set GPUCAP_LIB"
  run env GPUCAP_LIB="$SCRATCH/elsewhere.so" LD_PRELOAD="$(preload_env)" \
    ASAN_OPTIONS=detect_leaks=0 "$SCRATCH/stage/usr/bin/gpucap" run -- true
  status_is 0
}

@test "make uninstall removes every installed file, and the folders install made" {
  mk install DESTDIR="$SCRATCH/stage" PREFIX=/opt/gpucap
  run mk uninstall DESTDIR="$SCRATCH/stage" PREFIX=/opt/gpucap
  status_is 0
  [ ! -e "$SCRATCH/stage" ]
  # A folder that was there before stays, with what else it holds, and so does an empty one.
  mkdir -p "$SCRATCH/stage/usr/bin" "$SCRATCH/stage/usr/share/man/man1"
  touch "$SCRATCH/stage/usr/bin/other"
  mk install DESTDIR="$SCRATCH/stage" PREFIX=/usr
  mk install DESTDIR="$SCRATCH/stage" PREFIX=/usr # again: the list of what it made is kept
  mk uninstall DESTDIR="$SCRATCH/stage" PREFIX=/usr
  [ "$(cd "$SCRATCH/stage" && find . | sort | tr '\n' ' ')" = \
    ". ./usr ./usr/bin ./usr/bin/other ./usr/share ./usr/share/man ./usr/share/man/man1 " ]
}

@test "PREFIX defaults to /usr/local" {
  mk install DESTDIR="$SCRATCH/stage"
  [ -x "$SCRATCH/stage/usr/local/bin/gpucap" ]
  [ -f "$SCRATCH/stage/usr/local/lib/gpucap/libgpucap.so" ]
  mk uninstall DESTDIR="$SCRATCH/stage"
  [ ! -e "$SCRATCH/stage/usr/local/bin/gpucap" ]
}

@test "make demo runs the workload capped, prints the report and writes the picture" {
  if [ -n "${SAN_PRELOAD:-}" ]; then
    skip "make demo runs without the sanitizer runtime in LD_PRELOAD"
  fi
  rm -f "$BUILD/demo/timeline.svg"
  run --separate-stderr mk demo
  status_is 0
  has "gpucap run --limit 2GiB"
  has "total     2048 MiB"
  err_has "gpucap: memory report"
  has "timeline.svg in a browser"
  grep -q '>cap</tspan>' "$BUILD/demo/timeline.svg"
}
