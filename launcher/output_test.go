package launcher

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gangway/agent/wire"
)

// TestRankFilesExact: per-rank files hold exactly the bytes of the frames,
// a final line without a newline included, while the console gets whole
// tagged lines.
func TestRankFilesExact(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	c := newConsole(Output{Dir: dir}, 1, &out, &errb, nil, nil)
	var sc scratch
	c.write(&sc, 0, wire.Stdout, []byte("a\nb\n"))
	c.write(&sc, 0, wire.Stdout, []byte("no newline"))
	c.write(&sc, 0, wire.Stderr, []byte("e\n"))
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"stdout": "a\nb\nno newline", "stderr": "e\n"} {
		b, err := os.ReadFile(filepath.Join(dir, "rank.0", name))
		if err != nil || string(b) != want {
			t.Errorf("rank.0/%s = %q, %v; want %q", name, b, err, want)
		}
	}
	if want := "[0] a\n[0] b\n[0] no newline\n"; out.String() != want {
		t.Errorf("console %q, want %q", out.String(), want)
	}
}

// TestRankFilesNoFollow: a symbolic link planted where a rank's file or
// directory goes is not followed; its target keeps its content.
func TestRankFilesNoFollow(t *testing.T) {
	for _, plant := range []string{"rank.0/stdout", "rank.0"} {
		dir := t.TempDir()
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}
		target := victim
		if plant == "rank.0" {
			target = filepath.Dir(victim)
		} else if err := os.Mkdir(filepath.Join(dir, "rank.0"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, plant)); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		c := newConsole(Output{Dir: dir}, 1, &out, &errb, nil, nil)
		var sc scratch
		c.write(&sc, 0, wire.Stdout, []byte("overwritten\n"))
		err := c.close()
		if err == nil {
			t.Errorf("link at %s: no error", plant)
		}
		if b, _ := os.ReadFile(victim); string(b) != "precious" {
			t.Errorf("link at %s: the link's target became %q", plant, b)
		}
		if out.String() != "[0] overwritten\n" {
			t.Errorf("link at %s: console %q; the console must not suffer", plant, out.String())
		}
	}
}

// TestTailBounded: the failure report keeps 10 lines of at most 4 KiB per
// rank, however long the rank's lines are.
func TestTailBounded(t *testing.T) {
	var out, errb bytes.Buffer
	c := newConsole(Output{}, 4, &out, &errb, nil, nil)
	var sc scratch
	long := strings.Repeat("x", 1<<20)
	for range 20 {
		c.write(&sc, 3, wire.Stderr, []byte(long+"\n"))
	}
	c.write(&sc, 3, wire.Stderr, []byte("last\n"))
	tail := c.tail(3)
	if len(tail) != tailLines || tail[len(tail)-1] != "last" {
		t.Fatalf("tail has %d lines, last %.20q", len(tail), tail[len(tail)-1])
	}
	total := 0
	for _, l := range tail {
		total += len(l)
	}
	if total > tailLines*(tailLineBytes+64) {
		t.Errorf("tail holds %d bytes", total)
	}
	if want := "... (1044480 more bytes)"; !strings.HasSuffix(tail[0], want) {
		t.Errorf("a clipped line ends %q, want %q", tail[0][len(tail[0])-30:], want)
	}
}

func TestCheckPaths(t *testing.T) {
	dir := t.TempDir()
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	writable := func() bool { // root writes anywhere
		f, err := os.CreateTemp(ro, "x")
		if err == nil {
			f.Close()
			os.Remove(f.Name())
		}
		return err == nil
	}()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"nothing asked", Config{}, ""},
		{"output dir made", Config{Out: Output{Dir: filepath.Join(dir, "new", "out")}}, ""},
		{"report in a missing directory", Config{Bench: Bench{ReportFile: filepath.Join(dir, "missing", "r.json")}}, "--report " + filepath.Join(dir, "missing", "r.json") + ": cannot write there"},
		{"plot is a directory", Config{Bench: Bench{PlotFile: dir}}, "--plot " + dir + ": is a directory"},
		{"output dir under a file", Config{Out: Output{Dir: filepath.Join(dir, "f", "out")}}, "--output-filename: mkdir"},
		{"dry run checks no report", Config{Mode: ModeDryRun, Bench: Bench{ReportFile: filepath.Join(dir, "missing", "r.json")}}, ""},
	}
	if !writable {
		tests = append(tests, struct {
			name    string
			cfg     Config
			wantErr string
		}{"read-only output dir", Config{Out: Output{Dir: ro}}, "cannot write there"})
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		err := checkPaths(tt.cfg)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: %v, want %q", tt.name, err, tt.wantErr)
		case tt.wantErr != "" && exitCode(err, false) != ExitUsage:
			t.Errorf("%s: exit %d, want a usage error", tt.name, exitCode(err, false))
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 { // f, new, ro
		t.Errorf("probe files left behind: %v", entries)
	}
}
