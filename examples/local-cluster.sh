#!/bin/sh
# make run: two agents on loopback addresses with throwaway keys, an
# 8-rank job across them through SSH, the throughput summary, and the
# agents stopped again. No GPU, no configuration, no hosts needed.
set -eu
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
ssh-keygen -q -t ed25519 -N '' -C gangway-make-run -f "$dir/id_ed25519"
cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
for ip in 127.0.0.2 127.0.0.3; do
	bin/agent --listen "$ip:22122" --name "$ip" --host-key "$dir/host_key_$ip" \
		--authorized-keys "$dir/authorized_keys" 2>"$dir/agent-$ip.log" &
	pids="$pids $!"
done
echo "agents: 127.0.0.2:22122 127.0.0.3:22122 (logs in $dir until exit)"
# -l: tag every line with its rank even when this script's output goes to
# a pipe or a file (the launcher tags only a terminal by default).
echo "+ bin/launcher -l -np 8 -H 127.0.0.2:4,127.0.0.3:4 ... bin/synthetic -slow-ranks 5 -slowdown 0.2"
bin/launcher -l -np 8 -H 127.0.0.2:4,127.0.0.3:4 \
	-i "$dir/id_ed25519" --known-hosts "$dir/known_hosts" --accept-new-host-keys \
	bin/synthetic -steps 60 -display-every 10 -slow-ranks 5 -slowdown 0.2
