package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBenchPlotNothing: --plot on a job that prints no throughput says so
// and keeps the job's exit code; it writes no file.
func TestBenchPlotNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pp, rj := filepath.Join(dir, "p.png"), filepath.Join(dir, "r.json")
	l := startLauncher(t, false, "-np", "2", "--plot", pp, "--report", rj, "echo", "no numbers here")
	assertCode(t, l, 0)
	if want := "bench: nothing to plot (no throughput over time recognised); " + pp + " not written\n"; !strings.HasSuffix(l.stdout(), want) {
		t.Errorf("stdout %q lacks %q at its end", l.stdout(), want)
	}
	if _, err := os.Stat(pp); !os.IsNotExist(err) {
		t.Errorf("%s: %v, want no file", pp, err)
	}
	if _, err := os.Stat(rj); err != nil {
		t.Errorf("--report still asked for: %v", err)
	}
}

// TestBenchBadMetric: a bad --metric is a usage error found before any
// host is dialled (the host here never answers), in --dry-run too.
func TestBenchBadMetric(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	host := "127.0.0.1:1:" + strconv.Itoa(port)
	for _, args := range [][]string{
		{"-H", host, "--metric", `x=^rate (?P<val>\d+)`, "true"},
		{"-H", host, "--metric", `tf_cnn_images_per_sec=^(?P<value>\d+)`, "true"},
		{"--dry-run", "-H", host, "--metric", `x=(`, "true"},
	} {
		l := startLauncher(t, false, args...)
		assertCode(t, l, 2)
		if errOut := l.stderr(); !strings.Contains(errOut, "--metric") && !strings.Contains(errOut, "defined twice") || strings.Contains(errOut, "reach") {
			t.Errorf("%q: stderr %q: want only the --metric error", args, errOut)
		}
	}
}
