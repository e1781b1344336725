#!/usr/bin/env bash
# Syscalls, context switches and CPU per message of the broker AND of the amqp-load client, one
# scenario, one broker (issue 13; docs/performance.md "Dead-letter path, part 1"). Fresh broker and
# data dir; amqp-load runs DUR seconds; `perf stat` counts the broker's and the client's syscalls
# and context switches for 4 s starting 3 s into the run, and /proc/PID/stat gives user/system
# ticks over the same 4 s. Needs linux-perf (Debian `linux-perf`).
#
# Usage: scripts/bench-syscalls.sh charon|lavinmq [path/to/charon]   (default target/release/charon)
# Env:
#   SCENARIO     amqp-load scenario (default d); DUR seconds (default 10)
#   PORT         broker port (default 43101; HTTP port PORT+50)
#   LAVINMQ_BIN  LavinMQ binary (default /opt/lavinmq-1.0.0/bin/lavinmq; built outside the repository)
#   AMQP_LOAD_DIR as in bench-matrix.sh
#   BROKER_CPU / CLIENT_CPU  pin the broker / the client to these CPUs (taskset -c), e.g. 1 and 0
#   SWITCHES=1   also record 1 s of sched_switch system-wide and print what replaced the client
#                when it was switched out (needs perf with tracepoint access)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KIND=${1:?usage: bench-syscalls.sh charon|lavinmq [path/to/charon]}
CHARON=${2:-$ROOT/target/release/charon}
LOAD_DIR=${AMQP_LOAD_DIR:-$ROOT/../shared/tools/amqp-load}
if [ -z "${AMQP_LOAD_DIR:-}" ] && [ ! -d "$LOAD_DIR" ]; then
    LOAD_DIR=$(cd "$(git -C "$ROOT" rev-parse --git-common-dir)/../.." && pwd)/shared/tools/amqp-load
fi
LOAD=$LOAD_DIR/target/release/amqp-load
[ -x "$LOAD" ] || { echo "no amqp-load at $LOAD" >&2; exit 1; }
LAVINMQ_BIN=${LAVINMQ_BIN:-/opt/lavinmq-1.0.0/bin/lavinmq}
SCENARIO=${SCENARIO:-d}; DUR=${DUR:-10}; PORT=${PORT:-43101}
BPRE=(); CPRE=()
[ -n "${BROKER_CPU:-}" ] && BPRE=(taskset -c "$BROKER_CPU")
[ -n "${CLIENT_CPU:-}" ] && CPRE=(taskset -c "$CLIENT_CPU")
WORK=$(mktemp -d /tmp/bench-syscalls.XXXXXX)
BP=
cleanup() { [ -n "$BP" ] && kill "$BP" 2>/dev/null && wait "$BP" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM

case $KIND in
    charon)
        "${BPRE[@]}" "$CHARON" server --amqp-listen 127.0.0.1:$PORT --http-listen 127.0.0.1:$((PORT + 50)) \
            --data-dir "$WORK/data" >"$WORK/broker.log" 2>&1 &
        BP=$! ;;
    lavinmq)
        printf '[main]\ntcp_nodelay = true\n' >"$WORK/lavinmq.ini"
        "${BPRE[@]}" "$LAVINMQ_BIN" -c "$WORK/lavinmq.ini" -D "$WORK/data" -b 127.0.0.1 -p $PORT \
            --http-port $((PORT + 50)) -l warn >"$WORK/broker.log" 2>&1 &
        BP=$! ;;
    *) echo "broker: charon or lavinmq" >&2; exit 2 ;;
esac
for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done

"${CPRE[@]}" "$LOAD" --url "amqp://guest:guest@127.0.0.1:$PORT/%2f" --scenario "$SCENARIO" --duration "$DUR" \
    --broker-pid "$BP" --label "$KIND" >"$WORK/run.json" 2>"$WORK/run.err" &
LP=$!
sleep 3
EV=syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg
EV=$EV,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_recvmsg,syscalls:sys_enter_epoll_wait
EV=$EV,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_futex,syscalls:sys_enter_fdatasync,context-switches
ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
B0=$(ticks "$BP"); C0=$(ticks "$LP")
perf stat -e "$EV" -p "$BP" -o "$WORK/broker.perf" -- sleep 4 &
SP=$!
perf stat -e "$EV" -p "$LP" -o "$WORK/client.perf" -- sleep 4
wait "$SP"
B1=$(ticks "$BP"); C1=$(ticks "$LP")
if [ -n "${SWITCHES:-}" ] && kill -0 "$LP" 2>/dev/null; then
    perf record -q -e sched:sched_switch -a -o "$WORK/sw.data" -- sleep 1 >/dev/null 2>&1
    echo "what replaced the client when it was switched out (1 s, system-wide):"
    perf script -i "$WORK/sw.data" 2>/dev/null | grep "prev_pid=$LP " |
        sed 's/.*prev_state=\(\S*\) ==> next_comm=\(\S*\).*/  state \1 -> \2/' | sort | uniq -c | sort -rn | head -5
fi
wait "$LP"
python3 - "$WORK" "$B0" "$B1" "$C0" "$C1" <<'EOF'
import json, re, sys
work, b0, b1, c0, c1 = sys.argv[1:]
d = json.load(open(work + "/run.json"))
n = d["published"]
print(f"{d['label']} {d['scenario']}: pub {d['pub_rate']:.0f}/s con {d['con_rate']:.0f}/s published {n} "
      f"lost {d['lost']} dup {d['duplicated']}; per published message: broker {d['broker_cpu_s'] / n * 1e6:.2f} µs, "
      f"client {d['client_cpu_s'] / n * 1e6:.2f} µs (client {d['client_cpu_cores']:.2f} cores, "
      f"broker {d['broker_cpu_cores']:.2f})")
window = d["pub_rate"] * 4  # messages published in the 4 s window (approximately)
for who, t0, t1 in (("broker", b0, b1), ("client", c0, c1)):
    u0, s0 = map(int, t0.split()); u1, s1 = map(int, t1.split())
    print(f"  {who} in the window: user {(u1 - u0) * 1e4 / window:.2f} µs/msg, system {(s1 - s0) * 1e4 / window:.2f} µs/msg (100 ticks/s)")
    counts = []
    for line in open(f"{work}/{who}.perf"):
        m = re.match(r"\s*([\d,]+)\s+(\S+)", line)
        if m and (m.group(2).startswith("syscalls") or m.group(2) == "context-switches"):
            c = int(m.group(1).replace(",", ""))
            if c:
                counts.append(f"{m.group(2).replace('syscalls:sys_enter_', '')} {c / window:.3f}")
    print(f"  {who} per message: " + "; ".join(counts))
EOF
