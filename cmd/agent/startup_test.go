package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/sshd"
)

// runCapturing runs the agent's run with args and returns its exit code
// and what it wrote to stderr (its log included). Not for parallel
// tests: it swaps os.Stderr.
func runCapturing(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	got := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); got <- b }()
	code := run(t.Context(), args)
	os.Stderr = stderr
	w.Close()
	return code, string(<-got)
}

// TestStartupRefusals: the agent will not start with a host key others
// may read, a host certificate that is not the host key's, a
// --permit-root-login it does not know, or limits it cannot apply, and
// says why.
func TestStartupRefusals(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "host_key")
	if _, err := sshd.LoadHostKey(key); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other_key")
	if _, err := sshd.LoadHostKey(other); err != nil {
		t.Fatal(err)
	}
	base := []string{"--listen", "127.0.0.1:0", "--authorized-keys", filepath.Join(dir, "authorized_keys")}
	for _, tc := range []struct {
		name  string
		args  []string
		setup func()
		code  int
		want  []string
	}{
		{"readable host key", []string{"--host-key", key}, func() { _ = os.Chmod(key, 0o644) }, 1,
			[]string{"host key is accessible by group or others", key, "0644", "chmod 600"}},
		{"host certificate file is a plain key", []string{"--host-key", key, "--host-cert", other + ".pub"}, func() { _ = os.Chmod(key, 0o600) }, 1,
			[]string{"host certificate", "not a certificate"}},
		{"permit-root-login", []string{"--host-key", key, "--permit-root-login", "sometimes"}, func() {}, 2,
			[]string{`permit-root-login "sometimes": want yes, prohibit-password or no`}},
		{"max-startups full below start", []string{"--host-key", key, "--max-startups", "10:30:5"}, func() {}, 2,
			[]string{`-max-startups: "10:30:5": full must be at least start`}},
		{"max-startups-per-source of two numbers", []string{"--host-key", key, "--max-startups-per-source", "10:30"}, func() {}, 2,
			[]string{`"10:30": want N or start:rate:full`}},
		{"max-user-jobs 0", []string{"--host-key", key, "--max-user-jobs", "0"}, func() {}, 2,
			[]string{"--max-user-jobs 0: must be at least 1"}},
		{"start-job-timeout 0", []string{"--host-key", key, "--start-job-timeout", "0s"}, func() {}, 2,
			[]string{"--start-job-timeout 0s: must be more than 0"}},
	} {
		tc.setup()
		code, stderr := runCapturing(t, append(base, tc.args...)...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", tc.name, code, tc.code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", tc.name, w, stderr)
			}
		}
	}
}

// TestOperatorListen: in an mpi-operator worker pod without --listen, the
// agent serves on the Port of the image's sshd_config; --listen, another
// role, or no Port keep the default.
func TestOperatorListen(t *testing.T) {
	dir := t.TempDir()
	withPort := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(withPort, []byte("Port 2222\nPermitRootLogin yes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	without := filepath.Join(dir, "plain")
	if err := os.WriteFile(without, []byte("#Port 22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		given      bool
		role, path string
		addr, from string
	}{
		{"worker pod", false, "worker", withPort, ":2222", withPort},
		{"--listen given", true, "worker", withPort, "", ""},
		{"launcher pod", false, "launcher", withPort, "", ""},
		{"no operator", false, "", withPort, "", ""},
		{"no Port set", false, "worker", without, "", ""},
		{"no file", false, "worker", filepath.Join(dir, "missing"), "", ""},
	} {
		addr, from := operatorListen(tc.given, tc.role, tc.path)
		if addr != tc.addr || from != tc.from {
			t.Errorf("%s: %q from %q, want %q from %q", tc.name, addr, from, tc.addr, tc.from)
		}
	}
}
