# Sourced by the measurement scripts: serves a simulated cluster in its own process and cleans
# up on exit. Before sourcing set `bin`, `nodes`, `pods` (and `sim_bin` when `bin` is built
# without the simulator, as the images are: a binary that has `rollboot simulate`); afterwards
# `work` (a temporary directory), `kc` (its kubeconfig) and `sim_pid` are set. A script that starts a process of
# its own stores its pid in `child_pid` so the cleanup stops it too.

work=$(mktemp -d)
sim_pid=
child_pid=
cleanup() {
    [ -n "$child_pid" ] && kill "$child_pid" 2>/dev/null || true
    [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

kc=$work/kubeconfig
"${sim_bin:-$bin}" simulate --serve --nodes "$nodes" --pods-per-node "$pods" --kubeconfig-out "$kc" \
    --listen 127.0.0.1:0 >"$work/sim.log" 2>&1 &
sim_pid=$!
for _ in $(seq 1 600); do
    grep -q '^serving' "$work/sim.log" 2>/dev/null && break
    sleep 0.2
done
grep -q '^serving' "$work/sim.log" || { cat "$work/sim.log"; echo "simulator did not start" >&2; exit 1; }
