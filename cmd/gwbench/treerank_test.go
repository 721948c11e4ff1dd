package main

import (
	"strings"
	"testing"
)

func TestParseTreeRun(t *testing.T) {
	good := "noise\n" +
		"[0] gwbench treerank 0 3 0 1000 50000\n" +
		"gwbench treerank 2 3 2 3000 70000\n" +
		"gwbench treerank 1 3 1 2000 60000\n"
	r, err := parseTreeRun(good, 3)
	if err != nil {
		t.Fatalf("parseTreeRun: %v", err)
	}
	want := treeRun{ranks: 3, firstStart: 1000, lastStart: 3000, barrierMax: 70000, barrierMed: 60000}
	if r != want {
		t.Errorf("parseTreeRun = %+v, want %+v", r, want)
	}

	for _, c := range []struct {
		name string
		size int
		out  string
		want string
	}{
		{"missing", 3, "gwbench treerank 0 3 0 1 1\ngwbench treerank 2 3 2 1 1\n", "1 of 3 ranks did not report (first: rank 1)"},
		{"twice", 2, "gwbench treerank 0 2 0 1 1\ngwbench treerank 0 2 0 1 1\ngwbench treerank 1 2 1 1 1\n", "rank 0 twice"},
		{"world size", 2, "gwbench treerank 0 2 0 1 1\ngwbench treerank 1 3 1 1 1\n", "rank 1: WORLD_SIZE=3, want 2"},
		{"pmi rank", 2, "gwbench treerank 0 2 0 1 1\ngwbench treerank 1 2 0 1 1\n", "rank 1: PMI_RANK=0"},
		{"out of range", 2, "gwbench treerank 0 2 0 1 1\ngwbench treerank 1 2 1 1 1\ngwbench treerank 5 2 5 1 1\n", "RANK=5 out of 0..1"},
		{"malformed", 2, "gwbench treerank 0 2 0 1 1\ngwbench treerank 1 2 1 x 1\n", `malformed line "gwbench treerank 1 2 1 x 1"`},
		{"short", 1, "gwbench treerank 0 1 0 1\n", "malformed line"},
	} {
		_, err := parseTreeRun(c.out, c.size)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to say %q", c.name, err, c.want)
		}
	}
}
