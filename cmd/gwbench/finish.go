package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// finish computes ratios and targets, prints the table, the configuration
// and the targets, and writes the JSON and (full runs) BENCHMARKS.md.
func (b *bench) finish(start time.Time) int {
	fillRatios(b.results)
	b.results = ordered(b.results)
	b.config = append(b.config, ConfigLine{"load average at end", loadavg()})
	rep := &Report{
		Date: start, Version: b.version, Quick: b.o.quick, Took: time.Since(start).Round(time.Second).String(),
		Config: b.config, Results: b.results, Targets: targets(b.results, b.scaleCounts()),
		Skipped: b.skipped, Extra: b.extra,
	}
	w := b.stdout
	fmt.Fprintf(w, "\ngangway benchmarks (%s), %s, took %s\n\n", map[bool]string{true: "make bench-quick", false: "make bench"}[b.o.quick], start.Format("2006-01-02 15:04 MST"), rep.Took)
	writeTable(w, b.results)
	fmt.Fprintln(w, "\nConfiguration:")
	writeConfig(w, b.config)
	fmt.Fprintln(w, "\nTargets:")
	writeTargets(w, rep.Targets)
	if len(b.skipped) > 0 {
		fmt.Fprintln(w, "\nSkipped:")
		for _, s := range b.skipped {
			fmt.Fprintln(w, "  "+s)
		}
	}
	code := 0
	path, err := writeJSON(b.o.out, rep)
	if err != nil {
		fmt.Fprintln(b.stderr, "gwbench: write results:", err)
		code = 1
	} else {
		fmt.Fprintf(w, "\nwrote %s\n", path)
	}
	if b.o.md != "" {
		if err := writeMarkdown(b.o.md, rep, path); err != nil {
			fmt.Fprintln(b.stderr, "gwbench: write markdown:", err)
			code = 1
		} else {
			fmt.Fprintf(w, "wrote %s\n", b.o.md)
		}
	}
	return code
}

// ordered groups results by scenario and case, in order of first
// appearance, keeping the order within a case.
func ordered(rs []*Result) []*Result {
	first := map[string]int{}
	for i, r := range rs {
		k := r.Scenario + "\x00" + r.Case
		if _, ok := first[k]; !ok {
			first[k] = i
		}
	}
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b *Result) int {
		return first[a.Scenario+"\x00"+a.Case] - first[b.Scenario+"\x00"+b.Case]
	})
	return out
}

// Hand-written notes in BENCHMARKS.md between these markers survive the
// rewrite.
const (
	notesBegin = "<!-- notes:begin (kept by gwbench when it rewrites this file) -->"
	notesEnd   = "<!-- notes:end -->"
)

func writeMarkdown(path string, rep *Report, jsonPath string) error {
	notes := "\n## Where the time goes\n\n(no notes yet)\n\n"
	if old, err := os.ReadFile(path); err == nil {
		if i := bytes.Index(old, []byte(notesBegin)); i >= 0 {
			if j := bytes.Index(old[i:], []byte(notesEnd)); j >= 0 {
				notes = string(old[i+len(notesBegin) : i+j])
			}
		}
	}
	var s strings.Builder
	markdown(&s, rep, jsonPath, notes)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func markdown(w io.Writer, rep *Report, jsonPath, notes string) {
	fmt.Fprintf(w, "# Benchmarks\n\n")
	fmt.Fprintf(w, "Written by `make bench` (`cmd/gwbench`) on %s (%s, took %s); the raw numbers are in `%s`. "+
		"`make bench-quick` runs a reduced set and only writes `bench/results/*-quick.json`. "+
		"These are benchmarks, never pass/fail tests: absolute times drift with the machine's load, ratios within one run matter.\n\n",
		rep.Date.Format("2006-01-02 15:04 MST"), rep.Version, rep.Took, jsonPath)
	fmt.Fprintf(w, "## Targets\n\n| target | goal | measured | status |\n|---|---|---|---|\n")
	for _, t := range rep.Targets {
		st := t.Status
		if t.By != "" {
			st += " (" + t.By + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.Name, t.Goal, t.Measured, st)
	}
	fmt.Fprintf(w, "\n## Results\n\nMedian [min, max] of the measured rounds; ours/theirs is gangway's median over the peer's "+
		"(for gangway's own rows: over the best peer's). Lower is better for ms and us, higher for MiB/s.\n\n")
	fmt.Fprintf(w, "| scenario | launcher | median | min | max | unit | n | ours/theirs | note |\n|---|---|--:|--:|--:|---|--:|---|---|\n")
	last := ""
	for _, r := range rep.Results {
		label := r.label()
		if label == last {
			label = ""
		} else {
			last = label
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %d | %s | %s |\n", label, r.Launcher, cell(r, r.Median), cell(r, r.Min), cell(r, r.Max), r.Unit, r.N, ratioCell(r), strings.ReplaceAll(noteCell(r), "|", "\\|"))
	}
	fmt.Fprintf(w, "\n## Configuration\n\n")
	for _, c := range rep.Config {
		fmt.Fprintf(w, "- **%s**: %s\n", c.Key, c.Value)
	}
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(w, "\n## Skipped\n\n")
		for _, s := range rep.Skipped {
			fmt.Fprintf(w, "- %s\n", s)
		}
	}
	fmt.Fprintf(w, "\n%s%s%s\n", notesBegin, notes, notesEnd)
}
