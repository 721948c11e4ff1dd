package main

import (
	"fmt"
	"strings"
	"testing"
)

// res builds one synthetic Result.
// The unit follows from the scenario and metric, as in the bench.
func res(scenario, cas, metric, launcher string, k Kind, higher bool, v ...float64) *Result {
	unit := "ms"
	switch {
	case strings.HasPrefix(metric, "empty PMI"):
		unit = "us"
	case strings.HasPrefix(metric, "throughput"):
		unit = "MiB/s"
	case strings.HasPrefix(metric, "lines lost"):
		unit = "lines"
	case strings.Contains(metric, "RSS"):
		unit = "MiB"
	}
	return &Result{Scenario: scenario, Case: cas, Metric: metric, Unit: unit, Launcher: launcher, Kind: k, Higher: higher, Values: v}
}

const (
	tPMI16  = "MPICH, 16 ranks on 16 hosts"
	tPMI64  = "MPICH, 64 ranks on 16 hosts"
	tLaunch = "16 hosts x 8 /bin/true"
	tOut    = "16 ranks x 8 MiB of 100-byte lines on 4 hosts"
	tBar    = "empty PMI-1 barrier (mean of 200 after MPI_Init, rank 0)"
	tInit   = "MPI_Init+MPI_Finalize (max over ranks)"
	tThr    = "throughput, stdout to /dev/null"
	tLost   = "lines lost or mangled (one run through the verifier)"
)

func pmiRows(cas string, barGw, barHy, initGw, initHy float64) []*Result {
	return []*Result{
		res("pmi", cas, tBar, lGangway, Ours, false, barGw),
		res("pmi", cas, tBar, lHydra, Peer, false, barHy),
		res("pmi", cas, tInit, lGangway, Ours, false, initGw),
		res("pmi", cas, tInit, lHydra, Peer, false, initHy),
	}
}

// launchRows puts the CPU rows first, so a target that took any gangway
// row of the case instead of its wall row would read the CPU.
func launchRows(warm, cold, agentsCPU float64, peers map[string]float64) []*Result {
	rs := []*Result{
		res("launch", tLaunch, "CPU of gangway's launcher (user+sys)", lGangway, Info, false, 30),
		res("launch", tLaunch, "CPU of the agents themselves (sum)", lGangway, Info, false, agentsCPU),
		res("launch", tLaunch, "", lGangway, Ours, false, warm),
		res("launch", tLaunch, "", lGangwayCold, Ours, false, cold),
	}
	for name, v := range peers {
		rs = append(rs, res("launch", tLaunch, "", name, Peer, false, v))
	}
	return rs
}

func scaleRows(n int, cpu, rss float64) []*Result {
	cas := scaleCase(n, 0)
	return []*Result{
		res("scale", cas, "", lGangway, Ours, false, 3*cpu),
		res("scale", cas, "launcher CPU (user+sys)", lGangway, Info, false, cpu),
		res("scale", cas, "launcher peak RSS (VmHWM)", lGangway, Info, false, rss),
	}
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

// outRows: throughputs of gangway -l, gangway untagged, Hydra, Hydra
// -prepend-rank and the pipes; bad lines of the two gangway runs (a
// negative count leaves the verifier row out).
func outRows(tag, raw, hy, hyTag, pipes, badTag, badRaw float64) []*Result {
	rs := []*Result{
		res("output", tOut, tThr, lGangway, Ours, true, tag),
		res("output", tOut, tThr, lGangwayRaw, Ours, true, raw),
		res("output", tOut, tThr, lHydra, Peer, true, hy),
		res("output", tOut, tThr, lHydraTag, Peer, true, hyTag),
		res("output", tOut, tThr, lPipes, Floor, true, pipes),
	}
	if badTag >= 0 {
		rs = append(rs, res("output", tOut, tLost, lGangway, Info, false, badTag))
	}
	if badRaw >= 0 {
		rs = append(rs, res("output", tOut, tLost, lGangwayRaw, Info, false, badRaw))
	}
	return rs
}

// failRows: gangway and the peers in the failstop case with per ranks per
// host; a peer's negative value is a peer that never stopped the job (a
// row without values).
func failRows(per int, gw float64, peers map[string]float64) []*Result {
	rs := []*Result{res("failstop", failCase(16, per), failMetric, lGangway, Ours, false, gw)}
	for name, v := range peers {
		r := res("failstop", failCase(16, per), failMetric, name, Peer, false)
		if v >= 0 {
			r.Values = []float64{v}
		}
		rs = append(rs, r)
	}
	return rs
}

type wantTarget struct {
	status, by string   // exact
	measured   []string // substrings of Measured
}

func TestTargets(t *testing.T) {
	cat := func(parts ...[]*Result) []*Result {
		var rs []*Result
		for _, p := range parts {
			rs = append(rs, p...)
		}
		return rs
	}
	for _, tc := range []struct {
		name   string
		rs     []*Result
		counts []int
		want   map[string]wantTarget // by target name
	}{{
		name: "full run, mostly missed",
		rs: cat(
			pmiRows(tPMI16, 600, 1000, 90, 100),
			pmiRows(tPMI64, 1000, 1000, 110, 100),
			launchRows(100, 500, 160, map[string]float64{lHydra: 400, lFanout: 250}),
			scaleRows(256, 460, 50),
			scaleRows(1024, 1836, 150),
			outRows(300, 500, 600, 150, 1000, 0, 0),
			failRows(1, 40, map[string]float64{lHydra: -1, lMpirun: 2000}),
			failRows(8, 120, map[string]float64{lHydra: 100, lMpirun: 2000}),
		),
		counts: []int{256, 1024},
		want: map[string]wantTarget{
			"PMI barrier, 16 ranks on 16 hosts":            {"hit", "", []string{"600.0 us = 0.600x mpiexec.hydra"}},
			"PMI barrier, 64 ranks on 16 hosts":            {"missed", "1.25x the limit", []string{"1.000x mpiexec.hydra"}},
			"MPI_Init+MPI_Finalize, 16 ranks":              {"hit", "", []string{"0.900x"}},
			"MPI_Init+MPI_Finalize, 64 ranks":              {"missed", "1.10x the limit", []string{"110.0 ms = 1.100x mpiexec.hydra"}},
			"cold launch 16x8 over sshd (--transport ssh)": {"missed", "2.22x the limit", []string{"500.0 ms = 2.000x " + lFanout}},
			"warm launch 16x8 (agents running)":            {"missed", "1.33x the limit", []string{"100.0 ms = 0.400x " + lFanout}},
			"agents' CPU per warm launch 16x8":             {"missed", "2.00x the limit", []string{"160.0 ms / 16 hosts = 10.00 ms per host"}},
			"scale: launcher CPU per host at 1024 hosts":   {"missed", "3.59x the limit", []string{"1836 ms / 1024 = 1.793 ms per host", "marginal 256->1024: 1.792 ms"}},
			"scale: launcher peak RSS per host at 1024 hosts": {"missed", "2.08x the limit",
				[]string{"150.0 MiB at 1024, 50.00 MiB at 256: 133.3 KiB per host marginal (RSS/N 150.0 KiB)"}},
			"output throughput, tagged (-l)": {"missed", "25% short of 0.4x pipes",
				[]string{"300.0 MiB/s = 0.30x pipes, 2.00x " + lHydraTag + ", 0 bad lines", "untagged 500.0 MiB/s = 0.50x pipes, 0.83x " + lHydra + ", 0 bad lines"}},
			"Slurm launch 3 nodes x 8, in one allocation": {"not measured", "", nil},
			"agent RSS, 8 running ranks":                  {"not measured", "", nil},
			"rank failure to all stopped, 16 hosts x 1":   {"hit", "", []string{"40.00 ms = 0.020x " + lMpirun}},
			"rank failure to all stopped, 16 hosts x 8":   {"missed", "1.20x the limit", []string{"120.0 ms = 1.200x " + lHydra}},
		},
	}, {
		name: "quick run, hits",
		rs: cat(
			pmiRows(tPMI16, 500, 1000, 100, 100),
			launchRows(50, 300, 64, map[string]float64{lHydra: 400}),
			scaleRows(64, 20, 20),
			scaleRows(256, 80, 30),
			outRows(500, 600, 600, 150, 1000, 0, 0),
		),
		counts: []int{64, 256},
		want: map[string]wantTarget{
			"PMI barrier, 16 ranks on 16 hosts":              {"hit", "", nil},
			"PMI barrier, 64 ranks on 16 hosts":              {"not measured", "", nil},
			"MPI_Init+MPI_Finalize, 16 ranks":                {"hit", "", []string{"1.000x mpiexec.hydra"}},
			"MPI_Init+MPI_Finalize, 64 ranks":                {"not measured", "", nil},
			"cold launch 16x8 over sshd (--transport ssh)":   {"hit", "", []string{"0.750x mpiexec.hydra"}},
			"warm launch 16x8 (agents running)":              {"hit", "", []string{"0.125x mpiexec.hydra"}},
			"agents' CPU per warm launch 16x8":               {"hit", "", []string{"4.000 ms per host"}},
			"scale: launcher CPU per host at 256 hosts":      {"indicative (hit)", "", []string{"80.00 ms / 256 = 0.312 ms per host"}},
			"scale: launcher peak RSS per host at 256 hosts": {"indicative (hit)", "", []string{"53.33 KiB per host marginal"}},
			"output throughput, tagged (-l)":                 {"hit", "", []string{"0.50x pipes, 3.33x " + lHydraTag}},
		},
	}, {
		name: "lines lost, untagged not verified, one scale count",
		rs: cat(
			scaleRows(256, 256, 64),
			outRows(500, 600, 600, 150, 1000, 7, -1),
			failRows(1, 30, map[string]float64{lHydra: -1}),
			failRows(8, 2000, map[string]float64{lHydra: -1, lMpirun: 2000}),
		),
		counts: []int{64, 256},
		want: map[string]wantTarget{
			"scale: launcher CPU per host at 256 hosts":      {"indicative (missed)", "2.00x the limit", []string{"1.000 ms per host"}},
			"scale: launcher peak RSS per host at 256 hosts": {"indicative (missed)", "4.00x the limit", []string{"64.00 MiB at 256: 256.0 KiB per host (RSS/N: one count only"}},
			"output throughput, tagged (-l)": {"missed", "7 tagged lines lost or mangled, untagged output not verified",
				[]string{"7 bad lines", "unverified bad lines"}},
			"warm launch 16x8 (agents running)":         {"not measured", "", nil},
			"rank failure to all stopped, 16 hosts x 1": {"not measured", "", []string{"30.00 ms; no peer stopped the job"}},
			"rank failure to all stopped, 16 hosts x 8": {"hit", "", []string{"1.000x " + lMpirun}},
		},
	}, {
		name:   "nothing measured",
		counts: []int{256, 1024},
		want: map[string]wantTarget{
			"PMI barrier, 16 ranks on 16 hosts":            {"not measured", "", nil},
			"cold launch 16x8 over sshd (--transport ssh)": {"not measured", "", nil},
			"scale: launcher CPU per host":                 {"not measured", "", nil},
			"scale: launcher peak RSS per host":            {"not measured", "", nil},
			"output throughput, tagged (-l)":               {"not measured", "", nil},
			"rank failure to all stopped, 16 hosts x 1":    {"not measured", "", nil},
			"rank failure to all stopped, 16 hosts x 8":    {"not measured", "", nil},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			fillRatios(tc.rs)
			ts := targets(tc.rs, tc.counts)
			got := map[string]Target{}
			for _, x := range ts {
				if _, dup := got[x.Name]; dup {
					t.Errorf("target %q twice", x.Name)
				}
				got[x.Name] = x
				if x.Status == "missed" || strings.HasSuffix(x.Status, "(missed)") {
					if x.By == "" {
						t.Errorf("%q missed without saying by how much", x.Name)
					}
				}
			}
			for name, w := range tc.want {
				x, ok := got[name]
				if !ok {
					t.Errorf("no target %q; have %v", name, ts)
					continue
				}
				if x.Status != w.status || x.By != w.by {
					t.Errorf("%q: status %q by %q, want %q by %q (measured %q)", name, x.Status, x.By, w.status, w.by, x.Measured)
				}
				for _, m := range w.measured {
					if !strings.Contains(x.Measured, m) {
						t.Errorf("%q: measured %q lacks %q", name, x.Measured, m)
					}
				}
			}
		})
	}
}

// TestRecoverTarget: hit under 2 s on the 16x8 row, missed over it, not
// measured without the row (the 16x1 row does not count).
func TestRecoverTarget(t *testing.T) {
	row := func(per int, v float64) *Result {
		r := res("recover", fmt.Sprintf("16 hosts x %d, rank 1 exits 3, the gang restarts once", per), recoverMetric, lGangway, Ours, false, v)
		r.Summary = Summarize(r.Values)
		return r
	}
	for _, tc := range []struct {
		name string
		rs   []*Result
		want string
	}{
		{"hit", []*Result{row(1, 100), row(8, 529)}, "hit"},
		{"missed", []*Result{row(8, 2500)}, "missed"},
		{"only 16x1", []*Result{row(1, 100)}, "not measured"},
	} {
		if got := recoverTarget(tc.rs); got.Status != tc.want {
			t.Errorf("%s: %+v, want status %s", tc.name, got, tc.want)
		}
	}
}

// TestLostTarget: the lost-host row decides its own target.
func TestLostTarget(t *testing.T) {
	r := res("recover", "16 hosts x 8 + 1 spare, host 1's agent killed", lostMetric, lGangway, Ours, false, 600)
	r.Summary = Summarize(r.Values)
	if got := lostTarget([]*Result{r}); got.Status != "hit" {
		t.Errorf("%+v, want hit", got)
	}
	if got := lostTarget(nil); got.Status != "not measured" {
		t.Errorf("%+v, want not measured", got)
	}
}

func TestTreeTargets(t *testing.T) {
	counts := []int{256, 1024, 10000}
	tree := func(n int, cpu, rss float64, failures int) []*Result {
		cas := scaleCase(n, scaleWidth)
		st := res("scale", cas, "all ranks started (latest rank start - launcher fork)", lGangway, Ours, false, 1500)
		st.Failures = failures
		return []*Result{st,
			res("scale", cas, "launcher CPU (user+sys)", lGangway, Info, false, cpu),
			res("scale", cas, "launcher peak RSS (VmHWM)", lGangway, Info, false, rss)}
	}
	rs := append(tree(1024, 300, 30, 0), tree(10000, 2000, 32, 0)...)
	fillRatios(rs)
	got := map[string]Target{}
	for _, x := range treeTargets(rs, counts) {
		got[x.Name] = x
	}
	for name, want := range map[string]string{
		"tree: 10000 hosts complete correctly":         "hit",
		"tree: launcher CPU, 1024 -> 10000 hosts":      "missed",
		"tree: launcher peak RSS, 1024 -> 10000 hosts": "hit",
	} {
		if got[name].Status != want {
			t.Errorf("%s: %+v, want %s", name, got[name], want)
		}
	}
	rs = append(tree(1024, 300, 30, 0), tree(10000, 2000, 32, 1)...)
	fillRatios(rs)
	if x := treeTargets(rs, counts)[0]; x.Status != "missed" || !strings.Contains(x.Measured, "1 of 2 runs failed") {
		t.Errorf("a failed run: %+v, want missed", x)
	}
	if x := treeTargets(nil, counts); x[0].Status != "not measured" || x[1].Status != "not measured" {
		t.Errorf("no rows: %+v", x)
	}
}
