package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/gangway-hpc/gangway/launcher/transport"
)

// agentName is the agent binary's name: --agent-path's default for
// --transport ssh (looked up in the remote PATH), and what the srun
// transport looks for beside the launcher.
const agentName = "agent"

// findAgent finds the agent binary that --transport slurm starts on the
// nodes when --agent-path is not given (agentBesideLauncher); tests
// replace it.
var findAgent = func() (string, error) { return agentBesideLauncher(os.Executable, exec.LookPath) }

// agentBesideLauncher is the absolute path of the agent in the running
// launcher's directory (bin/launcher beside bin/agent, as make build and
// make install put them), else of the agent found in PATH, as Hydra finds
// its proxy beside mpiexec. Nodes of a Slurm cluster share the launcher's
// file systems, and an absolute path keeps slurmstepd from executing
// something of the job's working directory (in the source tree, the
// agent/ directory). exe is os.Executable, look exec.LookPath.
func agentBesideLauncher(exe func() (string, error), look func(string) (string, error)) (string, error) {
	var beside string
	if self, err := exe(); err == nil {
		if resolved, err := filepath.EvalSymlinks(self); err == nil {
			self = resolved
		}
		beside = filepath.Join(filepath.Dir(self), agentName)
		if isExecutable(beside) {
			return beside, nil
		}
	}
	p, err := look(agentName)
	if err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, nil
		}
	}
	if beside == "" {
		return "", fmt.Errorf("no %s in PATH; give --agent-path", agentName)
	}
	return "", fmt.Errorf("no agent binary beside the launcher (%s) or in PATH; give --agent-path, the agent's path on the nodes", beside)
}

// isExecutable reports whether path is a regular file someone may execute.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// resolveAgentPath sets --agent-path for --transport slurm when neither it
// nor --prefix was given (findAgent). A dry run, which starts nothing,
// keeps the plain name when none is found.
func (c *Config) resolveAgentPath() error {
	t := &c.Transport
	if t.Kind != transport.Slurm || c.in.given["agent-path"] || c.in.compat.prefix != "" {
		return nil
	}
	p, err := findAgent()
	switch {
	case err == nil:
		t.AgentPath = p
	case c.Mode == ModeDryRun:
	default:
		return fmt.Errorf("%w: --transport slurm: %w", ErrUsage, err)
	}
	return nil
}
