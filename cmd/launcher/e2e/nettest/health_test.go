package nettest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
)

// The health checks before every attempt, on two network-namespace hosts
// with a DGX node's eight ranks each. The GPU checks cannot run here (no
// GPU, no nvidia-smi: they say "not checked"); the site's --health-check
// and the TMPDIR check do. Every rank would leave a file behind
// (rank.R.A, R its rank and A its attempt): a job stopped by its health
// checks leaves none, and no process of it is found in /proc.

// healthScript is a site check that fails on the host named bad
// (GANGWAY_HOST is the host's name in the job) once the file gate
// exists, printing why.
const healthScript = `if [ "$GANGWAY_HOST" = "$1" ] && [ -e "$2" ]; then echo "ERROR: /scratch on $GANGWAY_HOST is read-only"; echo "second line" >&2; exit 1; fi; echo "fine on $GANGWAY_HOST"`

// rankScript leaves the rank's file in $0 and, on attempt 0, makes rank 0
// fail after opening the gate $1 (for the restart case; "" opens none).
const rankScript = `touch "$0/rank.$RANK.$TORCHELASTIC_RESTART_COUNT"; if [ -n "$1" ] && [ "$RANK" = 0 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then touch "$1"; exit 3; fi`

func rankFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "rank.*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestHealthCheckStopsJob(t *testing.T) {
	_, launcherBin := binaries(t)
	b, hosts, ssh := faultBed(t, "gwy0", 70)
	bad := b.Hosts()[1].Addr
	check := func(gate string) string {
		return "sh -c '" + healthScript + "' check " + bad + " " + gate
	}

	t.Run("FailsOnOneHost", func(t *testing.T) {
		dir, tag := t.TempDir(), newTag(t)
		gate := filepath.Join(dir, "gate")
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		l := run(t, nil, launcherBin, append(ssh, "-H", hosts, "--health-check", check(gate), "-x", tagEnv+"="+tag,
			"sh", "-c", rankScript, dir, "")...)
		out := l.stderr.String()
		t.Logf("launcher exited %d after %v:\n%s", l.code, l.took.Round(time.Millisecond), out)
		for _, want := range []string{
			"launcher: 1 of 2 hosts failed health checks, so no rank was started (--no-health-check skips them):",
			"  " + bad + " (h1): site: ",
			"exited with status 1\n      ERROR: /scratch on " + bad + " is read-only\n      second line",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("stderr lacks %q: %v", want, l)
			}
		}
		if l.code != 1 {
			t.Errorf("exit code %d, want 1: %v", l.code, l)
		}
		if f := rankFiles(t, dir); len(f) != 0 {
			t.Errorf("ranks ran on unhealthy hosts: %v", f)
		}
		if p := taggedProcs(tag); len(p) != 0 {
			t.Errorf("processes of the job: %v", p)
		}

		// --inspect shows it too, and exits 1.
		in := run(t, nil, launcherBin, append(ssh, "-H", hosts, "--health-check", check(gate), "--inspect")...)
		t.Logf("--inspect:\n%s%s", in.stdout.String(), in.stderr.String())
		if in.code != 1 || !strings.Contains(in.stdout.String(), "FAIL site") || !strings.Contains(in.stdout.String(), "ok (6 not checked)") ||
			!strings.Contains(in.stdout.String(), "health site        fail ") ||
			!strings.Contains(in.stdout.String(), "health gpu-ecc     not_checked nvidia-smi is not installed") ||
			!strings.Contains(in.stderr.String(), "1 of 2 hosts failed health checks (a job would not start): "+bad+" (h1)") {
			t.Errorf("--inspect: %v", in)
		}

		// --no-health-check starts it anyway.
		l = run(t, nil, launcherBin, append(ssh, "-H", hosts, "--no-health-check", "--health-check", check(gate),
			"sh", "-c", rankScript, dir, "")...)
		if l.code != 0 || len(rankFiles(t, dir)) != 16 {
			t.Errorf("--no-health-check: %d rank files: %v", len(rankFiles(t, dir)), l)
		}
	})

	t.Run("AllHealthy", func(t *testing.T) {
		dir := t.TempDir()
		l := run(t, nil, launcherBin, append(ssh, "-H", hosts, "--health-check", check(filepath.Join(dir, "no-gate")),
			"sh", "-c", rankScript, dir, "")...)
		if l.code != 0 || len(rankFiles(t, dir)) != 16 {
			t.Errorf("healthy hosts: %d rank files: %v", len(rankFiles(t, dir)), l)
		}
	})

	// The checks run before every attempt: the gate opens when rank 0
	// fails in attempt 0, so the restart finds host 1 unhealthy and
	// starts no rank of attempt 1.
	t.Run("EveryAttempt", func(t *testing.T) {
		dir := t.TempDir()
		gate := filepath.Join(dir, "gate")
		l := run(t, nil, launcherBin, append(ssh, "-H", hosts, "--max-restarts", "1", "--restart-backoff", "0.1",
			"--health-check", check(gate), "sh", "-c", rankScript, dir, gate)...)
		out := l.stderr.String()
		if l.code != 1 || !strings.Contains(out, "restarting the whole gang") ||
			!strings.Contains(out, "1 of 2 hosts failed health checks") || !strings.Contains(out, bad+" is read-only") {
			t.Errorf("want the restart stopped by the health check: %v", l)
		}
		var second []string
		for _, f := range rankFiles(t, dir) {
			if strings.HasSuffix(f, ".1") {
				second = append(second, f)
			}
		}
		if len(second) != 0 || len(rankFiles(t, dir)) == 0 {
			t.Errorf("attempt 1 ran ranks (%v), or attempt 0 none: %v", second, rankFiles(t, dir))
		}
	})
}

// fakeSMI writes an nvidia-smi into a directory of its own that answers
// as a DGX A100 does (agent/facts' and agent/health's fixtures), with
// GPU 3 held by pid 4242, and returns the directory.
func fakeSMI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"list.csv":  "../../../../agent/facts/testdata/smi-query-dgx-a100.csv",
		"topo.txt":  "../../../../agent/facts/testdata/topo-dgx-a100.txt",
		"query.csv": "../../../../agent/health/testdata/dgx-a100/query-gpu.csv",
		"remap.csv": "../../../../agent/health/testdata/dgx-a100/remapped.csv",
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := `#!/bin/sh
d=$(dirname "$0")
case "$1" in
--query-gpu=index,uuid,pci.bus_id,name) cat "$d/list.csv" ;;
--query-gpu=*) cat "$d/query.csv" ;;
--query-compute-apps=*) echo "GPU-1a5e9c73-6b2f-0d48-c3a9-5e7b9d1f3a04, 4242, python3 train.py, 20480 MiB" ;;
--query-remapped-rows=*) cat "$d/remap.csv" ;;
topo) cat "$d/topo.txt" ;;
*) echo "fake nvidia-smi: $*" >&2; exit 2 ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestHealthGPUBusy: the GPU checks through real agents and the real
// exec of nvidia-smi (a stand-in answering with a DGX A100's fixtures on
// host 1, none on host 0): the job is refused naming host 1, its GPU 3
// and the outside pid; host 0's GPU checks say "not checked".
func TestHealthGPUBusy(t *testing.T) {
	_, launcherBin := binaries(t)
	b := newBed(t, testbed.Options{Prefix: "gwy1", Hosts: 2, Subnet: 71})
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	startAgents(t, b, keys, 0)
	startAgentsEnv(t, b, keys, nil, []string{"PATH=" + fakeSMI(t) + ":" + os.Getenv("PATH")}, 1)
	addrs := []string{b.Hosts()[0].Addr, b.Hosts()[1].Addr}
	kh, err := keys.WriteKnownHosts(addrs, agentPort)
	if err != nil {
		t.Fatal(err)
	}
	dir, tag := t.TempDir(), newTag(t)
	ssh := []string{"-i", keys.ClientKey, "--known-hosts", kh, "-H", addrs[0] + ":8," + addrs[1] + ":8"}
	l := run(t, nil, launcherBin, append(ssh, "-x", tagEnv+"="+tag, "sh", "-c", rankScript, dir, "")...)
	t.Logf("launcher exited %d after %v:\n%s", l.code, l.took.Round(time.Millisecond), l.stderr.String())
	want := "  " + addrs[1] + " (h1): gpu-busy: GPU 3 (GPU-1a5e9c73-6b2f-0d48-c3a9-5e7b9d1f3a04, 00000000:4E:00.0) held by pid 4242 python3 train.py (20480 MiB)"
	if l.code != 1 || !strings.Contains(l.stderr.String(), want) || strings.Contains(l.stderr.String(), addrs[0]+" (h0):") {
		t.Errorf("want exit 1 naming %q and not host 0: %v", want, l)
	}
	if f := rankFiles(t, dir); len(f) != 0 || len(taggedProcs(tag)) != 0 {
		t.Errorf("ranks ran: %v", f)
	}
	in := run(t, nil, launcherBin, append(ssh, "--inspect", "--json")...)
	var hosts []struct {
		Host   string
		Health []wire.Check
	}
	if err := json.Unmarshal([]byte(in.stdout.String()), &hosts); err != nil || len(hosts) != 2 {
		t.Fatalf("--inspect --json: %v: %v", err, in)
	}
	got := map[string]wire.CheckStatus{}
	for _, h := range hosts {
		for _, c := range h.Health {
			got[h.Host+" "+c.Name] = c.Status
		}
	}
	for k, v := range map[string]wire.CheckStatus{
		addrs[0] + " gpu-busy": wire.CheckNotChecked, addrs[0] + " gpu-count": wire.CheckNotChecked,
		addrs[1] + " gpu-busy": wire.CheckFail, addrs[1] + " gpu-ecc": wire.CheckOK, addrs[1] + " gpu-remap": wire.CheckOK,
		addrs[1] + " gpu-count": wire.CheckOK, addrs[1] + " gpu-driver": wire.CheckOK,
	} {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (%v)", k, got[k], v, in)
		}
	}
}

// TestHealthSpareTakesPlace: with three hosts for two hosts' ranks (8 on
// each, the third a spare), a host whose site check fails before the
// start is left out and the spare takes its place without any rank ever
// starting on the unhealthy host; the job runs its 16 ranks on host 0
// and the spare, and --report's attempt says who went, why and who came.
func TestHealthSpareTakesPlace(t *testing.T) {
	_, launcherBin := binaries(t)
	b := newBed(t, testbed.Options{Prefix: "gwy2", Hosts: 3, Subnet: 72})
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	startAgentsWith(t, b, keys, nil, 0, 1, 2)
	var addrs []string
	for _, h := range b.Hosts() {
		addrs = append(addrs, h.Addr)
	}
	kh, err := keys.WriteKnownHosts(addrs, agentPort)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "report.json")
	check := "sh -c '" + healthScript + "' check " + addrs[1] + " " + gate
	// Each rank names its file after its host's address (hostname -I
	// lists the namespace's own).
	rank := `touch "$0/rank.$RANK.$(hostname -I | cut -d' ' -f1)"`
	l := run(t, nil, launcherBin, "-i", keys.ClientKey, "--known-hosts", kh, "-np", "16", "-H", addrs[0]+":8,"+addrs[1]+":8,"+addrs[2]+":8",
		"--health-check", check, "--report", report, "sh", "-c", rank, dir)
	t.Logf("launcher: %v", l)
	if l.code != 0 {
		t.Fatalf("exit code %d, want 0 with the spare in the unhealthy host's place", l.code)
	}
	if want := "launcher: leaving out " + addrs[1] + " before the start (unhealthy: site: "; !strings.Contains(l.stderr.String(), want) ||
		!strings.Contains(l.stderr.String(), "spare "+addrs[2]+" takes its place") {
		t.Errorf("stderr does not say host 1 goes and the spare comes: %v", l)
	}
	on := map[string]int{}
	for _, f := range rankFiles(t, dir) {
		parts := strings.SplitN(filepath.Base(f), ".", 3)
		on[parts[2]]++
	}
	if on[addrs[0]] != 8 || on[addrs[2]] != 8 || on[addrs[1]] != 0 {
		t.Errorf("ranks per host %v, want 8 on %s and on the spare %s, none on %s", on, addrs[0], addrs[2], addrs[1])
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Attempts []struct {
			Hosts   []string `json:"hosts"`
			LeftOut []struct {
				Host, Why, Spare string
			} `json:"left_out"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Attempts) != 1 || strings.Join(rep.Attempts[0].Hosts, ",") != addrs[0]+","+addrs[2] ||
		len(rep.Attempts[0].LeftOut) != 1 || rep.Attempts[0].LeftOut[0].Host != addrs[1] || rep.Attempts[0].LeftOut[0].Spare != addrs[2] ||
		!strings.Contains(rep.Attempts[0].LeftOut[0].Why, "unhealthy: site") {
		t.Errorf("report's attempts: %s", raw)
	}
}
