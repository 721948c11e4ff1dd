//go:build linux

// Package firstnodes follows the README's "Your first two nodes" literally:
// a release tarball from `make dist`, installed on two network-namespace
// hosts as the nodes (each with its own /usr/local, /etc/gangway and
// /var/log, in a mount namespace of its own) and in a folder for the
// launcher host, then the README's shell blocks run as written.
package firstnodes

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

const version = "v0.0.0-firstnodes"

// TestFirstTwoNodes: `make dist` gives a tarball with both binaries, the
// man pages, completions and the unit; the README's steps, run as
// written, bring up two agents whose logged host-key fingerprints match
// what ssh-keyscan recorded, and a 16-rank job across them.
func TestFirstTwoNodes(t *testing.T) {
	roottest.RequireRoot(t)
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	tarball := makeDist(t, root)
	launcherHost := t.TempDir()
	unpack(t, tarball, launcherHost)
	if out, err := exec.Command(filepath.Join(launcherHost, "bin", "launcher"), "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), version) {
		t.Fatalf("launcher --version from the tarball: %v: %q, want %s in it", err, out, version)
	}

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := firstNodesBlocks(readme)
	if err != nil {
		t.Fatal(err)
	}
	checkUnitMatches(t, root, blocks["node"])

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	b, err := testbed.New(ctx, testbed.Options{Prefix: "gwf", Hosts: 2, Subnet: 26, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("bed Close: %v", err)
		}
	})

	home := t.TempDir()
	launcherEnv := append(os.Environ(), "HOME="+home, "PATH="+filepath.Join(launcherHost, "bin")+":"+os.Getenv("PATH"))
	key := strings.TrimSpace(sh(ctx, t, exec.CommandContext(ctx, "sh", "-ec", blocks["launcher-key"]+"\nprintf '%s\\n' \"$LAUNCHER_KEY\""), launcherEnv))
	if !strings.HasPrefix(key, "ssh-ed25519 ") {
		t.Fatalf("launcher-key step printed %q, want an ed25519 public key", key)
	}

	etc := ensureDir(t, "/etc/gangway") // a mount point for each node's own
	fingerprints := map[string]string{} // address -> SHA256:...
	fpRE := regexp.MustCompile(`"host_key_fingerprint":"(SHA256:[^"]+)"`)
	for i, h := range b.Hosts() {
		// The node's own root: tmpfs over what the steps write, the
		// tarball unpacked as the Install section says.
		prelude := "mount -t tmpfs tmpfs " + etc + " && mount -t tmpfs tmpfs /usr/local && mount -t tmpfs tmpfs /var/log && " +
			"tar -xzf " + tarball + " -C /usr/local --strip-components=1\n"
		cmd := b.Command(ctx, i, "unshare", "--mount", "--propagation", "private", "sh", "-ec", prelude+blocks["node"])
		out := sh(ctx, t, cmd, append(os.Environ(), "LAUNCHER_KEY="+key))
		m := fpRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("node %s: no fingerprint in the node step's output:\n%s", h.Addr, out)
		}
		fingerprints[h.Addr] = m[1]
	}

	hosts := b.Hosts()
	step := exec.CommandContext(ctx, "sh", "-ec", blocks["launcher-run"])
	out := sh(ctx, t, step, append(launcherEnv, "NODE1="+hosts[0].Addr, "NODE2="+hosts[1].Addr))
	for addr, fp := range fingerprints {
		if !strings.Contains(out, fp+" ["+addr+"]:22122") {
			t.Errorf("ssh-keygen -lf of known_hosts does not show node %s's logged fingerprint %s:\n%s", addr, fp, out)
		}
	}
	name, _ := os.Hostname()
	if n := strings.Count(out, name+"\n"); n != 16 {
		t.Errorf("the job printed the host name %d times, want 16:\n%s", n, out)
	}
}

// makeDist runs `make dist` for this machine's architecture into a
// temporary folder, checks the tarball's contents and SHA256SUMS, and
// returns the tarball's path.
func makeDist(t *testing.T, root string) string {
	dist := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "make", "-C", root, "--no-print-directory", "dist",
		"DIST_ARCHES="+runtime.GOARCH, "DISTDIR="+dist, "VERSION="+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, out)
	}
	name := "gangway-" + version + "-linux-" + runtime.GOARCH + ".tar.gz"
	tarball := filepath.Join(dist, name)
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil || !strings.Contains(string(sums), "  "+name+"\n") {
		t.Fatalf("SHA256SUMS (%v): %q, want a line for %s", err, sums, name)
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dist
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	entries := tarEntries(t, tarball)
	top := "gangway-" + version + "-linux-" + runtime.GOARCH + "/"
	for path, mode := range map[string]os.FileMode{
		"bin/launcher": 0o755, "bin/agent": 0o755,
		"share/man/man1/launcher.1": 0o644, "share/man/man1/agent.1": 0o644,
		"share/bash-completion/completions/launcher": 0o644, "share/zsh/site-functions/_launcher": 0o644,
		"lib/systemd/system/gangway-agent.service": 0o644,
	} {
		h, ok := entries[top+path]
		switch {
		case !ok:
			t.Errorf("tarball has no %s", top+path)
		case h.FileInfo().Mode().Perm() != mode || h.Uid != 0 || h.Gid != 0:
			t.Errorf("tarball's %s: mode %v uid %d gid %d, want %v and root's", path, h.FileInfo().Mode().Perm(), h.Uid, h.Gid, mode)
		}
	}
	return tarball
}

func tarEntries(t *testing.T, path string) map[string]*tar.Header {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	m := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return m
		}
		if err != nil {
			t.Fatal(err)
		}
		m[h.Name] = h
	}
}

func unpack(t *testing.T, tarball, dir string) {
	if out, err := exec.Command("tar", "-xzf", tarball, "-C", dir, "--strip-components=1").CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", tarball, err, out)
	}
}

// firstNodesBlocks returns the README's shell blocks that follow a
// "<!-- first-nodes: NAME -->" line, by NAME.
func firstNodesBlocks(readme []byte) (map[string]string, error) {
	blocks := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(readme)))
	name, in := "", false
	var body strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "<!-- first-nodes: "):
			name = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- first-nodes: "), " -->")
		case name != "" && !in && line == "```sh":
			in = true
		case in && line == "```":
			blocks[name] = body.String()
			body.Reset()
			name, in = "", false
		case in:
			body.WriteString(line + "\n")
		}
	}
	for _, want := range []string{"launcher-key", "node", "launcher-run"} {
		if blocks[want] == "" {
			return nil, errors.New("README: no ```sh block after <!-- first-nodes: " + want + " -->")
		}
	}
	return blocks, nil
}

// checkUnitMatches: the node step's agent command line is the systemd
// unit's ExecStart, so the README's two ways are one.
func checkUnitMatches(t *testing.T, root, node string) {
	unit, err := os.ReadFile(filepath.Join(root, "examples", "systemd", "gangway-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	var exec string
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			exec = v
		}
	}
	joined := strings.ReplaceAll(node, "\\\n", " ")
	var step string
	for _, l := range strings.Split(joined, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "nohup "); ok {
			step, _, _ = strings.Cut(v, " >>")
		}
	}
	if !slices.Equal(strings.Fields(step), strings.Fields(exec)) {
		t.Errorf("README's node step starts %q, the unit's ExecStart is %q: keep them one", step, exec)
	}
}

// ensureDir makes dir if it is missing, removing it again at cleanup.
func ensureDir(t *testing.T, dir string) string {
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	return dir
}

// sh runs cmd with env, failing the test with its output if it fails.
func sh(ctx context.Context, t *testing.T, cmd *exec.Cmd, env []string) string {
	t.Helper()
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v (ctx %v)\n%s", strings.Join(cmd.Args, " "), err, ctx.Err(), out)
	}
	return string(out)
}
