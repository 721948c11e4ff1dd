package roottest

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
)

const helperEnv = "GANGWAY_ROOTTEST_HELPER"

// TestHelperRequireRoot is run by TestRequireRoot as an unprivileged user.
func TestHelperRequireRoot(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper for TestRequireRoot")
	}
	RequireRoot(t)
	t.Log("RequireRoot returned")
}

func TestRequireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("drops privileges to test the non-root case, so needs root")
	}
	if testbed.Usable() == nil {
		ok := t.Run("root", func(t *testing.T) { RequireRoot(t) })
		if !ok {
			t.Fatal("RequireRoot failed as root")
		}
	}
	// Copy the test binary somewhere user nobody can execute it.
	dir, err := os.MkdirTemp("", "roottest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	exe := filepath.Join(dir, "roottest.test")
	if err := copyFile(exe, must(os.Executable())); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		require  string
		wantCode int
		want     string
	}{
		{"", 0, "--- SKIP: TestHelperRequireRoot"},
		{"1", 1, "--- FAIL: TestHelperRequireRoot"},
	} {
		cmd := exec.Command(exe, "-test.run=^TestHelperRequireRoot$", "-test.v")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", helperEnv + "=1", EnvRequire + "=" + tc.require}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		s := string(out)
		if code != tc.wantCode || !strings.Contains(s, tc.want) ||
			!strings.Contains(s, "needs root to create network namespaces") || strings.Contains(s, "RequireRoot returned") {
			t.Errorf("%s=%q as nobody: exit %d, output:\n%s\nwant exit %d and %q", EnvRequire, tc.require, code, s, tc.wantCode, tc.want)
		}
	}
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
