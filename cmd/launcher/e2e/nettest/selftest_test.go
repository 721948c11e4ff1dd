package nettest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/bench"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
)

// debianPython is Debian's Python, where python3-torch lives
// (docs/testbed.md).
const debianPython = "/usr/bin/python3"

// TestSelftest: the fabric self-test on 4 namespace hosts, 8 ranks each.
// Unshaped, the job runs and no host is named. Then host 3's link is
// shaped to 20 Mbit/s toward it (tbf on the root end of its veth: the
// kernel has no netem), 2.5 MB/s: a hundredth of what the veths carry
// on an idle machine, and under a fifth of what the slowest unshaped
// pair measured on two loaded CPUs (10.3 MB/s, with other packages'
// tests beside it, where 100 Mbit/s was no longer an outlier):
// --selftest names host 3 and the job still runs; --selftest=strict
// names it and stops the job before any rank starts (exit 1), and the
// report file says so; examples/pytorch/fabric_selftest.py over torch's
// Gloo names it too. Names and statuses are asserted; bandwidths are
// logged.
func TestSelftest(t *testing.T) {
	_, launcherBin := binaries(t)
	b := newAgentBed(t, testbed.Options{Prefix: "gwz0", Hosts: 4, Subnet: 80})
	var hl []string
	for _, h := range b.hosts {
		hl = append(hl, h.Addr+":8")
	}
	conn := []string{"-i", b.keys.ClientKey, "--known-hosts", b.knownHosts, "-H", strings.Join(hl, ",")}
	job := []string{"sh", "-c", `echo "rank $RANK ran"`}
	tableOf := func(stderr string) string {
		var out []string
		for _, l := range strings.Split(stderr, "\n") {
			if strings.HasPrefix(l, "launcher: selftest:") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	ranRanks := func(stdout string) int {
		return len(regexp.MustCompile(`(?m)^rank \d+ ran$`).FindAllString(stdout, -1))
	}

	t.Run("Healthy", func(t *testing.T) {
		tag := newTag(t)
		l := run(t, nil, launcherBin, append(append(conn, "--selftest", "-x", tagEnv+"="+tag), job...)...)
		t.Logf("unshaped veths:\n%s", tableOf(l.stderr.String()))
		if l.code != 0 || ranRanks(l.stdout.String()) != 32 {
			t.Fatalf("want exit 0 and 32 ranks run: %v", l)
		}
		if !strings.Contains(l.stderr.String(), "launcher: selftest: no outlier") {
			t.Errorf("want no outlier named: %v", l)
		}
		waitNoTagged(t, tag, 10*time.Second)
	})

	slow := b.hosts[3]
	if out, err := exec.Command("tc", "qdisc", "add", "dev", slow.Veth, "root", "tbf", "rate", "20mbit", "burst", "32kbit", "latency", "400ms").CombinedOutput(); err != nil {
		t.Fatalf("tc qdisc add on %s: %v\n%s", slow.Veth, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tc", "qdisc", "del", "dev", slow.Veth, "root").Run() })
	slowLine := regexp.MustCompile(`(?m)^launcher: selftest: slow hosts, under 33% of the median: ` + regexp.QuoteMeta(slow.Addr) + ` \(h3\) \([0-9.]+ MB/s\)$`)

	t.Run("SlowReported", func(t *testing.T) {
		tag := newTag(t)
		l := run(t, nil, launcherBin, append(append(conn, "--selftest", "-x", tagEnv+"="+tag), job...)...)
		t.Logf("h3 shaped to 20mbit:\n%s", tableOf(l.stderr.String()))
		if l.code != 0 || ranRanks(l.stdout.String()) != 32 {
			t.Fatalf("want exit 0 and 32 ranks run: %v", l)
		}
		if !slowLine.MatchString(l.stderr.String()) {
			t.Errorf("want h3 (and only h3) named slow: %v", l)
		}
		waitNoTagged(t, tag, 10*time.Second)
	})

	// With a spare standing by, the slow host is left out before any rank
	// starts (report mode too) and the spare takes its place: h3 is the
	// second of three hosts, h2 the spare.
	t.Run("SlowLeftOutForSpare", func(t *testing.T) {
		tag := newTag(t)
		h := b.hosts
		list := h[0].Addr + ":8," + slow.Addr + ":8," + h[1].Addr + ":8," + h[2].Addr + ":8"
		args := []string{"-i", b.keys.ClientKey, "--known-hosts", b.knownHosts, "-H", list, "--spares", "1", "--selftest", "-x", tagEnv + "=" + tag,
			"sh", "-c", `echo "rank $RANK ran on $(hostname -I | cut -d' ' -f1)"`}
		l := run(t, nil, launcherBin, args...)
		t.Logf("h3 shaped, h2 the spare:\n%s", l.stderr.String())
		want := "launcher: leaving out " + slow.Addr + " before the start (slow in the fabric self-test); spare " + h[2].Addr + " takes its place"
		if l.code != 0 || !strings.Contains(l.stderr.String(), want) {
			t.Fatalf("want exit 0 and %q: %v", want, l)
		}
		on := map[string]int{}
		for _, m := range regexp.MustCompile(`(?m)^rank \d+ ran on (\S+)$`).FindAllStringSubmatch(l.stdout.String(), -1) {
			on[m[1]]++
		}
		if on[h[0].Addr] != 8 || on[h[1].Addr] != 8 || on[h[2].Addr] != 8 || on[slow.Addr] != 0 {
			t.Errorf("ranks per host %v, want 8 on h0, h1 and the spare h2, none on h3", on)
		}
		waitNoTagged(t, tag, 10*time.Second)
	})

	// The same plan and judgement through the job's own stack: torch's
	// Gloo, one rank per host (examples/pytorch/fabric_selftest.py).
	t.Run("TorchGloo", func(t *testing.T) {
		if out, err := exec.CommandContext(t.Context(), debianPython, "-c", "import torch.distributed as d; assert d.is_gloo_available()").CombinedOutput(); err != nil {
			t.Skipf("%s cannot import torch with Gloo (install Debian's python3-torch): %v: %s", debianPython, err, out)
		}
		script, err := filepath.Abs("../../../../examples/pytorch/fabric_selftest.py")
		if err != nil {
			t.Fatal(err)
		}
		var one []string
		for _, h := range b.hosts {
			one = append(one, h.Addr+":1")
		}
		tag := newTag(t)
		args := []string{"-i", b.keys.ClientKey, "--known-hosts", b.knownHosts, "-H", strings.Join(one, ","), "-x", tagEnv + "=" + tag,
			debianPython, script, "--strict", "--bytes", "16777216"}
		l := run(t, nil, launcherBin, args...)
		t.Logf("torch gloo, h3 shaped:\n%s", l.stdout.String())
		want := regexp.MustCompile(`(?m)^fabric selftest: slow hosts, under 33% of the median: ` + regexp.QuoteMeta(slow.Addr) + ` \([0-9.]+ MB/s\)$`)
		if l.code != 3 || !want.MatchString(l.stdout.String()) {
			t.Errorf("want exit 3 and h3 (alone) named slow: %v", l)
		}
		waitNoTagged(t, tag, 10*time.Second)
	})

	t.Run("Strict", func(t *testing.T) {
		tag := newTag(t)
		report := filepath.Join(t.TempDir(), "report.json")
		l := run(t, nil, launcherBin, append(append(conn, "--selftest=strict", "--report", report, "-x", tagEnv+"="+tag), job...)...)
		if l.code != 1 || ranRanks(l.stdout.String()) != 0 {
			t.Fatalf("want exit 1 and no rank run: %v", l)
		}
		want := "launcher: --selftest=strict: slow hosts " + slow.Addr + " (h3) (under a third of the median host's "
		if !slowLine.MatchString(l.stderr.String()) || !strings.Contains(l.stderr.String(), want) || !strings.Contains(l.stderr.String(), "or use --selftest to only report; nothing was started") {
			t.Errorf("want h3 named and the job not started (%q): %v", want, l)
		}
		if n := len(taggedProcs(tag)); n != 0 {
			t.Errorf("%d processes of the job exist", n)
		}
		data, err := os.ReadFile(report)
		if err != nil {
			t.Fatalf("report: %v", err)
		}
		var rep bench.Report
		if err := json.Unmarshal(data, &rep); err != nil || rep.Selftest == nil {
			t.Fatalf("report without selftest (%v): %s", err, data)
		}
		if st := rep.Selftest; !st.Stopped || !reflect.DeepEqual(st.Outliers, []string{slow.Addr + " (h3)"}) || len(st.Pairs) != 6 || len(st.Hosts) != 4 {
			t.Errorf("report's selftest: %+v", st)
		}
	})
}
