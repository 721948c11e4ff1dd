package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentBesideLauncher: --transport slurm's default --agent-path is the
// agent in the launcher's directory (through a symlinked launcher too),
// else the agent in PATH, always absolute; a directory named agent (the
// source tree's agent/) is never taken.
func TestAgentBesideLauncher(t *testing.T) {
	dir := t.TempDir()
	write := func(path string, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	bin := filepath.Join(dir, "bin")
	launcher := write(filepath.Join(bin, "launcher"), 0o755)
	agent := write(filepath.Join(bin, "agent"), 0o755)
	link := filepath.Join(dir, "links", "launcher")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(launcher, link); err != nil {
		t.Fatal(err)
	}
	lonely := write(filepath.Join(dir, "lonely", "launcher"), 0o755)
	write(filepath.Join(dir, "noexec", "launcher"), 0o755)
	write(filepath.Join(dir, "noexec", "agent"), 0o644)
	srcTree := filepath.Join(dir, "src")
	write(filepath.Join(srcTree, "launcher"), 0o755)
	if err := os.MkdirAll(filepath.Join(srcTree, "agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	onPath := write(filepath.Join(dir, "path", "agent"), 0o755)

	exe := func(p string) func() (string, error) { return func() (string, error) { return p, nil } }
	found := func(string) (string, error) { return onPath, nil }
	notFound := func(string) (string, error) { return "", errors.New("not found") }
	for _, tc := range []struct {
		name string
		exe  func() (string, error)
		look func(string) (string, error)
		want string // "" for an error
		err  string
	}{
		{"beside the launcher", exe(launcher), notFound, agent, ""},
		{"beside a symlinked launcher's target", exe(link), notFound, agent, ""},
		{"in PATH", exe(lonely), found, onPath, ""},
		{"not executable: PATH", exe(filepath.Join(dir, "noexec", "launcher")), found, onPath, ""},
		{"source tree: agent/ is a directory", exe(filepath.Join(srcTree, "launcher")), notFound, "",
			"no agent binary beside the launcher (" + filepath.Join(srcTree, "agent") + ") or in PATH; give --agent-path"},
		{"no executable path", func() (string, error) { return "", errors.New("unknown") }, notFound, "", "no agent in PATH; give --agent-path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := agentBesideLauncher(tc.exe, tc.look)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %q, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestSlurmAgentPathMissing: inside an allocation with no agent to be
// found, the launcher refuses with a usage error naming --agent-path; a
// dry run, which starts nothing, goes on.
func TestSlurmAgentPathMissing(t *testing.T) {
	defer func(old func() (string, error)) { findAgent = old }(findAgent)
	findAgent = func() (string, error) {
		return "", errors.New("no agent binary beside the launcher (/x/agent) or in PATH; give --agent-path")
	}
	getenv, environ := fakeEnv(map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "dgx[01-02]", "SLURM_TASKS_PER_NODE": "8(x2)"})
	_, err := Parse([]string{"python3", "train.py"}, getenv, environ)
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--transport slurm: no agent binary beside the launcher (/x/agent) or in PATH; give --agent-path") {
		t.Errorf("got %v, want the usage error", err)
	}
	c, err := Parse([]string{"--dry-run", "python3", "train.py"}, getenv, environ)
	if err != nil || c.Transport.AgentPath != "agent" {
		t.Errorf("dry run: %v, agent path %q", err, c.Transport.AgentPath)
	}
}
