package agenttest

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
)

// EnvRequireRoot, set to "1" (CI does), turns RequireRoot's skip into a
// failure.
const EnvRequireRoot = "GANGWAY_REQUIRE_ROOT_TESTS"

// RequireRoot skips the test unless it runs as root with useradd and
// userdel at hand (tests that create users and serve them from a root
// agent); with GANGWAY_REQUIRE_ROOT_TESTS=1 it fails the test instead,
// so that a skip cannot hide a broken setup.
func RequireRoot(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root to create test users and run sessions as them"
	} else {
		for _, tool := range []string{"useradd", "userdel"} {
			if _, err := exec.LookPath(tool); err != nil {
				why = "needs " + tool + " (package passwd): " + err.Error()
			}
		}
	}
	if why == "" {
		return
	}
	if os.Getenv(EnvRequireRoot) == "1" {
		t.Fatalf("%s; failing instead of skipping because %s=1", why, EnvRequireRoot)
	}
	t.Skipf("%s; run as root (set %s=1 to make this skip a failure)", why, EnvRequireRoot)
}

// User is a local account a test created; it is removed, home and all,
// at the test's cleanup.
type User struct {
	Name     string
	Uid, Gid uint32
	Home     string
}

// userComment marks the accounts NewUser makes, with the test process's
// pid, so that those a killed test process left behind can be removed.
const userComment = "gangway test, pid "

// NewUser creates a local user gwtestuserNNNNNN with a home directory and
// shell (/bin/bash when empty) through useradd, given extra useradd
// arguments (-G GROUPS), and removes it with userdel -r at cleanup. The
// test must RequireRoot first.
func NewUser(t testing.TB, shell string, extra ...string) *User {
	t.Helper()
	if shell == "" {
		shell = "/bin/bash"
	}
	removeStaleUsers(t)
	var name string
	var err error
	for range 20 {
		n, _ := rand.Int(rand.Reader, big.NewInt(1_000_000))
		name = fmt.Sprintf("gwtestuser%06d", n.Int64())
		if _, lerr := user.Lookup(name); lerr == nil {
			continue // taken
		}
		args := append([]string{"-m", "-s", shell, "-c", userComment + strconv.Itoa(os.Getpid())}, extra...)
		err = shadowTool("useradd", append(args, name)...)
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("agenttest: %v", err)
	}
	t.Cleanup(func() { removeUser(t, name) })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("agenttest: created user %s, but: %v", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &User{Name: name, Uid: uint32(uid), Gid: uint32(gid), Home: u.HomeDir}
}

// shadowTool runs useradd or userdel, retrying while another process
// holds the lock on /etc/passwd (exit status 10 or 1 with "lock").
func shadowTool(tool string, args ...string) error {
	var out []byte
	var err error
	for range 50 {
		out, err = exec.Command(tool, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "lock") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeUser deletes a user NewUser made and its home.
func removeUser(t testing.TB, name string) {
	if err := shadowTool("userdel", "-r", name); err != nil {
		// A process of the user still running (a test that failed before
		// ending it) makes userdel refuse; -f removes the account anyway.
		t.Logf("agenttest: %v; retrying with -f", err)
		if err := shadowTool("userdel", "-r", "-f", name); err != nil {
			t.Errorf("agenttest: %v", err)
		}
	}
}

// removeStaleUsers removes the accounts of NewUser whose test process is
// gone (killed before its cleanup ran).
func removeStaleUsers(t testing.TB) {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return
	}
	var stale []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Split(sc.Text(), ":")
		if len(p) < 5 || !strings.HasPrefix(p[0], "gwtestuser") || !strings.HasPrefix(p[4], userComment) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(p[4], userComment))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			stale = append(stale, p[0])
		}
	}
	f.Close()
	for _, name := range stale {
		t.Logf("agenttest: removing user %s left by an earlier test process", name)
		_ = shadowTool("userdel", "-r", "-f", name)
	}
}

// Authorize writes keys as the user's ~/.ssh/authorized_keys, with the
// ownership and modes sshd expects (the directory 0700, the file 0600,
// both the user's).
func (u *User) Authorize(t testing.TB, keys ...ssh.PublicKey) string {
	t.Helper()
	dir := filepath.Join(u.Home, ".ssh")
	path := filepath.Join(dir, "authorized_keys")
	var b strings.Builder
	for _, k := range keys {
		b.Write(ssh.MarshalAuthorizedKey(k))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, path} {
		if err := os.Chown(p, int(u.Uid), int(u.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// NewKeys makes a client key pair and authorises it in ~u/.ssh.
func (u *User) NewKeys(t testing.TB) sshtest.Keys {
	t.Helper()
	k, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	u.Authorize(t, k.ClientSigner.PublicKey())
	return k
}

// SSHKeygen runs ssh-keygen with args (to sign certificates, say) and
// fails the test with its output on error.
func SSHKeygen(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command("ssh-keygen", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
