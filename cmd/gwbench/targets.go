package main

import (
	"fmt"
	"strings"
)

// find returns the first result of scenario whose case contains cas,
// whose metric starts with metric, run by launcher.
func find(rs []*Result, scenario, cas, metric, launcher string) *Result {
	for _, r := range rs {
		if r.Scenario == scenario && strings.Contains(r.Case, cas) && strings.HasPrefix(r.Metric, metric) && r.Launcher == launcher && r.N > 0 {
			return r
		}
	}
	return nil
}

func notMeasured(name, goal string) Target {
	return Target{Name: name, Goal: goal, Measured: "-", Status: "not measured"}
}

func status(hit bool) string {
	if hit {
		return "hit"
	}
	return "missed"
}

// targets evaluates the bench's performance targets against the results
// (fillRatios must have run).
func targets(rs []*Result, scaleCounts []int) []Target {
	var ts []Target
	// Launch, agents running, 16 hosts.
	{
		name, goal := "launch 16x8, agents running", "<= 0.1x the fastest peer and < 150 ms"
		if r := find(rs, "launch", "16 hosts", "", lGangway); r != nil && r.Ratio > 0 {
			t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s ms = %s %s", fmtNum(r.Median), fmtRatio(r.Ratio), r.RatioVs)}
			hit := r.Ratio <= 0.1 && r.Median < 150
			t.Status = status(hit)
			var by []string
			if r.Ratio > 0.1 {
				by = append(by, fmt.Sprintf("ratio %.2fx the limit", r.Ratio/0.1))
			}
			if r.Median >= 150 {
				by = append(by, fmt.Sprintf("%s ms over 150", fmtNum(r.Median-150)))
			}
			if hit {
				by = append(by, fmt.Sprintf("%.1fx faster than %s", 1/r.Ratio, r.RatioVs))
			}
			t.By = strings.Join(by, ", ")
			ts = append(ts, t)
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	// Cold.
	{
		name, goal := "launch 16x8, cold agents over sshd", "<= 0.5x the fastest peer"
		if r := find(rs, "launch", "16 hosts", "", lGangwayCold); r != nil && r.Ratio > 0 {
			t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s ms = %s %s", fmtNum(r.Median), fmtRatio(r.Ratio), r.RatioVs), Status: status(r.Ratio <= 0.5)}
			if r.Ratio > 0.5 {
				t.By = fmt.Sprintf("%.2fx the limit", r.Ratio/0.5)
			}
			ts = append(ts, t)
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	// Growth.
	{
		lo, hi := scaleCounts[0], scaleCounts[len(scaleCounts)-1]
		name, goal := fmt.Sprintf("growth %d -> %d hosts", lo, hi), "launch time grows <= 2x (256 -> 1024)"
		a := find(rs, "scale", fmt.Sprintf("%d agents", lo), "", lGangway)
		z := find(rs, "scale", fmt.Sprintf("%d agents", hi), "", lGangway)
		if a != nil && z != nil {
			g := z.Median / a.Median
			t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s -> %s ms = %.2fx", fmtNum(a.Median), fmtNum(z.Median), g), Status: status(g <= 2)}
			ca := find(rs, "scale", fmt.Sprintf("%d agents", lo), "launcher CPU", lGangway)
			cz := find(rs, "scale", fmt.Sprintf("%d agents", hi), "launcher CPU", lGangway)
			if ca != nil && cz != nil {
				t.Measured += fmt.Sprintf(" (launcher CPU %.2fx)", cz.Median/ca.Median)
			}
			if g > 2 {
				t.By = fmt.Sprintf("%.2fx the limit", g/2)
			}
			if lo != 256 || hi != 1024 {
				t.Status = "indicative (" + t.Status + ")"
			}
			ts = append(ts, t)
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	// Output.
	{
		name, goal := "output throughput", ">= 1.5x Hydra, >= 0.7x local pipes, 0 lines lost or mangled"
		r := find(rs, "output", "", "throughput", lGangway)
		h := find(rs, "output", "", "throughput", lHydra)
		if ht := find(rs, "output", "", "throughput", lHydraTag); ht != nil && (h == nil || ht.Median > h.Median) {
			h = ht
		}
		f := find(rs, "output", "", "throughput", lPipes)
		chk := find(rs, "output", "", "lines lost", lGangway)
		if r != nil && h != nil && f != nil {
			rh, rf := r.Median/h.Median, r.Median/f.Median
			bad := -1.0
			if chk != nil {
				bad = chk.Median
			}
			t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s MiB/s = %.2fx Hydra, %.2fx pipes, %s bad lines", fmtNum(r.Median), rh, rf, fmtNum(bad))}
			t.Status = status(rh >= 1.5 && rf >= 0.7 && bad == 0)
			var by []string
			if rh < 1.5 {
				by = append(by, fmt.Sprintf("%.0f%% short of 1.5x Hydra", (1-rh/1.5)*100))
			}
			if rf < 0.7 {
				by = append(by, fmt.Sprintf("%.0f%% short of 0.7x pipes", (1-rf/0.7)*100))
			}
			if bad != 0 {
				by = append(by, "lines lost or mangled, or not verified")
			}
			t.By = strings.Join(by, ", ")
			ts = append(ts, t)
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	// PMI barrier at 64 ranks.
	{
		name, goal := "PMI barrier, 64 ranks on 16 hosts", "< 2 ms"
		if r := find(rs, "pmi", "64 ranks", "empty PMI", lGangway); r != nil {
			t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s us", fmtNum(r.Median)), Status: status(r.Median < 2000)}
			if r.Ratio > 0 {
				t.Measured += fmt.Sprintf(" (%s %s)", fmtRatio(r.Ratio), r.RatioVs)
			}
			if r.Median >= 2000 {
				t.By = fmt.Sprintf("%.2fx the limit", r.Median/2000)
			}
			ts = append(ts, t)
		} else if r := find(rs, "pmi", "16 ranks", "empty PMI", lGangway); r != nil {
			ts = append(ts, Target{Name: "PMI barrier, 16 ranks (64 not run)", Goal: goal, Measured: fmt.Sprintf("%s us", fmtNum(r.Median)), Status: "indicative (" + status(r.Median < 2000) + ")"})
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	// MPI_Init+Finalize.
	for _, np := range []string{"16 ranks", "64 ranks"} {
		name, goal := "MPI_Init+MPI_Finalize, "+np, "no slower than under Hydra"
		if r := find(rs, "pmi", np, "MPI_Init", lGangway); r != nil && r.Ratio > 0 {
			t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s ms = %s %s", fmtNum(r.Median), fmtRatio(r.Ratio), r.RatioVs), Status: status(r.Ratio <= 1)}
			if r.Ratio > 1 {
				t.By = fmt.Sprintf("%.0f%% slower", (r.Ratio-1)*100)
			}
			ts = append(ts, t)
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	// Slurm: gangway over srun must cost no more than srun launching the
	// ranks itself.
	for _, c := range []struct{ name, cas, metric string }{
		{"Slurm launch 3 nodes x 8, in one allocation", "/bin/true", ""},
		{"Slurm PMI barrier, 24 ranks on 3 nodes", "MPICH", "empty PMI"},
	} {
		goal := "no slower than " + lSrun
		if r := find(rs, "slurm", c.cas, c.metric, lGangway); r != nil && r.Ratio > 0 {
			t := Target{Name: c.name, Goal: goal, Measured: fmt.Sprintf("%s %s = %s %s", fmtNum(r.Median), r.Unit, fmtRatio(r.Ratio), r.RatioVs), Status: status(r.Ratio <= 1)}
			if r.Ratio > 1 {
				t.By = fmt.Sprintf("%.0f%% slower", (r.Ratio-1)*100)
			}
			ts = append(ts, t)
		} else {
			ts = append(ts, notMeasured(c.name, goal))
		}
	}
	// Memory.
	{
		name, goal := "agent RSS, 8 running ranks", "< 30 MiB"
		if r := find(rs, "memory", "8 running", "VmRSS", "agent"); r != nil {
			t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s MiB", fmtNum(r.Max)), Status: status(r.Max < 30)}
			if r.Max >= 30 {
				t.By = fmt.Sprintf("%s MiB over", fmtNum(r.Max-30))
			}
			ts = append(ts, t)
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	{
		hi := scaleCounts[len(scaleCounts)-1]
		name, goal := fmt.Sprintf("launcher RSS, %d hosts", hi), "< 100 MiB at 1024 hosts"
		if r := find(rs, "scale", fmt.Sprintf("%d agents", hi), "launcher peak RSS", lGangway); r != nil {
			t := Target{Name: name, Goal: goal, Measured: fmt.Sprintf("%s MiB (max of runs)", fmtNum(r.Max)), Status: status(r.Max < 100)}
			if r.Max >= 100 {
				t.By = fmt.Sprintf("%s MiB over", fmtNum(r.Max-100))
			}
			if hi != 1024 {
				t.Status = "indicative (" + t.Status + ")"
			}
			ts = append(ts, t)
		} else {
			ts = append(ts, notMeasured(name, goal))
		}
	}
	return ts
}
