//go:build linux

package proc

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAsUser: as an ordinary user (uid and gid 65534, nobody), a
// root-only 0600 script's #! line is not read, a missing file and one in
// a root-only directory look the same, /dev/zero and a FIFO are no
// programs and are never read, a directory inside a root-only one cannot
// be entered whether or not it exists; and the thread is itself again
// afterwards.
func TestAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv(requireRootEnv) == "1" {
			t.Fatal("needs root")
		}
		t.Skip("needs root")
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{65534}}
	open, err := os.MkdirTemp("", "gangway-asuser-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(open)
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(open, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(open, "secret.sh"), filepath.Join(private, "secret.sh")} {
		if err := os.WriteFile(p, []byte("#!/opt/SECRET/python\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(private, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(open, "fifo")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	look := func(cred *syscall.Credential, file string) (err error) {
		_ = AsUser(cred, func() error {
			_, err = lookPath(file, "/usr/bin:/bin", "/tmp")
			return nil
		})
		return err
	}
	if err := look(nil, filepath.Join(open, "secret.sh")); err == nil || !strings.Contains(err.Error(), "/opt/SECRET/python") {
		t.Errorf("as root the #! line is named (%v)", err)
	}
	if err := look(nobody, filepath.Join(open, "secret.sh")); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("as nobody: %v, want an error without the #! line", err)
	}
	inPrivate, missing := look(nobody, filepath.Join(private, "secret.sh")), look(nobody, filepath.Join(private, "nothing"))
	if inPrivate == nil || missing == nil || strings.ReplaceAll(inPrivate.Error(), "secret.sh", "X") != strings.ReplaceAll(missing.Error(), "nothing", "X") {
		t.Errorf("as nobody, a file in a root-only directory (%v) and a missing one (%v) differ", inPrivate, missing)
	}
	for _, p := range []string{"/dev/zero", fifo} {
		if err := look(nobody, p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v, want not a regular file", p, err)
		}
	}
	if interpreter(fifo) != "" || interpreter("/dev/zero") != "" {
		t.Error("interpreter read a FIFO or a device")
	}
	for _, d := range []string{filepath.Join(private, "dir"), filepath.Join(private, "none")} {
		if err := Enterable(nobody, d); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("nobody enters %s: %v, want permission denied", d, err)
		}
	}
	if err := Enterable(nil, filepath.Join(private, "dir")); err != nil {
		t.Errorf("root enters %s: %v", private, err)
	}
	if err := Enterable(nil, filepath.Join(open, "secret.sh")); err == nil {
		t.Error("a file was enterable")
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = AsUser(nobody, func() error {
		if u, _ := unix.SetfsuidRetUid(-1); u != 65534 {
			t.Errorf("inside: fsuid %d", u)
		}
		return nil
	})
	if u, _ := unix.SetfsuidRetUid(-1); u != 0 {
		t.Errorf("after: this thread's fsuid is %d, want 0", u)
	}
	if g, _ := unix.Getgroups(); len(g) > 0 && g[0] == 65534 {
		t.Errorf("after: this thread's groups are %v", g)
	}
}
