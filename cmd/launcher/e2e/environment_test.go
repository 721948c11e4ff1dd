package e2e_test

import (
	"bufio"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
	"github.com/gangway-hpc/gangway/launcher/rankenv"
)

// realUserEnv is a copy of a real user's environment on a workstation,
// logged in over SSH with agent forwarding and X11, a virtualenv inside a
// conda base, CUDA libraries: what a job is tested with before it runs
// on several nodes. The 2000 V* variables and a 120 KiB value make it a
// big environment (the start message carries it once per rank).
func realUserEnv() []string {
	env := []string{
		"PATH=/home/ana/.local/bin:/home/ana/proj/.venv/bin:/home/ana/miniconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"VIRTUAL_ENV=/home/ana/proj/.venv", "CONDA_PREFIX=/home/ana/miniconda3", "CONDA_DEFAULT_ENV=base", "CONDA_SHLVL=1",
		"LD_LIBRARY_PATH=/usr/local/cuda/lib64:/home/ana/miniconda3/lib", "PYTHONPATH=/home/ana/proj/src",
		"NCCL_DEBUG=INFO", "MYVAR=x", "OMP_NUM_THREADS=8", "LANG=en_US.UTF-8", "TERM=xterm-256color",
		"WANDB_API_KEY=k=v", "MULTILINE=one\ntwo",
		"HOME=/home/ana", "USER=ana", "LOGNAME=ana", "SHELL=/bin/zsh", "HOSTNAME=ws17", "PWD=/home/ana/proj", "SHLVL=2",
		"SSH_CONNECTION=10.1.2.3 51234 10.1.2.17 22", "SSH_CLIENT=10.1.2.3 51234 22", "SSH_AUTH_SOCK=/tmp/ssh-XXXX/agent.4242",
		"SSH_TTY=/dev/pts/3", "DISPLAY=localhost:10.0", "XDG_RUNTIME_DIR=/run/user/1000",
		"BIGV=" + strings.Repeat("b", 120<<10),
	}
	for i := range 2000 {
		env = append(env, "V"+strconv.Itoa(i)+"="+strings.Repeat("v", 50))
	}
	return env
}

// mustNotTravel are names of realUserEnv that ranks on other hosts must
// not see with the launcher's value.
var mustNotTravel = []string{"HOSTNAME", "PWD", "SHLVL", "SSH_CONNECTION", "SSH_CLIENT", "SSH_AUTH_SOCK", "SSH_TTY", "DISPLAY", "XDG_RUNTIME_DIR", "HOME", "SHELL", "USER", "LOGNAME"}

// agentEnv is what a daemon's environment looks like (systemd's).
var agentEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C"}

// dumpEnv is the rank program: it writes the rank's whole environment,
// NUL-separated, to DIR/RANK.
func dumpEnv(dir string) []string {
	return []string{"/bin/sh", "-c", `exec /usr/bin/env -0 > "$0/$RANK"`, dir}
}

// runEnvJob runs bin/launcher with exactly env (env -i) and args, and
// returns each rank's environment as dumpEnv wrote it.
func runEnvJob(t *testing.T, launcherBin string, env []string, np int, args ...string) []map[string]string {
	t.Helper()
	dir := t.TempDir()
	argv := append(append(append([]string{"-i"}, env...), launcherBin), args...)
	argv = append(append(argv, "-np", strconv.Itoa(np)), dumpEnv(dir)...)
	l := e2e.StartProc(t, nil, "env", argv...)
	if code := l.Wait(t); code != 0 {
		t.Fatalf("launcher %q exit %d\nstderr:\n%s", args, code, e2e.Tail(l.Stderr.String(), 2000))
	}
	out := make([]map[string]string, np)
	for r := range np {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(r)))
		if err != nil {
			t.Fatal(err)
		}
		out[r] = map[string]string{}
		for _, kv := range strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00") {
			k, v, _ := strings.Cut(kv, "=")
			out[r][k] = v
		}
	}
	return out
}

// rankSources is --dry-run's account of one rank's environment: each
// variable's source, and the names its "# nccl:" and "# agent adds:"
// lines give.
type rankSources struct {
	src  map[string]string
	adds []string
}

// dryRunSources is --dry-run's account of every rank's environment, by
// rank: one run, which prints them all.
func dryRunSources(t *testing.T, launcherBin string, env []string, np int, args ...string) []rankSources {
	t.Helper()
	argv := append(append(append([]string{"-i"}, env...), launcherBin, "--dry-run", "-np", strconv.Itoa(np)), args...)
	l := e2e.StartProc(t, nil, "env", append(argv, dumpEnv("/nonexistent")...)...)
	if code := l.Wait(t); code != 0 {
		t.Fatalf("--dry-run exit %d: %s", code, l.Stderr)
	}
	out := make([]rankSources, np)
	var cur *rankSources // the rank whose section this is, nil outside one
	source := ""
	sc := bufio.NewScanner(strings.NewReader(l.Stdout.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# environment rank "):
			cur = nil
			f := strings.Fields(strings.TrimPrefix(line, "# environment rank "))
			if len(f) == 0 {
				break
			}
			r, err := strconv.Atoi(f[0])
			if err != nil || r < 0 || r >= np {
				t.Fatalf("--dry-run: %q: not a rank of %d", line, np)
			}
			if out[r].src != nil {
				t.Fatalf("--dry-run: rank %d's environment twice", r)
			}
			out[r] = rankSources{src: map[string]string{}, adds: []string{}}
			cur, source = &out[r], ""
		case cur == nil:
		case strings.HasPrefix(line, "# source: "):
			source = strings.TrimPrefix(line, "# source: ")
		case strings.HasPrefix(line, "# nccl: "), strings.HasPrefix(line, "# agent adds: "):
			for _, w := range strings.FieldsFunc(line, func(c rune) bool { return c == ' ' || c == ',' || c == ':' || c == '(' || c == ')' }) {
				if w == strings.ToUpper(w) && strings.ContainsAny(w, "_") || w == "HOME" || w == "USER" || w == "SHELL" || w == "LOGNAME" {
					cur.adds = append(cur.adds, w)
				}
			}
		case !strings.HasPrefix(line, "#"):
			k, _, _ := strings.Cut(line, "=")
			cur.src[k] = source
		}
	}
	for r := range out {
		if out[r].src == nil {
			t.Fatalf("--dry-run printed no environment for rank %d of %d", r, np)
		}
	}
	return out
}

// TestSameEnvironmentLocalAndRemote runs the same job, with a real user's
// environment, on this machine (the in-process agent) and through two
// agent processes whose own environment is a daemon's, 8 ranks on each:
// every rank gets the same environment both ways apart from what
// --dry-run says is the launcher's per placement (source launcher,
// nccl), what the agent adds, and the documented host-specific names.
func TestSameEnvironmentLocalAndRemote(t *testing.T) {
	launcherBin, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 2, agentBin, e2e.Wrapped(append([]string{"env", "-i"}, agentEnv...)...))
	user := realUserEnv()
	remoteArgs := append(c.SSHFlags(), "-H", c.HostList(perHost))
	np := 2 * perHost
	local := runEnvJob(t, launcherBin, user, np)
	remote := runEnvJob(t, launcherBin, user, np, remoteArgs...)
	userMap := map[string]string{}
	for _, kv := range user {
		k, v, _ := strings.Cut(kv, "=")
		userMap[k] = v
	}
	sources := dryRunSources(t, launcherBin, user, np, remoteArgs...)
	for r := range np {
		src, adds := sources[r].src, sources[r].adds
		mayDiffer := func(k string) bool {
			_, home := rankenv.HostSpecific(k)
			return home || src[k] == rankenv.SrcLauncher || src[k] == rankenv.SrcNCCL || slices.Contains(adds, k)
		}
		var differ []string
		for _, k := range slices.Sorted(maps.Keys(union(local[r], remote[r]))) {
			lv, lok := local[r][k]
			rv, rok := remote[r][k]
			if lv == rv && lok == rok {
				continue
			}
			differ = append(differ, k)
			if !mayDiffer(k) {
				t.Errorf("rank %d: %s: here %q (set %v), on an agent %q (set %v)", r, k, clip(lv), lok, clip(rv), rok)
			}
		}
		if r == perHost+1 {
			t.Logf("rank %d: %d variables here, %d on an agent; differing (placement, agent, host-specific): %s", r, len(local[r]), len(remote[r]), strings.Join(differ, " "))
		}
		for _, k := range []string{"PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH", "PYTHONPATH", "NCCL_DEBUG", "MYVAR", "OMP_NUM_THREADS", "MULTILINE", "BIGV", "V1999"} {
			if remote[r][k] != userMap[k] {
				t.Errorf("rank %d on an agent: %s=%q, want the launcher's %q", r, k, clip(remote[r][k]), clip(userMap[k]))
			}
			if src[k] != rankenv.SrcForwarded {
				t.Errorf("rank %d: --dry-run says %s comes from %q, want forwarded", r, k, src[k])
			}
		}
		for _, k := range mustNotTravel {
			if v, ok := remote[r][k]; ok && v == userMap[k] {
				t.Errorf("rank %d on an agent got the launcher's %s=%q", r, k, v)
			}
			if local[r][k] != userMap[k] && k != "PWD" && k != "SHLVL" {
				t.Errorf("rank %d here: %s=%q, want the launcher's own %q (this host's)", r, k, local[r][k], userMap[k])
			}
		}
		if remote[r]["HOME"] != "/root" {
			t.Errorf("rank %d on an agent: HOME=%q, want the login's /root", r, remote[r]["HOME"])
		}
	}
}

// TestForwardingFlagsRemote checks -genvnone, -genvlist, -genv and -x
// against an agent whose environment is a daemon's: what each forwards,
// and that -x and -genv win over forwarded values and each other in
// command-line order.
func TestForwardingFlagsRemote(t *testing.T) {
	e2e.NoTree(t, "one host")
	launcherBin, agentBin := e2e.BuildBinaries(t)
	c := e2e.StartProcs(t, 1, agentBin, e2e.Wrapped(append([]string{"env", "-i"}, agentEnv...)...))
	user := []string{"PATH=/home/ana/.local/bin:/usr/bin:/bin", "MYVAR=x", "NCCL_DEBUG=INFO", "DISPLAY=:0", "HOME=/home/ana"}
	envFile := filepath.Join(t.TempDir(), "job.env")
	if err := os.WriteFile(envFile, []byte("# job\nexport FROMFILE='f v'\nMYVAR=file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := append(c.SSHFlags(), "-H", c.HostList(1))
	for _, tc := range []struct {
		name string
		args []string
		want map[string]string // "" with absent: see gone
		gone []string
	}{
		{"default", nil, map[string]string{"MYVAR": "x", "NCCL_DEBUG": "INFO", "PATH": "/home/ana/.local/bin:/usr/bin:/bin", "HOME": "/root"}, []string{"DISPLAY"}},
		{"-genvnone", []string{"-genvnone", "-x", "NCCL_DEBUG", "-genv", "A", "1"}, map[string]string{"NCCL_DEBUG": "INFO", "A": "1", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, []string{"MYVAR", "DISPLAY"}},
		{"-genvlist", []string{"-genvlist", "MYVAR,DISPLAY"}, map[string]string{"MYVAR": "x", "DISPLAY": ":0", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, []string{"NCCL_DEBUG"}},
		{"--env-file, -x, -genv: later wins", []string{"--env-file", envFile, "-x", "MYVAR=x2", "-genv", "MYVAR", "g", "-genv", "NCCL_DEBUG", "WARN", "-x", "NCCL_DEBUG=TRACE"},
			map[string]string{"MYVAR": "g", "NCCL_DEBUG": "TRACE", "FROMFILE": "f v"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runEnvJob(t, launcherBin, user, 1, append(slices.Clone(base), tc.args...)...)[0]
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s=%q, want %q", k, got[k], v)
				}
			}
			for _, k := range tc.gone {
				if v, ok := got[k]; ok {
					t.Errorf("%s=%q is set, want it absent", k, v)
				}
			}
		})
	}
}

// TestEnvFileTooLong: a value execve cannot pass is refused before any
// host is reached, naming the variable and where it came from.
func TestEnvFileTooLong(t *testing.T) {
	launcherBin, _ := e2e.BuildBinaries(t)
	envFile := filepath.Join(t.TempDir(), "big.env")
	if err := os.WriteFile(envFile, []byte("HUGE="+strings.Repeat("h", 200<<10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := e2e.StartProc(t, nil, "env", "-i", "PATH=/usr/bin:/bin", launcherBin, "--env-file", envFile, "-H", "198.18.255.254:1", "/bin/true")
	if code := l.Wait(t); code != 2 {
		t.Errorf("exit %d, want 2 (usage)", code)
	}
	if want := "launcher: usage: environment variable HUGE (--env-file) is 200.0 KiB; a process's environment takes at most 128.0 KiB per variable (Linux's MAX_ARG_STRLEN)"; !strings.Contains(l.Stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, l.Stderr)
	}
}

func union(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}
