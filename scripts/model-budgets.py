#!/usr/bin/env python3
"""An offline model of issue 26's rollouts where budgets bind: how close to the lower bound the
budget-aware pick could come on a given layout, with given latencies, and with no coordination
cost at all. It reads the pods of a simulated cluster (their node and their Deployment, whose
budget allows one disruption) and plays the pick the controller makes: slots of `maxNodes`;
when one frees, the first waiting node in flag order whose budgets all have room now, else the
held node whose drain would end first; a node passed over for `passOverFor` is taken anyway.
A node's drain evicts each pod as soon as its budget has room, and ends a grace period after
the last eviction; a budget is held from an eviction until the replacement is Ready; each
replacement lands on the least loaded node not in flight (ties by name), as the simulated
scheduler places it, adding its budget to that node. With `--fresh S`, the pick sees a waiting
node's pods as read at most S seconds before (as the controller's reads are kept); without it,
as they are.

    # serve the scenario, export its pods, model them:
    rollboot simulate --serve --scenario bench/budgets-200.yaml --flagged 0 --listen 127.0.0.1:18556 &
    curl -s -H 'Authorization: Bearer operator' http://127.0.0.1:18556/api/v1/pods >pods.json
    scripts/model-budgets.py pods.json [--slots 20] [--grace 0.30] [--hold 0.30] [--reboot 0.35] [--fresh 2]

The bound it prints is the report's nodes' term: nodes x (grace + reboot at their nominal 0.30
and 0.35 s) / slots. Measured latencies (a drain of 0.32 s, a reboot part of 0.36 s, a hold of
0.33 s on the 2-core machine) give the ratio a run measures; the nominal ones give what the pick
could reach with no latency.
"""
import argparse
import bisect
import json

NOMINAL_CYCLE = 0.30 + 0.35


def model(pods, slots, grace, hold, reboot, fresh, pass_over_for, scan):
    nodes = sorted({p["spec"]["nodeName"] for p in pods})
    budgets = {n: [] for n in nodes}
    for p in pods:
        app = p["metadata"].get("labels", {}).get("app")
        if app:
            budgets[p["spec"]["nodeName"]].append(p["metadata"]["namespace"] + "/" + app)
    held_windows = {}  # budget -> sorted (start, end) of its disruptions

    def room_from(b, t):
        """The first instant from t at which b has room for a whole hold."""
        s = t
        for a, e in held_windows.get(b, []):
            if e <= s:
                continue
            if a >= s + hold - 1e-9:
                break
            s = e
        return s

    def evictions(n, t):
        """When each of n's pods would be evicted, from t (a budget's pods one at a time)."""
        out = []
        for b in budgets[n]:
            s = room_from(b, t)
            for bb, ss in out:
                if bb == b and ss + hold > s:
                    s = room_from(b, ss + hold)
            out.append((b, s))
        return out

    def has_room(bs, t):
        return len(set(bs)) == len(bs) and all(room_from(b, t) == t for b in bs)

    waiting, state, back_at = list(nodes), {n: "waiting" for n in nodes}, {}
    known, first_passed = {}, {}
    free_at = [0.0] * slots
    t = end = 0.0
    taken_held = 0
    while waiting:
        free_at.sort()
        t = max(t, free_at[0])
        for n, at in list(back_at.items()):
            if at <= t:
                state[n] = "back"
                del back_at[n]
        window = waiting[:scan]
        if fresh is not None:
            for n in window:
                if n not in known or t - known[n][0] > fresh:
                    known[n] = (t, list(budgets[n]))
        seen = (lambda n: known[n][1]) if fresh is not None else (lambda n: budgets[n])
        forced = [n for n in window if n in first_passed and t >= first_passed[n] + pass_over_for]
        chosen = forced[0] if forced else next((n for n in window if has_room(seen(n), t)), None)
        if chosen is None:
            taken_held += 1
            chosen = min(window, key=lambda n: max([s for _, s in evictions(n, t)] or [t]))
        for n in window[: window.index(chosen)]:
            first_passed.setdefault(n, t)
        waiting.remove(chosen)
        state[chosen] = "flight"
        evs = evictions(chosen, t)
        for b, s in evs:
            bisect.insort(held_windows.setdefault(b, []), (s, s + hold))
            target = min((n for n in nodes if state[n] != "flight"), key=lambda n: (len(budgets[n]), n))
            budgets[target].append(b)
        budgets[chosen] = []
        done = max([s for _, s in evs] or [t]) + grace + reboot
        back_at[chosen] = done
        free_at[0] = done
        end = max(end, done)
    return end, len(nodes) * NOMINAL_CYCLE / slots, taken_held


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pods", help="a PodList as JSON (GET /api/v1/pods)")
    ap.add_argument("--slots", type=int, default=20, help="maxNodes")
    ap.add_argument("--grace", type=float, default=0.30, help="real seconds from the last eviction to the drain's end")
    ap.add_argument("--hold", type=float, default=0.30, help="real seconds a budget is held per eviction")
    ap.add_argument("--reboot", type=float, default=0.35, help="real seconds from the drain's end to the node back")
    ap.add_argument("--fresh", type=float, default=None, help="seconds a read of a node's pods is kept")
    ap.add_argument("--pass-over-for", type=float, default=6.0, help="real seconds (10m at the time factor 0.01)")
    ap.add_argument("--scan", type=int, default=68, help="waiting nodes looked at (4 x free slots + 64)")
    a = ap.parse_args()
    pods = json.load(open(a.pods))["items"]
    end, bound, held = model(pods, a.slots, a.grace, a.hold, a.reboot, a.fresh, a.pass_over_for, a.scan)
    print(f"makespan {end:.2f} s, bound {bound:.2f} s, ratio {end / bound:.3f}, nodes taken held {held}")


if __name__ == "__main__":
    main()
