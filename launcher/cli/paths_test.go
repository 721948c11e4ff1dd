package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
		err := CheckPaths(tt.cfg)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: %v, want %q", tt.name, err, tt.wantErr)
		case tt.wantErr != "" && !errors.Is(err, ErrUsage):
			t.Errorf("%s: %v, want a usage error", tt.name, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 { // f, new, ro
		t.Errorf("probe files left behind: %v", entries)
	}
}
