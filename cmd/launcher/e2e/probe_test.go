package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestUserCannotProbeAsRoot: an ordinary user's job on a root agent
// names programs and working directories the agent looks at for it. Every
// look happens as that user: a root-only script's #! line never reaches
// the user, a file in a root-only directory and a missing one read the
// same, /dev/zero and a FIFO are refused as no program without being
// read (the agent's peak RSS stays small), and a working directory's
// existence inside a root-only directory is not told either.
func TestUserCannotProbeAsRoot(t *testing.T) {
	e2e.NoTree(t, "one host")
	agenttest.RequireRoot(t)
	t.Parallel()
	u := agenttest.NewUser(t, "")
	keys := u.NewKeys(t)
	_, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 1, agentBin)
	h := c.Hosts[0]

	const secret = "GANGWAY-SECRET-INTERPRETER"
	open, err := os.MkdirTemp("", "gangway-probe-") // t.TempDir's parent is root's alone
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(open) })
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(open, "private") // root's, 0700
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(open, "secret.sh"), filepath.Join(private, "secret.sh")} {
		if err := os.WriteFile(p, []byte("#!/opt/"+secret+"/python\nprint('x')\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(private, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(open, "fifo")
	if err := syscall.Mkfifo(fifo, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fifo, 0o777); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, int) {
		t.Helper()
		_, stderr, code := c.RunLauncher(t, append([]string{"-i", keys.ClientKey, "--known-hosts", c.KnownHosts, "-np", "1",
			"-H", asUser(u.Name, h, 1), "-wdir", "/tmp"}, args...)...)
		if strings.Contains(stderr, secret) {
			t.Errorf("%v: the root-only #! line reached the user:\n%s", args, stderr)
		}
		return stderr, code
	}

	stderr, code := run(filepath.Join(open, "secret.sh"))
	if code != 126 || !strings.Contains(stderr, "not executable") {
		t.Errorf("a root-only 0600 script: exit %d, want 126 (not executable):\n%s", code, stderr)
	}
	inPrivate, code1 := run(filepath.Join(private, "secret.sh"))
	missing, code2 := run(filepath.Join(private, "no-such-file"))
	if code1 != code2 || strings.ReplaceAll(inPrivate, "secret.sh", "X") != strings.ReplaceAll(missing, "no-such-file", "X") {
		t.Errorf("a file in a root-only directory and a missing one read differently:\nexit %d:\n%s\nexit %d:\n%s", code1, inPrivate, code2, missing)
	}
	for _, p := range []string{"/dev/zero", fifo} {
		stderr, code := run(p)
		if code != 126 || !strings.Contains(stderr, "not a regular file") {
			t.Errorf("%s as the program: exit %d, want 126 (not a regular file):\n%s", p, code, stderr)
		}
	}
	// -wdir: a directory inside a root-only one reads as one that is not
	// there.
	var wdir []string
	for _, d := range []string{filepath.Join(private, "dir"), filepath.Join(private, "no-such-dir")} {
		_, stderr, code := c.RunLauncher(t, "-i", keys.ClientKey, "--known-hosts", c.KnownHosts, "-np", "1",
			"-H", asUser(u.Name, h, 1), "-wdir", d, "true")
		if code != 1 {
			t.Errorf("-wdir %s: exit %d, want 1:\n%s", d, code, stderr)
		}
		wdir = append(wdir, strings.ReplaceAll(stderr, d, "D"))
	}
	if wdir[0] != wdir[1] {
		t.Errorf("-wdir inside a root-only directory tells what exists:\n%s\n%s", wdir[0], wdir[1])
	}
	hwm := statusKiB(t, c.Procs[0].Pid(), "VmHWM")
	t.Logf("agent peak RSS after the probes: %d KiB; a file in a root-only directory: %s", hwm, e2e.LineWith(inPrivate, "job failed"))
	if hwm > 200<<10 {
		t.Errorf("the agent's peak RSS grew to %d KiB", hwm)
	}
}

// statusKiB reads a "kB" field of /proc/PID/status.
func statusKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
