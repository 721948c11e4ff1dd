package proc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartErrorsSayWhatToDo starts real files that cannot run, directly
// and under a supervisor, and checks each message names the problem and
// the fix, the exit code bash would give, and no Go internals.
func TestStartErrorsSayWhatToDo(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("noexec.sh", "#!/bin/sh\necho hi\n", 0o644)
	write("badinterp.sh", "#!/no/such/interp -u\necho hi\n", 0o755)
	write("beside", "#!/bin/sh\necho beside-ran\n", 0o755)
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv0 string
		code  int // 0: starts
		want  []string
	}{
		{"gw-no-such-prog", 127, []string{"gw-no-such-prog: program not found in PATH or the working directory " + dir, "(PATH=/usr/bin:/bin)"}},
		{"./gw-no-such-prog", 127, []string{"./gw-no-such-prog: program not found (" + dir + "/gw-no-such-prog)"}},
		{"./noexec.sh", 126, []string{"./noexec.sh: not executable", "chmod +x ./noexec.sh", "or run /bin/sh ./noexec.sh"}},
		{"noexec.sh", 126, []string{"noexec.sh: not executable", "chmod +x noexec.sh"}},
		{"./adir", 126, []string{"./adir: is a directory"}},
		{"./badinterp.sh", 127, []string{"./badinterp.sh: its interpreter /no/such/interp (the script's #! line) does not exist"}},
		{"beside", 0, nil}, // in the working directory, as mpirun finds it
	} {
		bothWays(t, func(t *testing.T, sup string) {
			spec := Spec{Argv: []string{tc.argv0}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir, Supervisor: sup}
			p, err := Start(t.Context(), spec, newCapture().sink)
			code := 0
			if err != nil {
				r := StartResult(0, err)
				code, err = r.Code, r.Err
			} else {
				r := p.Wait()
				code, err = r.Code, r.Err
			}
			if code != tc.code {
				t.Errorf("%s: code %d (%v), want %d", tc.argv0, code, err, tc.code)
			}
			if tc.code == 0 {
				return
			}
			if err == nil {
				t.Fatalf("%s: no error", tc.argv0)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s: %q lacks %q", tc.argv0, msg, w)
				}
			}
			if strings.Contains(msg, "fork/exec") || strings.Contains(msg, "permission denied: permission denied") {
				t.Errorf("%s: Go internals or a repeat in %q", tc.argv0, msg)
			}
			if tc.code == 127 && sup == "" && !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: %v is not ErrNotFound", tc.argv0, err)
			}
		})
	}
}

func TestInterpreter(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{"#!/bin/sh\n", "/bin/sh"},
		{"#! /usr/bin/env python3\n", "/usr/bin/env"},
		{"#!/x/y -u -v", "/x/y"},
		{"#!\n", ""},
		{"echo hi\n", ""},
		{"", ""},
	} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := interpreter(p); got != tc.want {
			t.Errorf("interpreter(%q) = %q, want %q", tc.body, got, tc.want)
		}
	}
	if got := interpreter(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("missing file: %q", got)
	}
}
