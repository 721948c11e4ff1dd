package bench

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// seedLines adds every line of the captured logs to the corpus.
func seedLines(f *testing.F, add func(line []byte)) {
	paths, err := filepath.Glob("testdata/*.log")
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seed logs: %v", err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			add(bytes.Clone(sc.Bytes()))
		}
	}
}

func FuzzRecognize(f *testing.F) {
	seedLines(f, func(line []byte) { f.Add(line) })
	for _, s := range []string{"total images/sec: 1e308", "total images/sec: 1e309", "Iter #99999999999999999999: 1 img/sec per GPU",
		"DLL 2021-13-45 99:99:99 - (0, 1) total_ips : 5", "DLL 2021-03-24 17:24:33 - ( total_ips : 5", "   1 1 a b -1 1 1 1e400 0 1 1 1 0"} {
		f.Add([]byte(s))
	}
	custom, err := ParseMetric(`c=(?P<step>\d+)?x(?P<value>\S+)`, ScopeRank)
	if err != nil {
		f.Fatal(err)
	}
	recs := append(Builtin(), custom)
	f.Fuzz(func(t *testing.T, line []byte) {
		orig := bytes.Clone(line)
		for _, r := range recs {
			s, ok := r.Recognize(line)
			if !ok {
				continue
			}
			if s.Metric == nil || math.IsNaN(s.Value) || math.IsInf(s.Value, 0) || s.Step < -1 || (s.Kind != KindStep && s.Kind != KindFinal) {
				t.Fatalf("%q: bad sample %+v", line, s)
			}
		}
		if !bytes.Equal(line, orig) {
			t.Fatal("a recogniser modified its input")
		}
		// The prefilter never refuses a line a built-in recognises.
		if !mayMatchBuiltin(line) {
			for _, r := range Builtin() {
				if s, ok := r.Recognize(line); ok {
					t.Fatalf("%q: mayMatchBuiltin refuses it, %s recognises %+v", line, s.Metric.Name, s)
				}
			}
		}
		// The whole path: tags, prefilter, aggregation, summary.
		o, _ := DefaultOptions().normalize()
		acc := newAccum(o)
		acc.add(-1, "", time.Time{}, 1, line)
		acc.add(-1, "", time.Time{}, 2, line)
		rep := acc.report(o, Meta{}, LineStats{})
		for _, mr := range rep.Metrics {
			if math.IsNaN(mr.Value) || math.IsInf(mr.Value, 0) {
				t.Fatalf("%q: metric %s value %v", line, mr.Name, mr.Value)
			}
		}
		if err := WriteSummary(&bytes.Buffer{}, rep); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzStripTag(f *testing.F) {
	seedLines(f, func(line []byte) { f.Add(line) })
	for _, s := range []string{"[1,2]<stdout>:x", "[3] x", "[3]<stderr>:", "[999999999] y", "[1,999999999]<stdout>:", "[", "[1", "[1,"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		rank, rest, ok := StripTag(line)
		if !ok {
			if rank != 0 || !bytes.Equal(rest, line) {
				t.Fatalf("%q: untagged but got %d, %q", line, rank, rest)
			}
			return
		}
		if rank < 0 || !bytes.HasSuffix(line, rest) || len(rest) >= len(line) {
			t.Fatalf("%q: got %d, %q", line, rank, rest)
		}
		// Re-tagging in gangway's style gives the same rank and rest back.
		again := append([]byte("["+strconv.Itoa(rank)+"] "), rest...)
		r2, rest2, ok2 := StripTag(again)
		if !ok2 || r2 != rank || !bytes.Equal(rest2, rest) {
			t.Fatalf("%q: re-tagged %q gave %d, %q, %v", line, again, r2, rest2, ok2)
		}
	})
}

func FuzzParseMetric(f *testing.F) {
	for _, s := range [][2]string{
		{`tokens=tokens/s: (?P<value>\S+)`, "tokens/s: 12.5"},
		{`x=^step (?P<step>\d+) v=(?P<value>.*)$`, "step 3 v=1e3"},
		{`x=(?P<value>(a|b)*)`, "abab"},
		{`=(?P<value>)`, ""},
		{`y=(?P<value>\d+`, "1"},
		{`z=(?P<step>-?\d+) (?P<value>\d+)`, "-5 7"},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, spec string, line []byte) {
		if len(spec) > 256 {
			return // keep regex compilation cheap
		}
		r, err := ParseMetric(spec, ScopeRank)
		if err != nil {
			if !errors.Is(err, ErrBadMetric) {
				t.Fatalf("%q: error %v does not wrap ErrBadMetric", spec, err)
			}
			return
		}
		if ms := r.Metrics(); len(ms) != 1 || ms[0].Name == "" {
			t.Fatalf("%q: metrics %+v", spec, ms)
		}
		s, ok := r.Recognize(line)
		if ok && (math.IsNaN(s.Value) || math.IsInf(s.Value, 0) || s.Step < -1) {
			t.Fatalf("%q on %q: %+v", spec, line, s)
		}
	})
}
