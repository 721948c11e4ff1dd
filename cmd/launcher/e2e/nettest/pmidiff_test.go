package nettest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// The differential PMI test: the probe (pmiprobe_test.go) runs as 2 ranks
// under MPICH's mpiexec.hydra and under the launcher, and every answer
// either server gave is compared field by field. Hydra runs its ranks on
// this machine: once as one host, and once as two (its fork launcher
// with two host names: two proxies, PMI_process_mapping (vector,(0,2,1)),
// as on two machines). The launcher runs them once locally and once on
// two network-namespace hosts, each a real agent. Values that must differ
// between two runs (the job's kvsname, PMI-2 jobid) are normalised; any
// other difference fails the test unless intendedDiffs lists it, and a
// listed difference that no longer shows fails it too.

// intendedDiff is a known difference in one step's answer: the two
// answers after normalisation, exactly, and why they differ.
type intendedDiff struct {
	pmi, step    string
	hydra, ours  string
	why          string
	onlyWithSize bool // shows only in the -usize runs
}

var intendedDiffs = []intendedDiff{
	{pmi: "1", step: "spawn",
		hydra: "cmd=spawn_result rc=0",
		ours:  "cmd=spawn_result rc=-1 msg=spawn_not_supported",
		why: "gangway does not implement PMI spawn (MPI_Comm_spawn): new ranks mid-job would need the launcher " +
			"to place and start a second gang on the agents while the first runs, with its own failure, " +
			"timeout and restart rules; the refusal is immediate and the job goes on"},
	{pmi: "2", step: "spawn",
		hydra: "cmd=spawn-response;rc=0;jobid=<kvs of process group 1>;nerrs=0;",
		ours:  "cmd=spawn-response;rc=1;errmsg=spawn_not_supported;",
		why:   "as for PMI-1: no PMI spawn"},
	{pmi: "2", step: "info-getjobattr universeSize", onlyWithSize: true,
		hydra: "cmd=info-getjobattr-response;found=FALSE;rc=0;",
		ours:  "cmd=info-getjobattr-response;found=TRUE;value=5;rc=0;",
		why: "Hydra 4.0.2's PMI-2 server does not know the universeSize attribute, even with -usize; " +
			"gangway answers the -usize value, as both servers do over PMI-1"},
}

// probeStep is one exchange of a probe transcript.
type probeStep struct{ step, reply string }

// runProbe runs cmd as 2 ranks of the probe speaking PMI proto and
// returns each rank's transcript, normalised. The probe's variables
// (KEY=VALUE) are in cmd's environment, which local ranks inherit; args
// builds cmd's arguments from them, for launchers whose ranks start
// elsewhere (-x).
func runProbe(t *testing.T, proto, cmd string, args func(vars []string) []string) map[int][]probeStep {
	t.Helper()
	out := t.TempDir()
	tag := newTag(t)
	vars := []string{helperEnv + "=pmiprobe", probeProtoEnv + "=" + proto, probeOutEnv + "=" + out, tagEnv + "=" + tag}
	l := run(t, vars, cmd, args(vars)...)
	if l.code != 0 {
		t.Fatalf("%v", l)
	}
	waitNoTagged(t, tag, 10*time.Second)
	got := map[int][]probeStep{}
	for r := range 2 {
		b, err := os.ReadFile(filepath.Join(out, "rank."+strconv.Itoa(r)))
		if err != nil {
			t.Fatalf("rank %d wrote no transcript: %v\n%v", r, err, l)
		}
		got[r] = normalise(t, proto, string(b))
	}
	return got
}

// Hydra's kvs names: kvs_<pid>_<process group>_<random>_<host>.
var hydraKVS = regexp.MustCompile(`kvs_\d+_(\d+)_\d+_[A-Za-z0-9.-]+`)

// normalise parses a transcript and replaces what must differ between
// runs: the job's own kvsname (PMI-1) or jobid (PMI-2) becomes <job>,
// Hydra's other kvs names (a spawned group's) name their process group,
// and PMI_process_mapping becomes the node of every rank it places.
func normalise(t *testing.T, proto, transcript string) []probeStep {
	t.Helper()
	var steps []probeStep
	job := ""
	for line := range strings.Lines(transcript) {
		step, reply, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		if !ok {
			t.Fatalf("bad transcript line %q", line)
		}
		switch {
		case proto == "1" && step == "get_my_kvsname":
			job = pmiFields(proto, reply)["kvsname"]
		case proto == "2" && step == "job-getid":
			job = pmiFields(proto, reply)["jobid"]
		}
		if job != "" {
			reply = regexp.MustCompile(`=`+regexp.QuoteMeta(job)+`( |;|$)`).ReplaceAllString(reply, "=<job>$1")
		}
		reply = hydraKVS.ReplaceAllString(reply, "<kvs of process group $1>")
		if m := pmiFields(proto, reply)["value"]; strings.HasPrefix(m, "(vector,") {
			reply = strings.Replace(reply, "value="+m, "value="+mappingNodes(t, m, 2), 1)
		}
		steps = append(steps, probeStep{step, reply})
	}
	return steps
}

// mappingNodes expands a PMI_process_mapping for size ranks into the node
// of each rank ("nodes:0,0"): Hydra and gangway may spell one placement
// differently ((vector,(0,1,1)) and (vector,(0,1,2)) both put two ranks
// on node 0), and MPICH reads only the placement.
func mappingNodes(t *testing.T, m string, size int) string {
	t.Helper()
	blocks := regexp.MustCompile(`\((\d+),(\d+),(\d+)\)`).FindAllStringSubmatch(m, -1)
	if len(blocks) == 0 {
		t.Fatalf("bad mapping %q", m)
	}
	var nodes []string
	for len(nodes) < size {
		for _, b := range blocks {
			start, count, per := atoi(b[1]), atoi(b[2]), atoi(b[3])
			for n := start; n < start+count; n++ {
				for range per {
					nodes = append(nodes, strconv.Itoa(n))
				}
			}
		}
	}
	return "nodes:" + strings.Join(nodes[:size], ",")
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// pmiFields parses one reply into its fields: PMI-1 "key=value" tokens
// (value= runs to the end of the line), PMI-2 "key=value;" pairs.
func pmiFields(proto, reply string) map[string]string {
	f := map[string]string{}
	if proto == "2" && !strings.HasPrefix(reply, "cmd=response_to_init ") {
		for _, kv := range strings.Split(strings.TrimSuffix(reply, ";"), ";") {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		return f
	}
	for rest := reply; rest != ""; {
		if v, ok := strings.CutPrefix(rest, "value="); ok {
			f["value"] = v
			break
		}
		tok, tail, _ := strings.Cut(rest, " ")
		k, v, _ := strings.Cut(tok, "=")
		f[k] = v
		rest = tail
	}
	return f
}

// compareProbes compares every rank's answers under Hydra and under the
// launcher, field by field, and returns the intended differences seen.
func compareProbes(t *testing.T, proto string, hydra, ours map[int][]probeStep) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for r := range 2 {
		h, o := hydra[r], ours[r]
		stepsOf := func(ss []probeStep) []string {
			var names []string
			for _, s := range ss {
				names = append(names, s.step)
			}
			return names
		}
		if hs, ourSteps := stepsOf(h), stepsOf(o); !slices.Equal(hs, ourSteps) {
			t.Errorf("PMI-%s rank %d: steps differ\nhydra: %q\nours:  %q", proto, r, hs, ourSteps)
			continue
		}
		for i := range h {
			hf, of := pmiFields(proto, h[i].reply), pmiFields(proto, o[i].reply)
			if fmt.Sprint(hf) == fmt.Sprint(of) {
				continue
			}
			k := slices.IndexFunc(intendedDiffs, func(d intendedDiff) bool {
				return d.pmi == proto && d.step == h[i].step &&
					fmt.Sprint(pmiFields(proto, d.hydra)) == fmt.Sprint(hf) && fmt.Sprint(pmiFields(proto, d.ours)) == fmt.Sprint(of)
			})
			if k < 0 {
				t.Errorf("PMI-%s rank %d %q: answers differ\nhydra: %s\nours:  %s", proto, r, h[i].step, h[i].reply, o[i].reply)
				continue
			}
			seen[proto+" "+h[i].step] = true
		}
	}
	return seen
}

// checkListed fails for every intended difference of proto that did not
// show: the list must stay true.
func checkListed(t *testing.T, proto string, withSize bool, seen map[string]bool) {
	t.Helper()
	for _, d := range intendedDiffs {
		if d.pmi == proto && (!d.onlyWithSize || withSize) && !seen[proto+" "+d.step] {
			t.Errorf("PMI-%s %q: the listed difference did not show (hydra %q, ours %q); update intendedDiffs", proto, d.step, d.hydra, d.ours)
		}
	}
}

func logProbe(t *testing.T, name string, ranks map[int][]probeStep) {
	var b strings.Builder
	for r := range 2 {
		for _, s := range ranks[r] {
			fmt.Fprintf(&b, "[%d] %-36s %s\n", r, s.step, s.reply)
		}
	}
	t.Logf("%s:\n%s", name, b.String())
}

// TestPMIDifferential: the probe's answers from mpiexec.hydra and from
// the launcher, PMI-1 and PMI-2, on one host and on two.
func TestPMIDifferential(t *testing.T) {
	hydra, err := exec.LookPath("mpiexec.hydra")
	if err != nil {
		t.Skip("mpiexec.hydra not found (Debian's mpich)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, launcherBin := binaries(t)

	t.Run("OneHost", func(t *testing.T) {
		for _, proto := range []string{"1", "2"} {
			for _, usize := range [][]string{nil, {"-usize", "5"}} {
				t.Run(strings.Join(append([]string{"PMI-" + proto}, usize...), " "), func(t *testing.T) {
					h := runProbe(t, proto, hydra, func([]string) []string { return append(usize, "-n", "2", self) })
					o := runProbe(t, proto, launcherBin, func([]string) []string { return append(usize, "-np", "2", self) })
					logProbe(t, "hydra", h)
					logProbe(t, "launcher", o)
					checkListed(t, proto, usize != nil, compareProbes(t, proto, h, o))
				})
			}
		}
	})

	t.Run("TwoHosts", func(t *testing.T) {
		roottest.RequireRoot(t)
		b := newAgentBed(t, testbed.Options{Prefix: "gwm0", Hosts: 2, Subnet: 200})
		hosts, agents, keys, kh := b.hosts, b.agents, b.keys, b.knownHosts
		for _, proto := range []string{"1", "2"} {
			t.Run("PMI-"+proto, func(t *testing.T) {
				// Hydra's fork launcher starts one proxy per host name:
				// two "hosts" with a rank each, as on two machines.
				h := runProbe(t, proto, hydra, func([]string) []string {
					return []string{"-launcher", "fork", "-hosts", "gwm-a,gwm-b", "-n", "2", self}
				})
				// Ranks on the agents start from the agents' environment:
				// the probe's variables travel with -x.
				o := runProbe(t, proto, launcherBin, func(vars []string) []string {
					args := []string{"-i", keys.ClientKey, "--known-hosts", kh, "-H", hosts[0].Addr + ":1," + hosts[1].Addr + ":1", "-np", "2"}
					for _, v := range vars {
						args = append(args, "-x", v)
					}
					return append(args, self)
				})
				for i, h := range hosts {
					waitNetnsOnly(t, h.NS, 10*time.Second, agents[i].Pid)
				}
				logProbe(t, "hydra (two proxies)", h)
				logProbe(t, "launcher (two agents)", o)
				checkListed(t, proto, false, compareProbes(t, proto, h, o))
			})
		}
	})
}
