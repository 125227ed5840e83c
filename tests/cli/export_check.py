"""Checks `gpucap export` output against the trace it was made from, independently of gpucap's
own reader: the trace is replayed here (the csv module, per device: bytes reserved from the
driver, held by blocks, requested), then

  export_check.py torch TRACE.csv SNAPSHOT.pickle
      the snapshot loads with Python's pickle; its per-device trace has an entry per event;
      replaying those entries gives exactly its `segments` (every live block inside a segment,
      each segment's blocks tiling it); and, when PyTorch is importable, its own viewer code
      (torch.cuda._memory_viz: segsum, trace, segments, memory, trace_plot, segment_plot)
      reads it, its `trace` printing one line per block and region;
  export_check.py perfetto TRACE.csv TRACE.json
      the JSON parses; per device, the counters `reserved`, `held` and `requested` step to the
      replay's values at each event time, and each refusal is an instant event.

Prints what it checked; exits 1 with the first disagreement.
"""
import csv
import json
import pickle
import sys


def fail(msg):
    print("export_check: " + msg, file=sys.stderr)
    sys.exit(1)


def replay(path):
    """Per device: list of (time_us, reserved, held, requested, refused) after each event."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    regions = {}  # (dev, base) -> size
    live = {}  # ptr -> (dev, requested, held, pooled)
    state = {}
    series = {}
    t0 = None
    prev = 0
    for r in rows:
        h, m, s = r["Time"].split(":")
        t = (int(h) * 3600 + int(m) * 60) * 10**6 + round(float(s) * 10**6)
        t0 = t if t0 is None else t0
        t = max(t, prev)  # a row stamped before the one above it: moved up, as gpucap reads it
        prev = t
        dev = int(r["Device"])
        ev = r["Event"]
        ptr = int(r["Pointer"], 16)
        size, held = int(r["Size"]), int(r["Held"])
        res, hel, req = state.get(dev, (0, 0, 0))
        refused = 0
        if ev == "reserve":
            regions[(dev, ptr)] = size
            res += size
        elif ev == "release":
            res -= regions.pop((dev, ptr))
        elif ev == "alloc":
            pooled = any(d == dev and b <= ptr < b + n for (d, b), n in regions.items())
            live[ptr] = (dev, size, held, pooled)
            hel, req = hel + held, req + size
            res += 0 if pooled else held
        elif ev == "free":
            d, rq, hd, pooled = live.pop(ptr)
            hel, req = hel - hd, req - rq
            res -= 0 if pooled else hd
        elif ev == "refused":
            refused = size
        state[dev] = (res, hel, req)
        series.setdefault(dev, []).append((t - t0, res, hel, req, refused))
    return rows, series


def check_torch(rows, snap_path):
    with open(snap_path, "rb") as f:
        snap = pickle.load(f)
    if set(snap) != {"segments", "device_traces"}:
        fail(f"keys {sorted(snap)}")
    traces = snap["device_traces"]
    for dev in {int(r["Device"]) for r in rows}:
        want = {
            "alloc": sum(r["Event"] == "alloc" and int(r["Device"]) == dev for r in rows),
            "oom": sum(r["Event"] == "refused" and int(r["Device"]) == dev for r in rows),
            "free_completed": sum(r["Event"] == "free" and int(r["Device"]) == dev for r in rows),
        }
        for action, n in want.items():
            got = sum(e["action"] == action for e in traces[dev])
            if got != n:
                fail(f"device {dev}: {got} '{action}' entries, the trace has {n}")
    # Forward replay of the entries must end where the segments say.
    for dev, entries in enumerate(traces):
        segs, blocks = {}, {}
        for e in entries:
            a = e["action"]
            if a == "segment_alloc":
                segs[e["addr"]] = e["size"]
            elif a == "segment_free":
                if segs.pop(e["addr"], None) != e["size"]:
                    fail(f"device {dev}: segment_free of {e['addr']:#x} not allocated as such")
            elif a == "alloc":
                blocks[e["addr"]] = e["size"]
            elif a == "free_completed":
                if blocks.pop(e["addr"], None) != e["size"]:
                    fail(f"device {dev}: free of {e['addr']:#x} not allocated as such")
            elif a not in ("free_requested", "oom"):
                fail(f"device {dev}: unknown action {a}")
        mine = [s for s in snap["segments"] if s["device"] == dev]
        if {s["address"]: s["total_size"] for s in mine} != segs:
            fail(f"device {dev}: segments {mine} are not what the entries leave: {segs}")
        active = {}
        for s in mine:
            at = s["address"]
            for b in s["blocks"]:
                if b["address"] != at:
                    fail(f"device {dev}: blocks of segment {s['address']:#x} do not tile it")
                at += b["size"]
                if b["state"] == "active_allocated":
                    active[b["address"]] = b["size"]
            if at != s["address"] + s["total_size"]:
                fail(f"device {dev}: blocks of segment {s['address']:#x} do not fill it")
        if active != blocks:
            fail(f"device {dev}: live blocks {active} are not what the entries leave: {blocks}")
    print(f"export_check: torch: {len(snap['segments'])} segments, "
          f"{sum(len(t) for t in traces)} entries agree with the trace")
    try:
        import torch.cuda._memory_viz as mv
    except ImportError:
        print("export_check: torch: PyTorch not importable; its viewer not tried")
        return
    flat = lambda lines: lines  # noqa: E731 (the flame graph's input, not a picture)
    mv.segsum(snap)
    text = mv.trace(snap)
    mv.segments(snap, format_flamegraph=flat)
    mv.memory(snap, format_flamegraph=flat)
    for html in (mv.trace_plot(snap), mv.segment_plot(snap)):
        if "snapshot.pickle" not in html:
            fail("the viewer's page does not embed the snapshot")
    allocs = sum(e["action"] in ("alloc", "segment_alloc") for t in traces for e in t)
    lines = text.count(" = ")
    if lines != allocs:
        fail(f"torch's trace() names {lines} blocks and regions, the snapshot has {allocs}")
    print(f"export_check: torch: PyTorch's viewer code reads it ({lines} blocks and regions)")


def check_perfetto(series, path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    for dev, pts in series.items():
        pid = [p for p, n in names.items() if n == f"device {dev}"]
        if len(pid) != 1:
            fail(f"no process for device {dev}: {names}")
        mine = [e for e in events if e["pid"] == pid[0] and e["ph"] in ("C", "i")]
        for k, name in ((1, "reserved"), (2, "held"), (3, "requested")):
            counter = [(e["ts"], e["args"]["bytes"]) for e in mine if e["name"] == name]
            # The counter's value at each event's time (the last sample at or before it) must be
            # the replay's value after the last event at that time.
            at_time = {}
            for p in pts:
                at_time[p[0]] = p[k]
            for t, want in at_time.items():
                got = [v for ts, v in counter if ts <= t + 0.0005]
                if not got or got[-1] != want:
                    fail(f"device {dev}: {name} at {t} us is {got[-1:] or None}, replay {want}")
        refused = [p for p in pts if p[4] > 0]
        inst = [e for e in mine if e["ph"] == "i" and e["name"] == "refused"]
        if [e["args"]["requested_bytes"] for e in inst] != [p[4] for p in refused]:
            fail(f"device {dev}: {len(inst)} refusal events, the trace has {len(refused)}")
    print(f"export_check: perfetto: {len(events)} events agree with the trace "
          f"({len(series)} devices)")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("torch", "perfetto"):
        fail("usage: export_check.py torch|perfetto TRACE.csv OUTPUT")
    rows, series = replay(sys.argv[2])
    if sys.argv[1] == "torch":
        check_torch(rows, sys.argv[3])
    else:
        check_perfetto(series, sys.argv[3])


main()
