#!/usr/bin/env python3
"""The phases of each session bench/session-phases.sh traced: for every
variant of each round, Claude Code's life, and under nd7 run the start
(the test's unshare and setpriv; nd7 up to the version probe; the probe;
the probe's end to Claude Code's exec), Claude Code's life and the end
(Claude Code's exit to nd7 run's front's). Medians over the rounds after
the warm-up, in milliseconds. Reads `perf trace` output of
sched:sched_process_{fork,exec,exit}."""
import re
import statistics
import sys

NAMES = ["bare", "nd7 setup's hooks", "under nd7 run, first run in the home",
         "under nd7 run, the version cache warm"]


def events(path):
    out = []
    for line in open(path, errors="replace"):
        m = re.match(r"\s*([\d.]+) (\S+)/(\d+) sched:sched_process_(\w+)\((.*)", line)
        if m:
            out.append((float(m[1]), int(m[3]), m[4], m[5]))
    out.sort()
    return out


def main(path):
    evs = events(path)
    parent, image, ends = {}, {}, {}
    for t, pid, kind, rest in evs:
        if kind == "fork":
            parent[int(re.search(r"child_pid: (\d+)", rest)[1])] = pid
        elif kind == "exec":
            image.setdefault(pid, []).append((t, re.search(r'filename: "([^"]*)"', rest)[1]))
        elif kind == "exit":
            ends[pid] = t
    # The test thread: the parent of the first unshare.
    unshares = [p for p, imgs in image.items() if any(f.endswith("/unshare") for _, f in imgs)]
    test = parent[min(unshares, key=lambda p: image[p][0][0])]
    starts = []  # (time, pid, kind) of each session the test started
    for pid, imgs in image.items():
        if parent.get(pid) != test:
            continue
        t, f = imgs[0]
        if f.endswith("/unshare"):
            starts.append((t, pid, "nd7"))
        elif f.split("/")[-1] in ("claude", "claude.exe"):
            starts.append((t, pid, "claude"))
    starts.sort()
    starts = starts[1:]  # the install's `claude --version`
    descendants = {}
    for child, par in parent.items():
        descendants.setdefault(par, []).append(child)

    def below(pid):
        todo, seen = [pid], []
        while todo:
            p = todo.pop()
            seen.append(p)
            todo.extend(descendants.get(p, []))
        return seen

    rows = []
    for t, pid, kind in starts:
        if kind == "claude":
            rows.append({"total": ends[pid] - t, "claude": ends[pid] - t})
            continue
        nd7_exec = next(tt for tt, f in image[pid] if f.endswith("/nd7"))
        claudes = sorted((image[p][0][0], p) for p in below(pid)
                         if p in image and image[p][0][1].split("/")[-1] in ("claude", "claude.exe")
                         and "claude" not in image.get(parent.get(p), [(0, "")])[-1][1])
        main_t, main_pid = claudes[-1]
        row = {"total": ends[pid] - t, "harness": nd7_exec - t, "claude": ends[main_pid] - main_t,
               "end": ends[pid] - ends[main_pid]}
        if len(claudes) > 1:
            probe_t, probe_pid = claudes[0]
            row.update({"start": probe_t - nd7_exec, "probe": ends[probe_pid] - probe_t,
                        "after probe": main_t - ends[probe_pid]})
        else:
            row.update({"start": main_t - nd7_exec, "probe": 0.0, "after probe": 0.0})
        rows.append(row)
    names = NAMES if len(rows) % len(NAMES) == 0 else NAMES[:3]
    per = len(names)
    rounds = len(rows) // per
    print(f"{rounds - 1} rounds after the warm-up; medians, ms")
    cols = ["total", "harness", "start", "probe", "after probe", "claude", "end"]
    print("| variant | " + " | ".join(cols) + " |")
    print("| --- |" + " --- |" * len(cols))
    for v, name in enumerate(names):
        mine = [rows[r * per + v] for r in range(1, rounds)]
        cells = []
        for c in cols:
            vals = [m[c] for m in mine if c in m]
            cells.append(f"{statistics.median(vals):.0f}" if vals else "")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
