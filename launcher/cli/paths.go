package cli

import (
	"fmt"
	"os"
	"path/filepath"
)

// CheckPaths verifies, before any host is dialled, that the job's output
// destinations can be written, so that a typo fails in a second and not
// after a day of training: --output-filename's directory (made if
// missing), and the directories of --report and --plot. Errors are usage
// errors.
func CheckPaths(cfg Config) error {
	if d := cfg.Out.Dir; d != "" && cfg.Mode == ModeRun {
		if err := os.MkdirAll(d, DirMode); err != nil {
			return UsageError(fmt.Errorf("--output-filename: %w", err))
		}
		if err := probeDir(d); err != nil {
			return UsageError(fmt.Errorf("--output-filename %s: %w", d, err))
		}
	}
	for _, f := range []struct{ flag, path string }{{"--report", cfg.Bench.ReportFile}, {"--plot", cfg.Bench.PlotFile}} {
		if f.path == "" || cfg.Mode != ModeRun && cfg.Mode != ModeAnalyze {
			continue
		}
		if fi, err := os.Stat(f.path); err == nil && fi.IsDir() {
			return UsageError(fmt.Errorf("%s %s: is a directory", f.flag, f.path))
		}
		if err := probeDir(filepath.Dir(f.path)); err != nil {
			return UsageError(fmt.Errorf("%s %s: %w", f.flag, f.path, err))
		}
	}
	return nil
}

// probeDir checks that a file can be created in dir.
func probeDir(dir string) error {
	f, err := os.CreateTemp(dir, ".gangway-probe-*")
	if err != nil {
		return fmt.Errorf("cannot write there: %w", err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// Modes of the files the launcher creates: its umask applies to their
// modes, as with mpirun (0755 directories, 0644 files).
const (
	DirMode  = 0o755
	FileMode = 0o644
)
