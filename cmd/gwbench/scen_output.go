package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

const mib = 1 << 20

// output is scenario 2: 16 ranks on 4 hosts each write outBytes of
// 100-byte lines; throughput with the launcher's stdout on /dev/null
// (gangway tagged with -l and untagged, Hydra with -prepend-rank and
// without), then one run of each launcher through the verifier (every
// line whole, from its rank, in order, none missing).
func (b *bench) output(ctx context.Context) error {
	e := b.net
	const ranks, hosts = 16, 4
	lines := b.o.outBytes / lineLen
	totalMiB := float64(int64(ranks)*lines*lineLen) / mib
	gen := []string{b.bins.self, "-gen", strconv.FormatInt(b.o.outBytes, 10)}
	j := jobSpec{Hosts: hosts, PerHost: ranks / hosts, Argv: gen, Tag: true}
	thr := func(o outcome) (float64, error) { return totalMiB / o.Took.Seconds(), nil }
	const timeout = 3 * time.Minute
	raw := j
	raw.Tag = false
	// Tagged (-l) is the pair the target compares with Hydra
	// -prepend-rank; untagged is the launcher's default into a pipe
	// (--tags auto), beside Hydra's default.
	cs := []contender{
		{name: lGangway, kind: Ours, argv: e.gangway(j), value: thr, timeout: timeout, note: "-l: tags [R] "},
		{name: lGangwayRaw, kind: Ours, argv: e.gangway(raw), value: thr, timeout: timeout, note: "default: no tags into a pipe"},
	}
	untagged := map[string]bool{lGangwayRaw: true}
	if !b.o.quick {
		// Diagnostic: the same without the throughput summary, whose
		// recogniser sees every line.
		cs = append(cs, contender{name: lGangway + " --no-summary", kind: Ours, argv: withFlag(e.gangway(j), "--no-summary"), value: thr, timeout: timeout})
	}
	if b.peer(hydraBin) {
		h, err := e.hydra(raw)
		if err != nil {
			return err
		}
		ht, err := e.hydra(j)
		if err != nil {
			return err
		}
		untagged[lHydra] = true
		cs = append(cs, contender{name: lHydra, kind: Peer, argv: h, value: thr, timeout: timeout, note: "untagged (default)"},
			contender{name: lHydraTag, kind: Peer, argv: ht, value: thr, timeout: timeout, note: "tags [R] "})
	}
	if b.peer(mpirunBin) {
		m, err := e.mpirun(j, true)
		if err != nil {
			return err
		}
		cs = append(cs, contender{name: lMpirun, kind: Peer, argv: m, value: thr, timeout: timeout, note: "--tag-output"})
	}
	floor := fmt.Sprintf("for r in $(seq 0 %d); do %s -gen %d $r | cat > /dev/null & done; wait", ranks-1, shellQuote(b.bins.self), b.o.outBytes)
	cs = append(cs, contender{name: lPipes, kind: Floor, argv: []string{"/bin/sh", "-c", floor}, value: thr, timeout: timeout, note: "16 generators, one host, no launcher"})
	name := fmt.Sprintf("16 ranks x %d MiB of 100-byte lines on %d hosts", b.o.outBytes/mib, hosts)
	b.progress("output: %s (%d launchers, %d+%d rounds)", name, len(cs), b.o.warmup, b.o.runs)
	b.interleave(ctx, caseSpec{scenario: "output", name: name, metric: "throughput, stdout to /dev/null", unit: "MiB/s", higher: true}, cs)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for _, c := range cs {
		if c.kind == Floor || strings.Contains(c.name, "--no-summary") {
			continue
		}
		v, o, err := verifiedRun(ctx, c, ranks, lines, untagged[c.name])
		r := b.add(&Result{Scenario: "output", Case: name, Metric: "lines lost or mangled (one run through the verifier)", Unit: "lines", Launcher: c.name, Kind: Info})
		if err != nil {
			r.Failures++
			r.Note = trim(err.Error(), 200)
			continue
		}
		r.Values = []float64{float64(v.Lost() + v.Bad)}
		r.Note = fmt.Sprintf("%s; %.0f MiB/s into the verifier", v, totalMiB/o.Took.Seconds())
	}
	return nil
}

// verifiedRun runs c once with its stdout into a verifier.
func verifiedRun(ctx context.Context, c contender, ranks int, lines int64, untagged bool) (*verifier, outcome, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, outcome{}, err
	}
	v := newVerifier(ranks, lines)
	v.untagged = untagged
	done := make(chan error, 1)
	go func() {
		done <- v.run(pr)
		pr.Close()
	}()
	o := runTimed(ctx, cmdSpec{argv: c.argv, env: c.env, stdout: pw, timeout: c.timeout})
	pw.Close()
	if err := <-done; err != nil {
		return nil, o, err
	}
	return v, o, o.Err
}
