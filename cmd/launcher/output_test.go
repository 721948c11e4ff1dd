package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gangway-hpc/gangway/cmd/internal/e2e"
)

// TestOutputFlood: 8 ranks each print 100000 100-byte lines on stdout and
// every tenth on stderr, as fast as they can. Every line must reach the
// console whole, tagged with its own rank, exactly once, on its stream.
func TestOutputFlood(t *testing.T) {
	const ranks, n = 8, 100000
	l := startLauncher(t, false, fake(t, ranks, "flood:"+strconv.Itoa(n))...)
	assertCode(t, l, 0)
	elapsed := l.stopped.Sub(l.start)
	checkFlood(t, "stdout", l.stdout(), rankTag, ranks, n, 1)
	checkFlood(t, "stderr", l.stderr(), rankTag, ranks, n, 10)
	total := ranks*n + ranks*n/10
	t.Logf("flood: %d ranks x %d stdout lines (+%d stderr lines each), %d lines, %d MB in %v: %.0f lines/s",
		ranks, n, n/10, total, total*104>>20, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds())
}

// rankTag splits "[R] payload".
func rankTag(line string) (int, string, bool) {
	rest, ok := strings.CutPrefix(line, "[")
	if !ok {
		return 0, "", false
	}
	num, payload, ok := strings.Cut(rest, "] ")
	if !ok {
		return 0, "", false
	}
	r, err := strconv.Atoi(num)
	return r, payload, err == nil
}

// mpirunTag splits "[1,R]<stream>:payload".
func mpirunTag(stream string) func(string) (int, string, bool) {
	return func(line string) (int, string, bool) {
		rest, ok := strings.CutPrefix(line, "[1,")
		if !ok {
			return 0, "", false
		}
		num, payload, ok := strings.Cut(rest, "]<"+stream+">:")
		if !ok {
			return 0, "", false
		}
		r, err := strconv.Atoi(num)
		return r, payload, err == nil
	}
}

// floodLine is the line proctest's flood mode prints (without newline).
func floodLine(r, i int) string {
	line := fmt.Sprintf("r%d i%d ", r, i)
	return line + strings.Repeat("x", 99-len(line))
}

// floodText is the raw text of one rank's stream: lines i%every == 0.
func floodText(r, n, every int) string {
	var b strings.Builder
	for i := 0; i < n; i += every {
		b.WriteString(floodLine(r, i))
		b.WriteByte('\n')
	}
	return b.String()
}

// checkFlood checks that out holds, for every rank, exactly the flood
// lines i (0 <= i < n, i%every == 0), each once and tagged with its rank.
func checkFlood(t *testing.T, name, out string, tag func(string) (int, string, bool), ranks, n, every int) {
	t.Helper()
	if out != "" && !strings.HasSuffix(out, "\n") {
		t.Errorf("%s does not end with a newline: %q", name, e2e.Tail(out, 120))
	}
	seen := make([][]bool, ranks)
	for r := range seen {
		seen[r] = make([]bool, n)
	}
	count := make([]int, ranks)
	bad := 0
	badLine := func(line, why string) {
		if bad++; bad <= 5 {
			t.Errorf("%s: %s: %q", name, why, e2e.Tail(line, 300))
		}
	}
	for _, line := range lines(out) {
		r, payload, ok := tag(line)
		if !ok || r < 0 || r >= ranks {
			badLine(line, "untagged line")
			continue
		}
		idx, ok := parseFlood(payload, r)
		switch {
		case !ok:
			badLine(line, "damaged line")
		case idx >= n || idx%every != 0:
			badLine(line, "unexpected index")
		case seen[r][idx]:
			badLine(line, "duplicate line")
		default:
			seen[r][idx] = true
			count[r]++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d bad lines in all", name, bad)
	}
	want := (n + every - 1) / every
	for r, c := range count {
		if c != want {
			t.Errorf("%s: rank %d: %d lines, want %d", name, r, c, want)
		}
	}
}

// parseFlood checks that payload is rank r's flood line and returns its
// index.
func parseFlood(payload string, r int) (int, bool) {
	if len(payload) != 99 {
		return 0, false
	}
	rest, ok := strings.CutPrefix(payload, "r"+strconv.Itoa(r)+" i")
	if !ok {
		return 0, false
	}
	num, pad, ok := strings.Cut(rest, " ")
	if !ok || strings.Trim(pad, "x") != "" {
		return 0, false
	}
	i, err := strconv.Atoi(num)
	return i, err == nil && i >= 0
}

// TestLongLine: a long line, and one of exactly 16 MiB (the longest the
// agent delivers whole), each reach the console as one tagged line and
// the rank's file byte for byte; one byte more is cut once.
func TestLongLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n     int
		lines []int // lengths of the tagged lines before "end"
	}{{200000, []int{200000}}, {16 << 20, []int{16 << 20}}, {16<<20 + 1, []int{16<<20 + 1, 0}}} {
		t.Run(strconv.Itoa(tt.n), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			l := startLauncher(t, false, append([]string{"--output-filename", dir}, fake(t, 1, "longline:"+strconv.Itoa(tt.n))...)...)
			assertCode(t, l, 0)
			var want strings.Builder
			for _, n := range tt.lines {
				want.WriteString("[0] " + strings.Repeat("L", n) + "\n")
			}
			if tt.lines[len(tt.lines)-1] == 0 { // the cut piece was the newline alone
				want.Reset()
				want.WriteString("[0] " + strings.Repeat("L", tt.lines[0]) + "\n[0] \n")
			}
			want.WriteString("[0] end\n")
			if got := l.stdout(); got != want.String() {
				ls := lines(got)
				for i, line := range ls {
					ls[i] = fmt.Sprintf("%d bytes %q", len(line), e2e.Tail(line, 20))
				}
				t.Errorf("stdout is not the tagged line(s) and a terminated \"end\"; got %d lines:\n%s", len(ls), strings.Join(ls, "\n"))
			}
			b, err := os.ReadFile(filepath.Join(dir, "rank.0", "stdout"))
			if want := strings.Repeat("L", tt.n) + "\nend"; err != nil || string(b) != want {
				t.Errorf("rank.0/stdout: %d bytes, %v; want exactly the %d bytes the rank wrote", len(b), err, len(want))
			}
		})
	}
}

// TestOutputFiles: --output-filename keeps every rank's raw output in
// DIR/rank.R/{stdout,stderr}; --output-from only filters the console.
func TestOutputFiles(t *testing.T) {
	t.Parallel()
	const ranks, n = 2, 1000
	for _, from := range []string{"", "1"} {
		t.Run("from="+from, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "out")
			opts := []string{"--output-filename", dir}
			if from != "" {
				opts = append(opts, "--output-from", from)
			}
			l := startLauncher(t, false, fake(t, ranks, "flood:"+strconv.Itoa(n), opts...)...)
			assertCode(t, l, 0)
			for r := range ranks {
				for _, f := range []struct {
					stream string
					every  int
				}{{"stdout", 1}, {"stderr", 10}} {
					b, err := os.ReadFile(filepath.Join(dir, "rank."+strconv.Itoa(r), f.stream))
					if err != nil {
						t.Error(err)
						continue
					}
					if string(b) != floodText(r, n, f.every) {
						t.Errorf("rank.%d/%s: %d bytes, not the raw %d lines (starts %q)", r, f.stream, len(b), n/f.every, e2e.Tail(string(b[:min(len(b), 120)]), 120))
					}
				}
			}
			if from == "" {
				checkFlood(t, "stdout", l.stdout(), rankTag, ranks, n, 1)
				checkFlood(t, "stderr", l.stderr(), rankTag, ranks, n, 10)
				return
			}
			if got, want := l.stdout(), prefixLines("[1] ", floodText(1, n, 1)); got != want {
				t.Errorf("console stdout with --output-from 1 is not exactly rank 1's tagged lines (%d bytes, want %d): %s", len(got), len(want), firstDiff(got, want))
			}
			if got, want := l.stderr(), prefixLines("[1] ", floodText(1, n, 10)); got != want {
				t.Errorf("console stderr with --output-from 1 is not exactly rank 1's tagged lines (%d bytes, want %d): %s", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// firstDiff names the first line where got and want differ, for a
// failure's message.
func firstDiff(got, want string) string {
	g, w := lines(got), lines(want)
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d is %q, want %q", i+1, e2e.Tail(gl, 200), e2e.Tail(wl, 200))
		}
	}
	return "same lines, different line ends"
}

func prefixLines(prefix, text string) string {
	var b strings.Builder
	for _, line := range lines(text) {
		b.WriteString(prefix)
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestTagOutput(t *testing.T) {
	t.Parallel()
	const ranks, n = 3, 200
	l := startLauncher(t, false, fake(t, ranks, "flood:"+strconv.Itoa(n), "--tag-output")...)
	assertCode(t, l, 0)
	checkFlood(t, "stdout", l.stdout(), mpirunTag("stdout"), ranks, n, 1)
	checkFlood(t, "stderr", l.stderr(), mpirunTag("stderr"), ranks, n, 10)
	if out := l.stdout(); !strings.HasPrefix(out, "[1,") || !strings.Contains(out, "[1,2]<stdout>:r2 i0 xxx") {
		t.Errorf("stdout lacks mpirun tags: %q", e2e.Tail(out, 200))
	}
}

// noTag reads the rank from an untagged flood line's own payload
// ("r<R> i<N> xxx..."), which checkFlood then checks whole.
func noTag(line string) (int, string, bool) {
	num, _, ok := strings.Cut(strings.TrimPrefix(line, "r"), " ")
	r, err := strconv.Atoi(num)
	return r, line, ok && err == nil && strings.HasPrefix(line, "r")
}

// TestOutputFloodUntagged: untagged (the default into a file, and --tags
// none), 8 flooding ranks' lines still reach the console whole, exactly
// once each, never two ranks' bytes in one line.
func TestOutputFloodUntagged(t *testing.T) {
	t.Parallel()
	const ranks, n = 8, 20000
	for _, tags := range []string{"auto", "none"} {
		t.Run(tags, func(t *testing.T) {
			t.Parallel()
			l := startLauncher(t, false, fake(t, ranks, "flood:"+strconv.Itoa(n), "--tags", tags)...)
			assertCode(t, l, 0)
			checkFlood(t, "stdout", l.stdout(), noTag, ranks, n, 1)
			checkFlood(t, "stderr", l.stderr(), noTag, ranks, n, 10)
		})
	}
}

// openPTY returns a pseudo-terminal pair: what is written to slave can be
// read from master.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// TestTagsByDefault: with no tag flag the launcher tags [R] on a terminal
// and nothing into a file; explicit flags win either way.
func TestTagsByDefault(t *testing.T) {
	t.Parallel()
	script := []string{"sh", "-c", `echo "hello from $RANK"; echo "err from $RANK" >&2`}
	tagged := []string{"[0] hello from 0", "[1] hello from 1"}
	plain := []string{"hello from 0", "hello from 1"}
	for _, tc := range []struct {
		name     string
		terminal bool
		flags    []string
		want     []string
		wantErr  []string
	}{
		{"terminal", true, nil, tagged, []string{"[0] err from 0", "[1] err from 1"}},
		{"terminal --tags none", true, []string{"--tags", "none"}, plain, []string{"err from 0", "err from 1"}},
		{"terminal --tag-output", true, []string{"--tag-output"}, []string{"[1,0]<stdout>:hello from 0", "[1,1]<stdout>:hello from 1"}, []string{"[1,0]<stderr>:err from 0", "[1,1]<stderr>:err from 1"}},
		{"file", false, nil, plain, []string{"err from 0", "err from 1"}},
		{"file -l", false, []string{"-l"}, tagged, []string{"[0] err from 0", "[1] err from 1"}},
		{"file -prepend-rank", false, []string{"-prepend-rank"}, tagged, []string{"[0] err from 0", "[1] err from 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			errPath := filepath.Join(dir, "stderr")
			stderr, err := os.Create(errPath)
			if err != nil {
				t.Fatal(err)
			}
			defer stderr.Close()
			cmd := exec.CommandContext(t.Context(), self(t), append(append([]string{"-np", "2"}, tc.flags...), script...)...)
			cmd.Env = append(os.Environ(), launcherEnv+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
			cmd.Stderr = stderr
			cmd.WaitDelay = deadline
			var out bytes.Buffer
			var copied chan struct{}
			if tc.terminal {
				master, slave := openPTY(t)
				cmd.Stdout = slave
				copied = make(chan struct{})
				go func() { // ends at EIO, once the launcher (the last writer) is gone
					defer close(copied)
					_, _ = io.Copy(&out, master)
				}()
				defer slave.Close()
			} else {
				cmd.Stdout = &out
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if f, ok := cmd.Stdout.(*os.File); ok {
				f.Close() // the launcher holds the terminal now
			}
			err = cmd.Wait()
			if copied != nil {
				select {
				case <-copied:
				case <-time.After(deadline):
					t.Fatal("terminal output did not end")
				}
			}
			if err != nil {
				t.Fatalf("launcher: %v", err)
			}
			got := lines(strings.ReplaceAll(out.String(), "\r\n", "\n")) // the terminal writes \r\n
			slices.Sort(got)
			errb, _ := os.ReadFile(errPath)
			gotErr := withoutLogRecords(lines(string(errb)))
			slices.Sort(gotErr)
			if !slices.Equal(got, tc.want) || !slices.Equal(gotErr, tc.wantErr) {
				t.Errorf("stdout %q, stderr %q; want %q, %q", got, gotErr, tc.want, tc.wantErr)
			}
		})
	}
}

// logRecord is a line of the launcher's own log (zap's console format:
// time, level, logger), as its local agent writes one when it removes
// the job cgroups of an agent that died (another test's, SIGKILLed):
// not a rank's output.
var logRecord = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\S+\t(DEBUG|INFO|WARN|ERROR)\t`)

// withoutLogRecords is ls without the launcher's log records.
func withoutLogRecords(ls []string) []string {
	return slices.DeleteFunc(ls, logRecord.MatchString)
}

func TestWithoutLogRecords(t *testing.T) {
	got := withoutLogRecords([]string{
		"2026-11-27T12:07:40.536Z\tWARN\tagent\tremoved the job cgroups of agents that died\t{\"cgroups\": [\"/sys/fs/cgroup/unified/gangway-29861-2-1b21f8896d89\"]}",
		"[0] err from 0",
		"2026-11-27 WARN a rank's own line",
		"err from 1",
	})
	if want := []string{"[0] err from 0", "2026-11-27 WARN a rank's own line", "err from 1"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
