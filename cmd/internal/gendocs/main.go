// Command gendocs writes the man pages and shell completions that `make
// install` installs, from the built commands' own help: `go run
// ./cmd/internal/gendocs -bin bin -out bin/share`. Under -out it writes
// man/man1/launcher.1, man/man1/agent.1,
// bash-completion/completions/launcher and zsh/site-functions/_launcher.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gangway-hpc/gangway/cmd/internal/manpage"
)

func main() {
	bin := flag.String("bin", "bin", "directory of the built launcher and agent")
	out := flag.String("out", "bin/share", "directory to write under")
	flag.Parse()
	if err := run(context.Background(), *bin, *out); err != nil {
		fmt.Fprintf(os.Stderr, "gendocs: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, out string) error {
	launcher, agent := filepath.Join(bin, "launcher"), filepath.Join(bin, "agent")
	lhelp, _, err := output(ctx, launcher, "-h")
	if err != nil {
		return err
	}
	_, ahelp, err := output(ctx, agent, "-h")
	if err != nil {
		return err
	}
	// Defaults under the home of whoever builds do not belong in a page.
	if home, err := os.UserHomeDir(); err == nil && home != "/" {
		ahelp = strings.ReplaceAll(ahelp, home+"/", "~/")
	}
	version, _, err := output(ctx, launcher, "-version")
	if err != nil {
		return err
	}
	// "launcher VERSION (protocol N)"
	version = strings.Fields(version + " ? ?")[1]
	files := map[string]func() ([]byte, error){
		"man/man1/launcher.1": func() ([]byte, error) {
			return page(manpage.Page{Name: "launcher", Summary: "run a gang of MPI/PyTorch ranks over gangway agents",
				Version: version, SeeAlso: []string{"agent", "mpirun"}}, lhelp)
		},
		"man/man1/agent.1": func() ([]byte, error) {
			return page(manpage.Page{Name: "agent", Summary: "gangway's per-node SSH agent that starts the launcher's ranks",
				Version: version, SeeAlso: []string{"launcher", "sshd"}}, ahelp)
		},
		"bash-completion/completions/launcher": func() ([]byte, error) {
			s, _, err := output(ctx, launcher, "--completion", "bash")
			return []byte(s), err
		},
		"zsh/site-functions/_launcher": func() ([]byte, error) {
			s, _, err := output(ctx, launcher, "--completion", "zsh")
			return []byte(s), err
		},
	}
	for name, gen := range files {
		data, err := gen()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		path := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func page(p manpage.Page, help string) ([]byte, error) {
	var b bytes.Buffer
	err := manpage.Write(&b, p, help)
	return b.Bytes(), err
}

// output runs a command and returns its stdout and stderr; -h exits 0.
func output(ctx context.Context, name string, args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String(), nil
}
