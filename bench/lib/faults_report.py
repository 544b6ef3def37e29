"""The table bench/faults.sh prints: what the nodes of each case did, read from their logs, exit
statuses and metrics files under OUT (one folder per case; a case that did not run is left out).

usage: python3 bench/lib/faults_report.py OUT NODES VICTIM CONFIG PEER_TIMEOUT
"""
import datetime
import json
import os
import re
import sys

out, nodes, victim, config, peer_timeout = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                            sys.argv[4], sys.argv[5])


def stamp(line, day):
    # "[HH:MM:SS.mmm] [rank r] ..." (the local date of the run)
    m = re.search(r"\[(\d\d):(\d\d):(\d\d)\.(\d\d\d)\]", line)
    if not m:
        return None
    h, mi, s, ms = map(int, m.groups())
    return datetime.datetime.combine(day, datetime.time(h, mi, s, ms * 1000)).timestamp()


def first_time(path, text, day):
    for line in open(path, errors="replace"):
        if text in line:
            return stamp(line, day)
    return None


def first_line(path, text):
    for line in open(path, errors="replace"):
        if text in line:
            return line.strip()
    return None


def survivors(name):
    return [r for r in range(nodes) if not (name != "ako-undisturbed" and r == victim)]


def metrics(name, ranks):
    rows = []
    for r in ranks:
        p = f"{out}/{name}/node-{r}.json"
        if os.path.exists(p):
            rows.append(json.load(open(p)))
    return rows


def ran(name):
    return os.path.isdir(f"{out}/{name}")


def exits(name):
    codes = []
    for r in range(nodes):
        p = f"{out}/{name}/exit-{r}"
        codes.append(open(p).read().strip() if os.path.exists(p) else "-")
    return codes


def day_of(name, mark="signal_at"):
    at = float(open(f"{out}/{name}/{mark}").read())
    return at, datetime.datetime.fromtimestamp(at).date()


print(f"{config}, {nodes} nodes on 127.0.0.1, rank {victim} signalled during its first epoch; "
      f"net.peer_timeout = {peer_timeout} s for every run")

if ran("ako-undisturbed"):
    base = metrics("ako-undisturbed", range(nodes))
    base_acc = sum(r["test_accuracy"] for r in base) / len(base)
    base_final = sum(r["final_test_accuracy"] for r in base) / len(base)
    print(f"{'run':16} {'survivors go on':>16} {'replicas':>9} {'final':>7}  (undisturbed: "
          f"replicas {100 * base_acc:.2f}%, final {100 * base_final:.2f}%)")
    for name in ("ako-kill", "ako-stop"):
        at, day = day_of(name)
        went_on = [first_time(f"{out}/{name}/log-{r}.txt", "going on with", day)
                   for r in survivors(name)]
        latency = "-" if None in went_on else f"{max(went_on) - at:.2f} s"
        rows = metrics(name, survivors(name))
        acc = sum(r["test_accuracy"] for r in rows) / max(1, len(rows))
        final = sum(r["final_test_accuracy"] for r in rows) / max(1, len(rows))
        print(f"{name:16} {latency:>16} {100 * acc:8.2f}% {100 * final:6.2f}%  "
              f"({len(rows)} of {nodes - 1} survivors finished; vs undisturbed: "
              f"{100 * (acc - base_acc):+.2f} points)")

ps_acc = None
if ran("ps-undisturbed"):
    ps_base = metrics("ps-undisturbed", range(nodes))
    ps_acc = sum(r["test_accuracy"] for r in ps_base) / len(ps_base)

if ran("ps-kill") and ps_acc is not None:
    print(f"{'run':16} {'rolled back, on':>16} {'accuracy':>9} {'from':>6}  (undisturbed ps: "
          f"{100 * ps_acc:.2f}%)")
    for name in ("ps-kill", "ps-stop"):
        at, day = day_of(name)
        going = []
        for r in survivors(name):
            t = None
            for line in open(f"{out}/{name}/log-{r}.txt", errors="replace"):
                if "iterations in all" in line:
                    t = stamp(line, day)  # the last one: the new view's start
            going.append(t)
        latency = "-" if None in going or min(going) < at else f"{max(going) - at:.2f} s"
        rows = metrics(name, range(nodes - 1))  # the new view's ranks 0 .. n-2
        acc = sum(r["test_accuracy"] for r in rows) / max(1, len(rows))
        start = rows[0].get("resumed_from_iteration") if rows else None
        print(f"{name:16} {latency:>16} {100 * acc:8.2f}% {start if start is not None else '-':>6}  "
              f"({len(rows)} of {nodes - 1} survivors finished, rollbacks "
              f"{[r.get('rollbacks') for r in rows]}; vs undisturbed: "
              f"{100 * (acc - ps_acc):+.2f} points)")

if ran("ako-rejoin"):
    long = metrics("ako-long", range(nodes))
    long_final = sum(r["final_test_accuracy"] for r in long) / len(long)
    name = "ako-rejoin"
    signal_at, _ = day_of(name)
    restart, day = day_of(name, "restart_at")
    log = f"{out}/{name}/log-{victim}-rejoined.txt"
    rejoined = first_time(log, "rejoined from rank", day)
    connected = first_time(log, "connected to every peer", day)
    rows = metrics(name, range(nodes))
    final = sum(r["final_test_accuracy"] for r in rows) / max(1, len(rows))
    same = len({r["final_test_accuracy"] for r in rows}) == 1
    joiner = rows[victim] if len(rows) == nodes else {}
    print(f"{'run':16} {'restart->rejoined':>18} {'connect->rejoined':>18} {'final':>7}  "
          f"(undisturbed ako, as many epochs: final {100 * long_final:.2f}%)")
    print(f"{name:16} {(f'{rejoined - restart:.2f} s' if rejoined else '-'):>18} "
          f"{(f'{rejoined - connected:.2f} s' if rejoined and connected else '-'):>18} "
          f"{100 * final:6.2f}%  ({len(rows)} of {nodes} finished, final model the same on all: "
          f"{same}; restarted {restart - signal_at:.2f} s after the kill; it took over at "
          f"iteration {joiner.get('resumed_from_iteration')}; vs undisturbed: "
          f"{100 * (final - long_final):+.2f} points)")

if ran("ps-rejoin") and ps_acc is not None:
    name = "ps-rejoin"
    restart, day = day_of(name, "restart_at")
    admitted = first_time(f"{out}/{name}/log-0.txt", "node(s) rejoined at the checkpoint", day)
    going = None
    for line in open(f"{out}/{name}/log-{victim}-rejoined.txt", errors="replace"):
        if "iterations in all" in line:
            going = stamp(line, day)
    rows = metrics(name, range(nodes))
    acc = sum(r["test_accuracy"] for r in rows) / max(1, len(rows))
    same = len({r["test_accuracy"] for r in rows}) == 1
    print(f"{'run':16} {'restart->admitted':>18} {'admitted->going':>18} {'accuracy':>9}  "
          f"(undisturbed ps: {100 * ps_acc:.2f}%)")
    print(f"{name:16} {(f'{admitted - restart:.2f} s' if admitted else '-'):>18} "
          f"{(f'{going - admitted:.2f} s' if going and admitted else '-'):>18} {100 * acc:8.2f}%  "
          f"({len(rows)} of {nodes} finished, the same accuracy on all: {same}; views "
          f"{[r.get('view') for r in rows]}, rejoined {[r.get('rejoined') for r in rows]}; vs "
          f"undisturbed: {100 * (acc - ps_acc):+.2f} points)")

# Partitions: the victim SIGSTOPped until the others went on, then woken. It must stop (non-zero),
# naming the cut, and write no metrics; the others finish (0).
for name in ("ako-partition", "ps-partition"):
    if not ran(name):
        continue
    codes = exits(name)
    woke_at, day = day_of(name, "wake_at")
    log = f"{out}/{name}/log-{victim}.txt"
    cut = first_line(log, "cut off from the majority") or first_line(log, "too few nodes left")
    stopped_at = (first_time(log, "cut off from the majority", day) or
                  first_time(log, "too few nodes left", day))
    wrote = os.path.exists(f"{out}/{name}/node-{victim}.json")
    finished = metrics(name, range(nodes - 1))
    print(f"{name}: exit statuses {codes} (rank {victim} woken); rank {victim} "
          f"{'stopped ' + f'{stopped_at - woke_at:.2f} s after waking' if stopped_at else 'did not stop'}"
          f", wrote its metrics file: {wrote}; {len(finished)} of {nodes - 1} others wrote theirs "
          f"(nodes {[r.get('nodes') for r in finished]})")
    if cut:
        print(f"    {cut[:300]}")

if ran("ps-flood"):
    name = "ps-flood"
    flood = json.load(open(f"{out}/{name}/flood.json"))
    codes = exits(name)
    same = None
    if ran("ps-undisturbed"):
        same = all(open(f"{out}/{name}/parameters-{r}.f32", "rb").read() ==
                   open(f"{out}/ps-undisturbed/parameters-{r}.f32", "rb").read()
                   for r in range(nodes)
                   if os.path.exists(f"{out}/{name}/parameters-{r}.f32"))
    print(f"{name}: {flood['connections']} connections to rank 0 ({flood['stalled']} announcing a "
          f"large header and stalling, {flood['silent']} silent); rank 0's RSS "
          f"{flood['rss_before'] / 1e6:.1f} MB before, {flood['rss_peak'] / 1e6:.1f} MB at its peak "
          f"(+{(flood['rss_peak'] - flood['rss_before']) / 1e6:.1f} MB); closed by the node: "
          f"{flood['closed']} of {flood['connections']}, the last {flood['last_closed_s']:.2f} s "
          f"after the flood began; exit statuses {codes}; parameters bitwise those of the "
          f"undisturbed ps run: {same}")

rows = metrics("checkpoint", range(nodes))
if rows:
    def span(values, fmt):
        return fmt.format(min(values)) + ("" if min(values) == max(values)
                                          else "-" + fmt.format(max(values)))
    n = [max(1, r["checkpoints_written"]) for r in rows]
    print(f"checkpoints of the large MLP (ps, {nodes} nodes, one every 4 of 12 iterations): "
          f"{span([r['checkpoint_bytes'] / 1e6 for r in rows], '{:.1f}')} MB per node; the "
          f"iteration waits "
          f"{span([1e3 * r['checkpoint_seconds'] / k for r, k in zip(rows, n)], '{:.0f}')} ms "
          f"per checkpoint (the copy; the first touches the buffer), the background write takes "
          f"{span([1e3 * r['checkpoint_write_seconds'] / k for r, k in zip(rows, n)], '{:.0f}')} "
          f"ms (write, fsync, rename; {len(rows)} of {nodes} nodes, "
          f"{rows[0]['checkpoints_written']} checkpoints each)")
elif ran("checkpoint"):
    print("checkpoints of the large MLP: no metrics (see the checkpoint run's logs)")
