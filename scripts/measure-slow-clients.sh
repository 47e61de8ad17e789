#!/usr/bin/env bash
# Resident memory of one `rollboot controller` process and the connections it keeps while many
# slow clients hold its FleetLock server (the attack of the bounded-serving issue), on loopback
# only, against the embedded simulated cluster.
#
#   scripts/measure-slow-clients.sh [BINARY] [MODE] [CLIENTS] [SECONDS]
#
# BINARY: default $CARGO_TARGET_DIR/release/rollboot (or target/release/rollboot), a binary with
# `rollboot simulate`. MODE:
#   body     each client sends a FleetLock POST head with Content-Length 2,097,000 (just under
#            axum's 2 MiB default) and trickles the body, all but its last byte over 80% of the
#            run, in 0.5 s steps;
#   headers  each client sends a request line and then one header line a second, never ending
#            its head;
#   small-body  as body, with Content-Length 8,000 (under the bounded servers' 8 KiB limit).
# CLIENTS default 500, SECONDS default 30. The simulator serves 5 nodes; the controller leads
# alone with `fleetlock: {listen: 127.0.0.1:PORT}`. The clients open every connection, then
# for SECONDS sample the controller's VmRSS and VmHWM (/proc/PID/status) every 0.5 s.
# Prints a sample every 5 s and a summary:
#   MODE: baseline VmRSS <kB>, peak VmRSS <kB> (<MiB> MiB), VmHWM <kB>; after <s> s: <n>/<N>
#   still open, <a> answered (<statuses>), <c> closed without an answer
# Measured (500 clients, 30 s; release builds; peak VmRSS, still open after 30 s):
#   before bounded serving (3581c5a): body 1074.8 MiB, 500; headers 32.6 MiB, 500;
#     small-body 42.1 MiB, 500
#   after: body 24.0 MiB, 0 (all 413); headers 25.6 MiB, 0 (128 closed at the 10 s header
#     timeout, 372 refused at the cap of 128); small-body 26.6 MiB, 0 (128 cut at the 20 s
#     request timeout, 372 refused)
set -euo pipefail

target_dir=${CARGO_TARGET_DIR:-target}
bin=${1:-$target_dir/release/rollboot}
mode=${2:-body}
clients=${3:-500}
seconds=${4:-30}
nodes=5
pods=2
case $mode in body | headers | small-body) ;; *) echo "MODE is body, headers or small-body, not $mode" >&2; exit 2 ;; esac

. "$(dirname "$0")/sim-serve.sh"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/config.yaml" <<EOF
lock: {namespace: default}
leader: {namespace: default}
fleetlock: {listen: "127.0.0.1:$port"}
EOF

KUBECONFIG=$kc "$bin" controller --config "$work/config.yaml" --identity measure \
    --metrics-addr 127.0.0.1:0 >"$work/ctl.log" 2>&1 &
ctl_pid=$!
child_pid=$ctl_pid
for _ in $(seq 1 300); do
    grep -q 'leading' "$work/ctl.log" && break
    kill -0 "$ctl_pid" 2>/dev/null || { tail -n 30 "$work/ctl.log"; echo "controller exited" >&2; exit 1; }
    sleep 0.2
done
grep -q 'leading' "$work/ctl.log" || { tail -n 30 "$work/ctl.log"; echo "controller never led" >&2; exit 1; }
sleep 3

python3 - "$ctl_pid" "$port" "$mode" "$clients" "$seconds" <<'EOF'
import errno, selectors, socket, sys, time

pid, port, mode, clients, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
# Just under axum's default body limit (2 MiB), or under the bounded servers' (8 KiB).
LENGTH = 8_000 if mode == "small-body" else 2_097_000
STEP = 0.5

def status(key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise SystemExit("controller gone")

class Client:
    def __init__(self):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.out = b""    # bytes due but not yet taken by the socket
        self.sent = 0     # body bytes handed over so far
        self.answer = b""
        self.closed = False
        head = b"POST /v1/pre-reboot HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        if mode != "headers":
            head += (b"fleet-lock-protocol: true\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n" % LENGTH)
        self.queue(head)

    def queue(self, data):
        self.out += data
        self.flush()

    def flush(self):
        if self.closed or not self.out:
            return
        try:
            n = self.sock.send(self.out)
            self.out = self.out[n:]
        except BlockingIOError:
            pass
        except OSError:
            self.close()

    def read(self):
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.answer += data
        else:
            self.close()

    def close(self):
        if not self.closed:
            self.closed = True
            self.sock.close()

base = status("VmRSS")
conns = []
for _ in range(clients):
    try:
        conns.append(Client())
    except OSError as e:
        print(f"connect failed: {e}", file=sys.stderr)
sel = selectors.DefaultSelector()
for c in conns:
    sel.register(c.sock, selectors.EVENT_READ, c)

start = time.monotonic()
peak = base
steps = max(1, int(seconds * 0.8 / STEP))
chunk = -(-(LENGTH - 1) // steps)
step = 0
last_print = -5
while (now := time.monotonic() - start) < seconds:
    # This step's trickle.
    if now >= step * STEP:
        step += 1
        for c in conns:
            if c.closed:
                continue
            if mode != "headers":
                n = min(chunk, LENGTH - 1 - c.sent)
                if n > 0:
                    c.sent += n
                    c.queue(b"x" * n)
                else:
                    c.flush()
            elif step % 2 == 0:
                c.queue(b"x-slow-%d: %s\r\n" % (step, b"y" * 64))
    for key, _ in sel.select(timeout=0.05):
        c = key.data
        c.read()
        if c.closed:
            sel.unregister(key.fileobj)
    rss = status("VmRSS")
    peak = max(peak, rss)
    if now - last_print >= 5:
        last_print = now
        open_now = sum(not c.closed for c in conns)
        print(f"t={now:4.1f}s VmRSS={rss}kB VmHWM={status('VmHWM')}kB open={open_now}/{len(conns)}", flush=True)

# Closed by the server but not yet seen: one last look.
for key, _ in sel.select(timeout=0.2):
    key.data.read()
still = sum(not c.closed for c in conns)
answers = {}
for c in conns:
    if c.answer:
        code = c.answer[9:12].decode(errors="replace")
        answers[code] = answers.get(code, 0) + 1
answered = sum(answers.values())
silent = sum(c.closed and not c.answer for c in conns)
hwm = status("VmHWM")
print(f"{mode}: baseline VmRSS {base} kB, peak VmRSS {peak} kB ({peak / 1024:.1f} MiB), "
      f"VmHWM {hwm} kB ({hwm / 1024:.1f} MiB); after {seconds:g} s: {still}/{len(conns)} still open, "
      f"{answered} answered ({', '.join(f'{k}: {v}' for k, v in sorted(answers.items())) or 'none'}), "
      f"{silent} closed without an answer")
EOF
