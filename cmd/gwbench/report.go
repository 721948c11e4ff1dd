package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Kind says whose numbers a Result holds.
type Kind string

const (
	Ours  Kind = "ours"  // gangway
	Peer  Kind = "peer"  // mpirun, Hydra, pdsh, ssh fan-out
	Floor Kind = "floor" // what no launcher can beat (local pipes)
	Info  Kind = "info"  // a measurement without a comparison (CPU time, memory, checks)
)

// Result is one launcher's sample in one case of a scenario.
type Result struct {
	Scenario string    `json:"scenario"` // launch, output, pmi, scale, memory
	Case     string    `json:"case"`     // "16 hosts x 8 /bin/true"
	Metric   string    `json:"metric"`   // "wall", "throughput", ...
	Unit     string    `json:"unit"`     // ms, MiB/s, us, MiB
	Higher   bool      `json:"higher_is_better"`
	Launcher string    `json:"launcher"`
	Kind     Kind      `json:"kind"`
	Values   []float64 `json:"values"`
	Summary
	// Ratio is ours/theirs: for a peer, gangway's median over the peer's;
	// for gangway, its median over the best peer's (RatioVs).
	Ratio    float64 `json:"ratio,omitempty"`
	RatioVs  string  `json:"ratio_vs,omitempty"`
	Failures int     `json:"failures,omitempty"` // runs that failed (left out of Values)
	Note     string  `json:"note,omitempty"`
}

func (r *Result) group() string { return r.Scenario + "\x00" + r.Case + "\x00" + r.Metric }

// label is the table's scenario column: "launch 16 hosts x 8 /bin/true".
func (r *Result) label() string {
	s := r.Scenario + ": " + r.Case
	if r.Metric != "" {
		s += ", " + r.Metric
	}
	return s
}

// fillRatios computes every Result's summary and ratio. The reference
// ("ours") of a group is the row named "gangway"; a group without one
// compares its first Ours row.
func fillRatios(rs []*Result) {
	groups := map[string][]*Result{}
	var order []string
	for _, r := range rs {
		r.Summary = Summarize(r.Values)
		g := r.group()
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], r)
	}
	for _, g := range order {
		var ref, best *Result
		for _, r := range groups[g] {
			if r.N == 0 {
				continue
			}
			switch r.Kind {
			case Ours:
				if ref == nil || r.Launcher == "gangway" {
					ref = r
				}
			case Peer:
				if best == nil || (r.Higher && r.Median > best.Median) || (!r.Higher && r.Median < best.Median) {
					best = r
				}
			}
		}
		for _, r := range groups[g] {
			r.Ratio, r.RatioVs = 0, ""
			switch {
			case r.N == 0:
			case r.Kind == Ours && best != nil:
				r.Ratio, r.RatioVs = Ratio(r.Median, best.Median), best.Launcher
			case (r.Kind == Peer || r.Kind == Floor) && ref != nil:
				r.Ratio, r.RatioVs = Ratio(ref.Median, r.Median), ref.Launcher
			}
		}
	}
}

// writeTable prints the results as an aligned text table.
func writeTable(w io.Writer, rs []*Result) {
	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "SCENARIO\tLAUNCHER\tMEDIAN\tMIN\tMAX\tUNIT\tN\tOURS/THEIRS\tNOTE")
	last := ""
	for _, r := range rs {
		label := r.label()
		if label == last {
			label = ""
		} else {
			last = label
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", label, r.Launcher, cell(r, r.Median), cell(r, r.Min), cell(r, r.Max), r.Unit, r.N, ratioCell(r), noteCell(r))
	}
	t.Flush()
}

func cell(r *Result, v float64) string {
	if r.N == 0 {
		return "-"
	}
	return fmtNum(v)
}

func ratioCell(r *Result) string {
	if r.Ratio == 0 {
		return "-"
	}
	if r.Kind == Ours {
		return fmtRatio(r.Ratio) + " vs " + r.RatioVs
	}
	return fmtRatio(r.Ratio)
}

func noteCell(r *Result) string {
	n := r.Note
	if r.Failures > 0 {
		n = strings.TrimSpace(fmt.Sprintf("%s; %d failed runs", n, r.Failures))
		n = strings.TrimPrefix(n, "; ")
	}
	return n
}

// Target is one of the bench's performance targets (targets.go) and how
// this run did.
type Target struct {
	Name     string `json:"name"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Status   string `json:"status"` // hit, missed, not measured
	By       string `json:"by,omitempty"`
}

// Report is what one gwbench run writes to bench/results/<timestamp>.json.
type Report struct {
	Date     time.Time         `json:"date"`
	Version  string            `json:"version"`
	Quick    bool              `json:"quick"`
	Took     string            `json:"took"`
	Config   []ConfigLine      `json:"config"`
	Results  []*Result         `json:"results"`
	Targets  []Target          `json:"targets"`
	Skipped  []string          `json:"skipped,omitempty"`
	Findings []string          `json:"findings,omitempty"`
	Extra    map[string]string `json:"extra,omitempty"`
}

// ConfigLine is one "key: value" line of the configuration printed beside
// the numbers.
type ConfigLine struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func writeConfig(w io.Writer, cfg []ConfigLine) {
	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range cfg {
		fmt.Fprintf(t, "  %s:\t%s\n", c.Key, c.Value)
	}
	t.Flush()
}

func writeTargets(w io.Writer, ts []Target) {
	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "TARGET\tGOAL\tMEASURED\tSTATUS")
	for _, x := range ts {
		st := x.Status
		if x.By != "" {
			st += " (" + x.By + ")"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", x.Name, x.Goal, x.Measured, st)
	}
	t.Flush()
}

// writeJSON writes the report to dir/<timestamp>.json (via a .tmp file)
// and returns the path.
func writeJSON(dir string, rep *Report) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := rep.Date.UTC().Format("20060102T150405Z")
	if rep.Quick {
		name += "-quick"
	}
	path := filepath.Join(dir, name+".json")
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode results: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}
