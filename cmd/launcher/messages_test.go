package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// The launcher's messages for a new user's first mistakes, each from a
// real launcher process running real files.

// TestProgramNotFound: a missing program on 4 ranks is one grouped line
// (PATH shown once) and the count of failed ranks, exit code 127.
func TestProgramNotFound(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, "-np", "4", "gangway-no-such-program")
	assertCode(t, l, 127)
	errOut := l.stderr()
	for _, want := range []string{
		"launcher: job failed: ranks 0-3 on localhost: gangway-no-such-program: program not found in PATH or the working directory ",
		"launcher: 4 of 4 ranks failed",
		"launcher: exit code 127",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if n := strings.Count(errOut, "PATH="); n != 1 {
		t.Errorf("PATH shown %d times, want once:\n%s", n, errOut)
	}
	if strings.Contains(errOut, "also failed") {
		t.Errorf("identical failures not grouped:\n%s", errOut)
	}
}

// startErrorCases are files that cannot run, and what the launcher must
// say about each: what is wrong and how to fix it, without Go internals.
func TestStartErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{"noexec.sh": "#!/bin/sh\necho hi\n", "badinterp.sh": "#!/gw/no/such/interpreter\necho hi\n"} {
		mode := os.FileMode(0o755)
		if name == "noexec.sh" {
			mode = 0o644
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		prog string
		code int
		want []string
	}{
		{"./noexec.sh", 126, []string{"ranks 0-1 on localhost: ./noexec.sh: not executable", "fix: chmod +x ./noexec.sh (or run /bin/sh ./noexec.sh)", "(exit code 126)"}},
		{"./badinterp.sh", 127, []string{"ranks 0-1 on localhost: ./badinterp.sh: its interpreter /gw/no/such/interpreter (the script's #! line) does not exist"}},
	} {
		t.Run(tc.prog, func(t *testing.T) {
			t.Parallel()
			l := startLauncher(t, false, "-np", "2", "-wdir", dir, tc.prog)
			assertCode(t, l, tc.code)
			errOut := l.stderr()
			for _, w := range append(tc.want, "2 of 2 ranks failed") {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			for _, bad := range []string{"fork/exec", "permission denied: permission denied", "also failed", "stopped"} {
				if strings.Contains(errOut, bad) {
					t.Errorf("stderr has %q:\n%s", bad, errOut)
				}
			}
		})
	}
}

// TestProgramInWorkingDirectory: a program in the ranks' working directory
// runs without "./", as under Open MPI's mpirun.
func TestProgramInWorkingDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gw-beside"), []byte("#!/bin/sh\necho beside-ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := startLauncher(t, false, "-np", "2", "-wdir", dir, "gw-beside")
	assertCode(t, l, 0)
	if n := strings.Count(l.stdout(), "beside-ran"); n != 2 {
		t.Errorf("%d ranks ran gw-beside, want 2:\n%s", n, l.stdout())
	}
}

// TestExportWarnings: -x of an unset variable and -x of a rank identity
// variable warn, and the job runs (with the launcher's RANK values).
func TestExportWarnings(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, "-np", "2", "-x", "GW_SURELY_UNSET_VAR", "-x", "RANK=99", "/bin/sh", "-c", `echo "rank=$RANK unset=${GW_SURELY_UNSET_VAR-none}"`)
	assertCode(t, l, 0)
	errOut := l.stderr()
	for _, want := range []string{
		"launcher: warning: -x GW_SURELY_UNSET_VAR: not set in the launcher's environment; the ranks do not get it",
		"launcher: warning: -x RANK is ignored: the launcher sets RANK for each rank",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	for _, want := range []string{"rank=0 unset=none", "rank=1 unset=none"} {
		if !strings.Contains(l.stdout(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, l.stdout())
		}
	}
}

// TestVersion: --version and mpirun's -V print the version ("devel" for
// a binary the Makefile did not stamp), the commit, the protocol version
// and the Go version, and exit 0.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--version", "-V"} {
		l := startLauncher(t, false, flag)
		assertCode(t, l, 0)
		got := lines(l.stdout())
		want := []string{"launcher devel", "commit:   ", "protocol: " + strconv.Itoa(wire.Version), "go:       " + runtime.Version()}
		if len(got) != len(want) {
			t.Fatalf("%s printed %q, want 4 lines like %q", flag, got, want)
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Errorf("%s: line %d is %q, want %q...", flag, i+1, got[i], want[i])
			}
		}
	}
}

// TestUnknownFlagSuggests: a misspelt option is a usage error that names
// the option it resembles.
func TestUnknownFlagSuggests(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, "-nq", "2", "true")
	assertCode(t, l, 2)
	if want := "launcher: usage: unknown option -nq: did you mean -np? (see launcher -h)"; !strings.Contains(l.stderr(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, l.stderr())
	}
}

// TestVerboseSaysWhatItChose: -v on a successful run says where the hosts
// came from, how long each took to connect, the placement and the network
// choice.
func TestVerboseSaysWhatItChose(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, "-v", "-np", "2", "true")
	assertCode(t, l, 0)
	errOut := l.stderr()
	for _, want := range []string{
		`hosts	{"source": "local", "n": 1, "hosts": "localhost"}`,
		`connected	{"host": "localhost", "addr": "127.0.0.1", "took": `,
		`placement	{"ranks": 2, "map-by": "slot", "ranks on hosts": "localhost: 0-1"}`,
		`network	{"host": "localhost", "NCCL_SOCKET_IFNAME": "unset (single host: NCCL's own choice)"}`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

// TestNCCLWarning: an NCCL variable given with -x that selects nothing on
// the host is a warning before the ranks start; the job still runs.
func TestNCCLWarning(t *testing.T) {
	t.Parallel()
	l := startLauncher(t, false, "-np", "1", "-x", "NCCL_SOCKET_IFNAME==gw-no-such-nic", "true")
	assertCode(t, l, 0)
	want := `launcher: warning: host localhost: NCCL_SOCKET_IFNAME="=gw-no-such-nic": selects no up interface with an address`
	if errOut := l.stderr(); !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
}
