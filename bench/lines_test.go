package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// filteredPerLine is the reference: the lines of data (as cutLine splits
// them) that Observe's filter lets through, one by one.
func filteredPerLine(data []byte) []string {
	var out []string
	for len(data) > 0 {
		var line []byte
		line, data = cutLine(data)
		if _, rest, _ := StripTag(trimEOL(line)); mayMatchBuiltin(rest) {
			out = append(out, string(line))
		}
	}
	return out
}

// filteredBatch is what ObserveLines lets through.
func filteredBatch(data []byte) []string {
	var out []string
	eachCandidate(data, func(line []byte) {
		if _, rest, _ := StripTag(trimEOL(line)); mayMatchBuiltin(rest) {
			out = append(out, string(line))
		}
	})
	return out
}

func TestEachCandidateCountsLines(t *testing.T) {
	for data, want := range map[string]int{"": 0, "\n": 1, "a": 1, "a\n": 1, "a\nb": 2, "\n\n\n": 3, "[1] x\n2\n\nT": 4} {
		if got := eachCandidate([]byte(data), func([]byte) {}); got != want {
			t.Errorf("%q: %d lines, want %d", data, got, want)
		}
	}
}

func TestEachCandidate(t *testing.T) {
	tests := []struct {
		data string
		want []string
	}{
		{"", nil},
		{"\n\n", nil},
		{"r00003 l0000000042 qqqq\nr00003 l0000000043 rrrr\n", nil},
		{"step 10 1234 img/sec\n", nil}, // no built-in figure starts so
		{"x\nTotal img/sec on 4 GPU(s): 1 +-2", []string{"Total img/sec on 4 GPU(s): 1 +-2"}},
		{"a/sec\nIter #1: 2 img/sec per GPU\ntotal images/sec: 3\n", []string{"Iter #1: 2 img/sec per GPU", "total images/sec: 3"}},
		{"T/se\nc\n", nil},
		{"x\n# Avg bus bandwidth    : 30.25\ny bandwidth\n", []string{"# Avg bus bandwidth    : 30.25"}},
		{"DLL 2021 total_ips : 5\nDLX\n", []string{"DLL 2021 total_ips : 5"}},
		{"  1 2 3\n\t4\n x\n5\r\n", []string{"  1 2 3", "\t4", "5\r"}},
		{"[3] 100\timages/sec: 1\n[3] loss\n[1,2]<stdout>: 7\n", []string{"[3] 100\timages/sec: 1", "[1,2]<stdout>: 7"}},
		{"#bandwidth/sec", []string{"#bandwidth/sec"}},
	}
	for _, tt := range tests {
		got := filteredBatch([]byte(tt.data))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q: batch %q, want %q", tt.data, got, tt.want)
		}
		if ref := filteredPerLine([]byte(tt.data)); !slices.Equal(got, ref) {
			t.Errorf("%q: batch %q, per line %q", tt.data, got, ref)
		}
	}
}

func FuzzEachCandidate(f *testing.F) {
	for _, s := range []string{"", "\n", "a/sec\nb\n", "x\n 1\n[2] bandwidth", "DLL x\nD\n9", "/sec/sec\n\nbandwidthbandwidth"} {
		f.Add([]byte(s))
	}
	seedLines(f, func(line []byte) { f.Add(append(append([]byte("r1 l2 x\n"), line...), "\nr3\n"...)) })
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, ref := filteredBatch(data), filteredPerLine(data); !slices.Equal(got, ref) {
			t.Fatalf("%q: batch %q, per line %q", data, got, ref)
		}
	})
}

// TestObserveLinesGolden: every golden log handed over whole by
// ObserveLines gives the report that Observe line by line gives.
func TestObserveLinesGolden(t *testing.T) {
	logs, err := filepath.Glob(filepath.Join("testdata", "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no golden logs: %v", err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		report := func(batch bool) []byte {
			c, err := NewCollector(DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- c.Run(t.Context()) }()
			if batch {
				c.ObserveLines(-1, "h", t0, data)
			} else {
				for rest := data; len(rest) > 0; {
					var line []byte
					line, rest = cutLine(rest)
					c.Observe(-1, "h", t0, line)
				}
			}
			c.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(c.Report(Meta{}))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		perLine, batch := report(false), report(true)
		if string(perLine) != string(batch) {
			t.Errorf("%s: ObserveLines report\n%s\nObserve per line\n%s", path, batch, perLine)
		}
		if len(filteredBatch(data)) == 0 {
			t.Errorf("%s: no line passed the filter", path)
		}
	}
}
