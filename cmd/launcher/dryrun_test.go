package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

func TestDryRun(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, "--dry-run", "-np", "16", "-H", "a:8,b:8", "prog", "arg")
	assertCode(t, l, 0)
	checkDryRun(t, l.stdout(), "a", "b")
}

// TestDryRunDialsNothing uses hosts that would be reachable (loopback
// addresses the in-process agent does not serve) with a listener on the
// agent port: a dry run must not connect.
func TestDryRunDialsNothing(t *testing.T) {
	t.Parallel()
	ln, port := listenAny(t)
	l := startLauncher(t, false, "--dry-run", "-np", "16", "-H", "127.0.0.2:8,127.0.0.3:8", "-p", port, "prog", "arg")
	assertCode(t, l, 0)
	checkDryRun(t, l.stdout(), "127.0.0.2", "127.0.0.3")
	if n := ln.accepted(); n > 0 {
		t.Errorf("dry run made %d connections to the agent port", n)
	}
}

func checkDryRun(t *testing.T, out, a, b string) {
	t.Helper()
	if !strings.HasPrefix(out, "# placement: 16 ranks on 2 hosts (map-by slot), command: prog arg\n") {
		t.Errorf("dry run header:\n%s", e2e.Tail(out, 500))
	}
	var rows []string
	for _, line := range lines(out) {
		f := strings.Fields(line)
		if len(f) == 6 && f[0] != "RANK" && !strings.HasPrefix(line, "#") {
			rows = append(rows, strings.Join(f, " "))
		}
	}
	var want []string
	for r := range 16 {
		h, node := a, 0
		if r >= 8 {
			h, node = b, 1
		}
		want = append(want, fmt.Sprintf("%d %s %d 8 %d -", r, h, r%8, node))
	}
	if !slices.Equal(rows, want) {
		t.Errorf("placement rows\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	for r := range 16 {
		h := a
		if r >= 8 {
			h = b
		}
		sec := fmt.Sprintf("# environment rank %d on %s\n", r, h)
		i := strings.Index(out, sec)
		if i < 0 {
			t.Errorf("no %q", sec)
			continue
		}
		env := out[i+len(sec):]
		if j := strings.Index(env, "# environment rank"); j >= 0 {
			env = env[:j]
		}
		// The launcher's own variables come first, under their header.
		env, ok := strings.CutPrefix(env, "# source: launcher\n")
		if !ok {
			t.Errorf("rank %d: no # source: launcher first", r)
		}
		if j := strings.Index(env, "#"); j >= 0 {
			env = env[:j]
		}
		for _, kv := range []string{fmt.Sprintf("RANK=%d", r), "WORLD_SIZE=16", fmt.Sprintf("LOCAL_RANK=%d", r%8), "MASTER_ADDR=" + a, fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", r)} {
			if !slices.Contains(lines(env), kv) {
				t.Errorf("rank %d environment lacks %s", r, kv)
			}
		}
		if envLines := lines(env); !slices.IsSorted(envLines) {
			t.Errorf("rank %d environment not sorted", r)
		}
	}
}
