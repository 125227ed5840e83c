# The report of `make gpu-check` (sourced by tests/gpu/check.sh at its end): $KIT_OUT/report.json
# (the machine as the watcher described it, the tolerance, the summary, every check's record
# from $KIT_RECORDS) and $KIT_OUT/report.md (the same for people: the machine, the tolerance,
# the failures first, then every check with its figures, bytes in MiB).

# md_rows: the records of $KIT_RECORDS as Markdown table rows (number, check, result, figures,
# detail); STATUS picks one status only when set.
md_rows() {
  awk -v only="${1:-}" '
    function field(s, from, to,   i, j) {
      i = index(s, from)
      if (!i) return ""
      s = substr(s, i + length(from))
      j = index(s, to)
      return j ? substr(s, 1, j - 1) : s
    }
    function cell(s) {
      gsub(/\\"/, "\"", s); gsub(/\\\\/, "\\", s); gsub(/\|/, "\\|", s)
      return s
    }
    {
      n++
      name = field($0, "{\"name\": \"", "\", \"status\": \"")
      status = field($0, "\"status\": \"", "\"")
      figs = field($0, "\"figures\": {", "}, \"detail\": \"")
      detail = $0
      sub(/.*"detail": "/, "", detail)
      sub(/"}$/, "", detail)
      if (only != "" && status != only) next
      out = ""
      while (match(figs, /"[a-z0-9_]+_bytes": -?[0-9]+/)) {
        pair = substr(figs, RSTART, RLENGTH)
        key = pair; sub(/":.*/, "", key); sub(/^"/, "", key); sub(/_bytes$/, "", key)
        val = pair; sub(/.*: /, "", val)
        out = out substr(figs, 1, RSTART - 1) key ": " sprintf("%.1f MiB", val / 1048576)
        figs = substr(figs, RSTART + RLENGTH)
      }
      figs = out figs
      gsub(/"/, "", figs)
      if (status == "todo") status = "known (todo)"
      printf "| %d | %s | %s | %s | %s |\n", n, cell(name), status, cell(figs), cell(detail)
    }' "$KIT_RECORDS"
}

kit_report() {
  local json="$KIT_OUT/report.json" md="$KIT_OUT/report.md" m="$KIT_OUT/machine.json"
  local pass fail skipped todo date commit toolkit d version
  pass=$(grep -c '"status": "pass"' "$KIT_RECORDS")
  fail=$(grep -c '"status": "fail"' "$KIT_RECORDS")
  skipped=$(grep -c '"status": "skip"' "$KIT_RECORDS")
  todo=$(grep -c '"status": "todo"' "$KIT_RECORDS")
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  commit=$(git -C "$TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)
  version=$("$BUILD/gpucap" --version 2>/dev/null | head -n 1)
  toolkit=none
  [ -x "${NVCC:-}" ] || NVCC=$(command -v nvcc || true)
  [ -z "${NVCC:-}" ] || toolkit=$("$NVCC" --version 2>/dev/null | grep -i release | head -n 1)
  {
    echo "{"
    echo "  \"kit\": \"gpu-check\","
    echo "  \"driver_mode\": \"$KIT_DRIVER\","
    echo "  \"date\": \"$date\","
    echo "  \"gpucap\": $(jstr "$version"),"
    echo "  \"commit\": \"$commit\","
    echo "  \"host\": $(jstr "$(uname -srm)"),"
    echo "  \"toolkit\": $(jstr "$toolkit"),"
    if [ -s "$m" ] && [ "$KIT_NDEV" -gt 0 ]; then
      echo "  \"machine\": $(sed '1!s/^/  /' "$m"),"
    else
      echo "  \"machine\": null,"
    fi
    echo "  \"oracle\": {\"watcher\": \"gpuwatch\", \"interval_us\": $KIT_INTERVAL,"
    echo "    \"figures\": [\"NVML per-process used memory\", \"cuMemGetInfo_v2 from the watcher's context\"]},"
    echo "  \"tolerance\": {\"rule\": \"CONTEXTS x context_bytes (rows: or the bare run's end figure, if larger) + granularity_bytes\","
    echo "    \"devices\": ["
    for d in $(seq 0 $((KIT_NDEV - 1))); do
      echo "      {\"ordinal\": $d, \"context_bytes\": ${KIT_CTX[d]}, \"granularity_bytes\": ${KIT_GRAN[d]}}$([ $((d + 1)) -lt "$KIT_NDEV" ] && echo ,)"
    done
    echo "    ]},"
    echo "  \"settings\": {\"kinds\": $(jstr "${KIT_KINDS:-}"), \"room_bytes\": ${KIT_ROOM:-0}, \"invariant_ops\": ${INV_OPS:-0}, \"only\": $(jstr "${GPU_CHECK_ONLY:-}"), \"shim\": $(jstr "$KIT_SHIM")},"
    echo "  \"summary\": {\"pass\": $pass, \"fail\": $fail, \"skip\": $skipped, \"todo\": $todo},"
    echo "  \"checks\": ["
    sed 's/^/    /; $!s/$/,/' "$KIT_RECORDS"
    echo "  ]"
    echo "}"
  } > "$json"
  {
    echo "# gpucap on a GPU: the \`make gpu-check\` report"
    echo
    echo "| | |"
    echo "| --- | --- |"
    for d in $(seq 0 $((KIT_NDEV - 1))); do
      echo "| GPU $d | $(grep "\"ordinal\": $d," "$m" | sed 's/.*"name": "\([^"]*\)".*"uuid": "\([^"]*\)".*/\1 (\2)/'), $(mib "${KIT_TOTAL[d]}") (NVML's total: $(mib "$(dev_num "$m" "$d" nvml_total_bytes)")) |"
    done
    if [ "$KIT_NDEV" -gt 0 ]; then
      local cv
      cv=$(json_num "$m" cuda_driver_version)
      echo "| driver | $(json_str "$m" driver_version) (NVML $(json_str "$m" nvml_version)), CUDA $((cv / 1000)).$((cv % 1000 / 10)) (cuDriverGetVersion $cv)$([ "$(json_bool "$m" fake)" = true ] && echo ': gpucap'"'"'s fake driver') |"
      echo "| libraries | \`$(json_str "$m" libcuda)\`, \`$(json_str "$m" libnvidia_ml)\` |"
    else
      echo "| driver | none usable: $(sed -n 's/.*"detail": "\(.*\)"}$/\1/p' "$KIT_RECORDS" | head -n 1) |"
    fi
    echo "| toolkit | $toolkit |"
    echo "| gpucap | $version, commit $commit |"
    echo "| host, date | $(uname -srm), $date |"
    [ "$KIT_NDEV" = 0 ] ||
      echo "| oracle | gpuwatch: $(json_str "$m" process_list) and cuMemGetInfo_v2 from its own context, every $KIT_INTERVAL µs |"
    for d in $(seq 0 $((KIT_NDEV - 1))); do
      echo "| tolerance, device $d | a bare process's context: $(mib "${KIT_CTX[d]}") (measured in this run); allocation granularity $(mib "${KIT_GRAN[d]}") |"
    done
    echo
    echo "**$pass passed, $fail failed, $skipped skipped, $todo known (todo).**"
    echo
    echo "A check under gpucap fails when a process of the run shows NVML more than its cap plus"
    echo "the tolerance (CONTEXTS x the context above or, for a row, what its bare run held at its"
    echo "end if more, plus one unit of granularity), or the device's used memory rises by more than"
    echo "the run's processes x (cap + tolerance); a pair of runs fails when the bare and the capped"
    echo "run disagree on anything but the memory they were given (docs/compatibility.md, \"Real GPUs\")."
    if [ "$fail" -gt 0 ]; then
      echo
      echo "## Failed"
      echo
      echo "| # | check | result | figures | detail |"
      echo "| ---: | --- | --- | --- | --- |"
      md_rows fail
    fi
    echo
    echo "## Every check"
    echo
    echo "| # | check | result | figures | detail |"
    echo "| ---: | --- | --- | --- | --- |"
    md_rows
  } > "$md"
}
kit_report
