package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseStamp(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{"1732000000.123456789\n", time.Unix(1732000000, 123456789), ""},
		{"1732000000.000000001", time.Unix(1732000000, 1), ""},
		{"  1732000000.5 ", time.Unix(1732000000, 500000000), ""},
		{"1732000000.05", time.Unix(1732000000, 50000000), ""},
		{"1732000000", time.Time{}, "want SECONDS.NANOSECONDS"},
		{"1732000000.", time.Time{}, "want SECONDS.NANOSECONDS"},
		{".5", time.Time{}, "want SECONDS.NANOSECONDS"},
		{"1732000000.1234567890", time.Time{}, "want SECONDS.NANOSECONDS"},
		{"17x2000000.5", time.Time{}, "bad seconds"},
		{"-1.5", time.Time{}, "bad seconds"},
		{"1732000000.5e3", time.Time{}, "bad fraction"},
		{"1732000000.-5", time.Time{}, "bad fraction"},
		{"", time.Time{}, "want SECONDS.NANOSECONDS"},
	} {
		got, err := parseStamp(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseStamp(%q) = %v, %v; want error with %q", tc.in, got, err, tc.wantErr)
			}
		case err != nil || !got.Equal(tc.want):
			t.Errorf("parseStamp(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestEnvironHas(t *testing.T) {
	const kv = failVar + "=gwbench-42"
	for _, tc := range []struct {
		env  string
		want bool
	}{
		{"PATH=/bin\x00" + kv + "\x00HOME=/root\x00", true},
		{kv + "\x00", true},
		{kv, true},
		{"PATH=/bin\x00" + kv + "1\x00", false},      // another run's tag
		{"PATH=/bin\x00X" + kv + "\x00", false},      // another variable
		{"PATH=/bin\x00" + failVar + "=\x00", false}, // empty
		{"", false},
	} {
		if got := environHas([]byte(tc.env), kv); got != tc.want {
			t.Errorf("environHas(%q) = %v, want %v", tc.env, got, tc.want)
		}
	}
}

func TestFailstopSample(t *testing.T) {
	stamp := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return stamp.Add(d) }
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		end     time.Time
		gone    []time.Time
		want    failSample
		wantErr string
	}{{
		name: "launcher returns after the last rank",
		end:  at(30 * ms),
		gone: []time.Time{at(-900 * ms), at(2 * ms), at(20 * ms), at(25 * ms)},
		want: failSample{stopped: 30 * ms, ranks: 25 * ms, launcher: 30 * ms},
	}, {
		name: "launcher returns first: the last rank sets the sample",
		end:  at(10 * ms),
		gone: []time.Time{at(2 * ms), at(15 * ms), at(2000 * ms)},
		want: failSample{stopped: 2000 * ms, ranks: 2000 * ms, launcher: 10 * ms, leftAtExit: 2},
	}, {
		name: "exit at the launcher's return is not left over",
		end:  at(10 * ms),
		gone: []time.Time{at(10 * ms)},
		want: failSample{stopped: 10 * ms, ranks: 10 * ms, launcher: 10 * ms},
	}, {
		name:    "a process never exited",
		end:     at(10 * ms),
		gone:    []time.Time{at(2 * ms), {}},
		wantErr: "never exited",
	}, {
		name:    "all gone before the timestamp",
		end:     at(10 * ms),
		gone:    []time.Time{at(-5 * ms)},
		wantErr: "before the timestamp",
	}, {
		name:    "nothing watched",
		end:     at(10 * ms),
		wantErr: "no process",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := failstopSample(stamp, tc.end, tc.gone)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %+v, %v; want error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestFailCase(t *testing.T) {
	for _, tc := range []struct {
		hosts, per int
		want       string
	}{
		{16, 1, "16 hosts x 1 rank (sleep with a child), rank 1 exits 3"},
		{16, 8, "16 hosts x 8 ranks (sleep with a child), rank 1 exits 3"},
	} {
		if got := failCase(tc.hosts, tc.per); got != tc.want {
			t.Errorf("failCase(%d, %d) = %q, want %q", tc.hosts, tc.per, got, tc.want)
		}
	}
}
