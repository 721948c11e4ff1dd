package launcher

import (
	"os"
	"path/filepath"
	"testing"
)

func TestProgramPath(t *testing.T) {
	dir := t.TempDir()
	bin, cwd := filepath.Join(dir, "bin"), filepath.Join(dir, "work")
	for _, d := range []string{bin, cwd} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, mode := range map[string]os.FileMode{
		filepath.Join(bin, "train"): 0o755, filepath.Join(bin, "data"): 0o644,
		filepath.Join(cwd, "train.sh"): 0o755, filepath.Join(cwd, "train"): 0o755,
	} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	path := "/nonexistent:" + bin
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"train", filepath.Join(bin, "train"), true},       // PATH first
		{"train.sh", filepath.Join(cwd, "train.sh"), true}, // then the working directory
		{"./train", filepath.Join(cwd, "train"), true},
		{filepath.Join(bin, "train"), filepath.Join(bin, "train"), true},
		{"data", filepath.Join(cwd, "data"), false}, // not executable
		{"missing", filepath.Join(cwd, "missing"), false},
		{"bin", filepath.Join(cwd, "bin"), false},
	} {
		got, ok := programPath(tc.name, cwd, path)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("programPath(%q) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
