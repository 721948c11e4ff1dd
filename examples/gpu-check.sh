#!/bin/bash
# gpu-check: gangway against a real GPU machine (`make gpu-check`). Starts
# two agents on 127.0.0.2 and 127.0.0.3 with throwaway keys and checks:
#   1. host facts against nvidia-smi (count, UUIDs, bus IDs), and health;
#   2. one rank per GPU: distinct CUDA_VISIBLE_DEVICES, and with
#      --bind-to numa each rank's CPUs inside its GPU's NUMA CPUs;
#   3. an NCCL all_reduce across the two agents (NCCL_HOSTID per rank, so
#      one machine counts as two hosts), with the NCCL_SOCKET_IFNAME the
#      launcher chose in NCCL's own log;
#   4. throughput of a matmul loop under the launcher against the same
#      script run bare (printed; a check fails only below 0.5x);
#   5. the stacks of a hung CUDA rank (--hang-timeout).
#   6. --selftest across the two agents, when the launcher has it.
# Prints PASS/FAIL per check and exits 1 if any failed, 2 where there is
# no GPU to check. PYTHON names a python with torch (default python3).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
B=$PWD/bin
command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi here: nothing to check"; exit 2; }
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
	{ echo "gpu-check: $PY has no torch with CUDA (set PYTHON)"; exit 2; }
W=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null; done
	for p in $pids; do wait "$p" 2>/dev/null; done
	rm -rf "$W"
}
trap cleanup EXIT INT TERM
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

if command -v ssh-keygen >/dev/null; then
	ssh-keygen -q -t ed25519 -N '' -f "$W/id"
else
	# No OpenSSH client here: the agent writes an ed25519 key (and .pub)
	# in OpenSSH's format when its --host-key is missing; use one as ours.
	"$B/agent" --listen 127.0.0.4:22122 --host-key "$W/id" --authorized-keys "$W/none" 2>/dev/null &
	k=$!
	for _ in $(seq 50); do [ -s "$W/id.pub" ] && break; sleep 0.1; done
	kill $k; wait $k 2>/dev/null
fi
cp "$W/id.pub" "$W/ak"
for i in 2 3; do
	"$B/agent" --listen 127.0.0.$i:22122 --name gpu$i --host-key "$W/hk$i" --authorized-keys "$W/ak" 2>"$W/agent$i.log" &
	pids="$pids $!"
done
sleep 1
L=("$B/launcher" -i "$W/id" --known-hosts "$W/kh" --accept-new-host-keys -x "PATH=$PATH")
NG=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "gpu-check: $NG GPUs, $(nvidia-smi --query-gpu=name --format=csv,noheader | sort -u | paste -sd,), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"

# 1. Facts against nvidia-smi.
"${L[@]}" --inspect --json -H 127.0.0.2 >"$W/inspect.json" 2>"$W/inspect.err"
nvidia-smi --query-gpu=uuid,pci.bus_id --format=csv,noheader >"$W/smi.csv"
if "$PY" - "$W/inspect.json" "$W/smi.csv" <<'EOF'; then pass "facts: GPUs match nvidia-smi"; else fail "facts: GPUs differ from nvidia-smi"; fi
import json, sys
hosts = json.load(open(sys.argv[1]))
gpus = hosts[0]["facts"].get("gpus") or []
smi = [l.split(", ") for l in open(sys.argv[2]).read().splitlines() if l]
want = {(u.strip(), b.strip().lower()[4:]) for u, b in smi}
got = {(g["uuid"], g["bus_id"].lower()) for g in gpus}
print("  agent:", sorted(got)); print("  nvidia-smi:", sorted(want))
health = hosts[0]["facts"].get("health")
if health is not None:
    print("  health:", json.dumps(health)[:400])
sys.exit(0 if got == want else 1)
EOF
"${L[@]}" --inspect -H 127.0.0.2 2>&1 | sed 's/^/  /' | head -30

# 2. One rank per GPU, bound to its GPU's NUMA node.
"${L[@]}" -np "$NG" -H "127.0.0.2:$NG" --bind-to numa sh -c 'echo "cvd=$CUDA_VISIBLE_DEVICES cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)"' >"$W/ranks.txt" 2>&1
cat "$W/ranks.txt" | sed 's/^/  /'
n=$(grep -o 'cvd=[0-9,]*' "$W/ranks.txt" | sort -u | wc -l)
[ "$n" = "$NG" ] && pass "one rank per GPU: $n distinct CUDA_VISIBLE_DEVICES" || fail "one rank per GPU: $n distinct CUDA_VISIBLE_DEVICES for $NG GPUs"
if "$PY" - "$W/ranks.txt" <<'EOF'; then pass "NUMA binding: each rank's CPUs are its GPU's"; else fail "NUMA binding: a rank's CPUs are not its GPU's"; fi
import re, subprocess, sys
def cpus(s):
    out = set()
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-"); out |= set(range(int(a), int(b) + 1))
        elif part.strip():
            out.add(int(part))
    return out
topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
topo = re.sub(r"\x1b\[[0-9;]*m", "", topo)
aff = {}
for line in topo.splitlines():
    m = re.match(r"^GPU(\d+)\s", line)
    if m:
        f = line.split("\t")
        cols = [c.strip() for c in f]
        cpu = next((c for c in cols[1:] if re.fullmatch(r"[0-9,\-]+", c) and ("-" in c or "," in c)), None)
        if cpu:
            aff[int(m.group(1))] = cpus(cpu)
ok = True
for line in open(sys.argv[1]):
    m = re.search(r"cvd=(\d+)\S* cpus=(\S+)", line)
    if m and int(m.group(1)) in aff and not cpus(m.group(2)) <= aff[int(m.group(1))]:
        print("  GPU", m.group(1), "CPUs", aff[int(m.group(1))], "rank CPUs", m.group(2)); ok = False
sys.exit(0 if ok else 1)
EOF

# 3. NCCL all_reduce across two agents on one machine.
cat >"$W/allreduce.py" <<'EOF'
import os, time
os.environ["NCCL_HOSTID"] = "h" + os.environ["RANK"]
import torch, torch.distributed as dist
dist.init_process_group("nccl")
t = torch.ones(1 << 20, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(t); torch.cuda.synchronize()
t0 = time.time()
for _ in range(20): dist.all_reduce(t)
torch.cuda.synchronize()
print("allreduce", float(t[0]), "IFNAME", os.environ.get("NCCL_SOCKET_IFNAME"), "ms/iter %.2f" % ((time.time() - t0) * 50), flush=True)
dist.destroy_process_group()
EOF
timeout 180 "${L[@]}" -l -np 2 -H 127.0.0.2:1,127.0.0.3:1 -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET "$PY" "$W/allreduce.py" >"$W/nccl.txt" 2>&1
rc=$?
grep -E "allreduce|NET/Socket : Using" "$W/nccl.txt" | sed 's/^/  /'
ifname=$(sed -n 's/.*allreduce [0-9.]* IFNAME \([^ ]*\) .*/\1/p' "$W/nccl.txt" | head -1 | tr -d '=^')
used=$(grep -o 'NET/Socket : Using \[0\][^:]*' "$W/nccl.txt" | head -1 | sed 's/.*\[0\]//')
if [ "$rc" = 0 ] && grep -q "allreduce 3145728.0" "$W/nccl.txt" && [ -n "$ifname" ] && [ "$ifname" = "$used" ]; then
	pass "NCCL all_reduce across two agents; NCCL used $used, the launcher's NCCL_SOCKET_IFNAME"
else
	fail "NCCL all_reduce (exit $rc; launcher chose '$ifname', NCCL used '$used'); see the log above"
fi

# 4. Throughput under the launcher against bare.
cat >"$W/matmul.py" <<'EOF'
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(5): a @ a
torch.cuda.synchronize()
n, t0 = 0, time.time()
for step in range(1, 61):
    a @ a; n += 1
    if step % 20 == 0:
        torch.cuda.synchronize()
        print(f"{step}\timages/sec: {n / (time.time() - t0):.1f} +/- 0.0 (jitter = 0.0)\t0.0", flush=True)
torch.cuda.synchronize()
print(f"total images/sec: {n / (time.time() - t0):.2f}", flush=True)
EOF
bare=$("$PY" "$W/matmul.py" | sed -n 's/^total images\/sec: //p')
under=$("${L[@]}" -np 1 -H 127.0.0.2:1 "$PY" "$W/matmul.py" 2>&1 | sed -n 's/^total images\/sec: //p' | head -1)
ratio=$("$PY" -c "print('%.3f' % (float('${under:-0}') / float('${bare:-1}')))" 2>/dev/null || echo 0)
echo "  bare $bare matmuls/s, under the launcher $under matmuls/s: ${ratio}x"
"$PY" -c "import sys; sys.exit(0 if float('$ratio') >= 0.5 else 1)" && pass "throughput under the launcher ${ratio}x bare" || fail "throughput under the launcher ${ratio}x bare"

# 5. Stacks of a hung CUDA rank.
cat >"$W/hang.py" <<'EOF'
import torch
x = torch.ones(1 << 24, device="cuda")
print("spinning on the GPU", flush=True)
while True:
    x = x * 1.0
    torch.cuda.synchronize()
EOF
# The timeout counts from the rank's last line, and torch's import and
# CUDA's start print nothing: 30 s, so the stacks are taken in the loop
# (lines 5-6 of hang.py) and not in a slow start (5 s caught _lazy_init
# on an H100 machine).
timeout 150 "${L[@]}" -np 1 -H 127.0.0.2:1 --hang-timeout 30 -output-filename "$W/stacks" "$PY" "$W/hang.py" >"$W/hang.txt" 2>&1
rc=$?
sed 's/^/  /' "$W/hang.txt" | tail -8
if [ "$rc" = 124 ] && grep -q "spinning on the GPU" "$W/hang.txt" && grep -qsE 'hang.py", line [56] ' "$W"/stacks/rank.0/stacks.txt; then
	pass "stacks of a hung CUDA rank (exit 124, hang.py's loop in rank.0/stacks.txt)"
	head -30 "$W"/stacks/rank.0/stacks.txt | sed 's/^/  /'
else
	fail "stacks of a hung CUDA rank (exit $rc; $(ls "$W"/stacks/rank.0 2>&1 | head -3))"
fi

# 6. Fabric self-test, where the launcher has one.
if "$B/launcher" -h 2>&1 | grep -q -- '-selftest'; then
	timeout 120 "${L[@]}" --selftest -np 2 -H 127.0.0.2:1,127.0.0.3:1 true >"$W/selftest.txt" 2>&1
	rc=$?
	sed 's/^/  /' "$W/selftest.txt" | tail -12
	[ "$rc" = 0 ] && pass "--selftest across two agents" || fail "--selftest (exit $rc)"
fi

echo "gpu-check: $fails failed"
[ "$fails" = 0 ]
