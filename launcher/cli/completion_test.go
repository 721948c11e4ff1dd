package cli

import (
	"errors"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCompletionHasEveryFlag keeps the scripts from drifting: they are
// written from the flag set, and every flag is in both.
func TestCompletionHasEveryFlag(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		script, err := Completion(shell)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range FlagNames() {
			if !strings.Contains(script, "-"+name+" ") && !strings.Contains(script, "{-"+name+",") &&
				!strings.Contains(script, "-"+name+"'") {
				t.Errorf("%s completion lacks -%s", shell, name)
			}
		}
	}
	if _, err := Completion("fish"); !errors.Is(err, ErrUsage) {
		t.Errorf("Completion(fish) = %v, want a usage error", err)
	}
}

// TestBashCompletion runs the bash script in bash for command lines and
// compares what it offers.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("no bash: %v", err)
	}
	script, err := Completion("bash")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line       string // the words; the last is the one completed
		want, lack []string
	}{
		{"launcher -n", []string{"-np", "-n", "-network-interface", "-no-summary", "-npernode"}, []string{"-H"}},
		{"launcher --map-by ", []string{"slot", "node"}, nil},
		{"launcher -np 4 -tags m", []string{"mpirun"}, []string{"rank"}},
		{"launcher -hostfile -", nil, []string{"-np"}}, // a value: files, not flags
		{"launcher -mca btl -", nil, []string{"-np"}},  // -mca KEY VALUE
		{"launcher -mca btl tcp -t", []string{"-tags", "-timeout", "-transport"}, nil},
		{"launcher -np 4 python3 -", nil, []string{"-np"}}, // PROGRAM's own flags are not ours
		{"launcher -v -- -", nil, []string{"-np"}},
		{"launcher --np", []string{"--np", "--npernode"}, []string{"-np"}},
		{"launcher --nproc", []string{"--nproc-per-node", "--nproc_per_node"}, nil},
		{"launcher -np 4 --map-by ", []string{"slot", "node", "socket"}, nil},
		{"launcher --hostfile h --rdzv", []string{"--rdzv-id", "--rdzv_id"}, nil},
	} {
		words := strings.Split(tc.line, " ")
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "\n_launcher\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command(bash, "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		got := strings.Fields(string(out))
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%q: offers %q, lacks %q", tc.line, got, w)
			}
		}
		for _, w := range tc.lack {
			if slices.Contains(got, w) {
				t.Errorf("%q: offers %q, should not offer %q", tc.line, got, w)
			}
		}
	}
}
