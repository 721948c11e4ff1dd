package engine

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
)

// TestRankFilesExact: per-rank files hold exactly the bytes of the frames,
// a final line without a newline included, while the console gets whole
// tagged lines.
func TestRankFilesExact(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	c := newConsole(cli.Output{Dir: dir, Tags: plan.TagRank}, 1, &out, &errb, nil, nil)
	var sc scratch
	c.write(&sc, 0, wire.Stdout, []byte("a\nb\n"))
	c.write(&sc, 0, wire.Stdout, []byte("no newline"))
	c.write(&sc, 0, wire.Stderr, []byte("e\n"))
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"stdout": "a\nb\nno newline", "stderr": "e\n"} {
		b, err := os.ReadFile(filepath.Join(dir, "rank.0", name))
		if err != nil || string(b) != want {
			t.Errorf("rank.0/%s = %q, %v; want %q", name, b, err, want)
		}
	}
	if want := "[0] a\n[0] b\n[0] no newline\n"; out.String() != want {
		t.Errorf("console %q, want %q", out.String(), want)
	}
}

// TestRankFilesNoFollow: a symbolic link planted where a rank's file or
// directory goes is not followed; its target keeps its content.
func TestRankFilesNoFollow(t *testing.T) {
	for _, plant := range []string{"rank.0/stdout", "rank.0"} {
		dir := t.TempDir()
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}
		target := victim
		if plant == "rank.0" {
			target = filepath.Dir(victim)
		} else if err := os.Mkdir(filepath.Join(dir, "rank.0"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, plant)); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		c := newConsole(cli.Output{Dir: dir, Tags: plan.TagRank}, 1, &out, &errb, nil, nil)
		var sc scratch
		c.write(&sc, 0, wire.Stdout, []byte("overwritten\n"))
		err := c.close()
		if err == nil {
			t.Errorf("link at %s: no error", plant)
		}
		if b, _ := os.ReadFile(victim); string(b) != "precious" {
			t.Errorf("link at %s: the link's target became %q", plant, b)
		}
		if out.String() != "[0] overwritten\n" {
			t.Errorf("link at %s: console %q; the console must not suffer", plant, out.String())
		}
	}
}

// TestTailBounded: the failure report keeps 10 lines of at most 4 KiB per
// rank, however long the rank's lines are.
func TestTailBounded(t *testing.T) {
	var out, errb bytes.Buffer
	c := newConsole(cli.Output{}, 4, &out, &errb, nil, nil)
	var sc scratch
	long := strings.Repeat("x", 1<<20)
	for range 20 {
		c.write(&sc, 3, wire.Stderr, []byte(long+"\n"))
	}
	c.write(&sc, 3, wire.Stderr, []byte("last\n"))
	tail := c.tail(3)
	if len(tail) != tailLines || tail[len(tail)-1] != "last" {
		t.Fatalf("tail has %d lines, last %.20q", len(tail), tail[len(tail)-1])
	}
	total := 0
	for _, l := range tail {
		total += len(l)
	}
	if total > tailLines*(tailLineBytes+64) {
		t.Errorf("tail holds %d bytes", total)
	}
	if want := "... (1044480 more bytes)"; !strings.HasSuffix(tail[0], want) {
		t.Errorf("a clipped line ends %q, want %q", tail[0][len(tail[0])-30:], want)
	}
}

// lineObserver records what the console hands the throughput collector.
type lineObserver struct {
	mu    sync.Mutex
	lines []string
}

func (o *lineObserver) ObserveLines(rank int, host string, _ time.Time, data []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if len(line) > 0 {
			o.lines = append(o.lines, fmt.Sprintf("%d@%s %s", rank, host, bytes.TrimSuffix(line, []byte("\n"))))
		}
	}
}

// TestConsoleTags: each tag style's console bytes, exact; untagged lines
// are exactly what the rank wrote (a last line without a newline gets
// one). The observer sees the same lines with the same ranks whatever the
// style: the collector attributes a line by its frame, not by its tag.
func TestConsoleTags(t *testing.T) {
	frames := []struct {
		rank int
		s    wire.Stream
		data string
	}{
		{0, wire.Stdout, "total images/sec: 10\n"},
		{3, wire.Stdout, " No Errors\n[1] not a tag\n"},
		{3, wire.Stderr, "warn\n"},
		{12, wire.Stdout, "no newline"},
	}
	for _, tc := range []struct {
		tags           plan.TagStyle
		stdout, stderr string
	}{
		{plan.TagNone, "total images/sec: 10\n No Errors\n[1] not a tag\nno newline\n", "warn\n"},
		{plan.TagAuto, "total images/sec: 10\n No Errors\n[1] not a tag\nno newline\n", "warn\n"}, // a buffer is no terminal
		{plan.TagRank, "[0] total images/sec: 10\n[3]  No Errors\n[3] [1] not a tag\n[12] no newline\n", "[3] warn\n"},
		{plan.TagMpirun, "[1,0]<stdout>:total images/sec: 10\n[1,3]<stdout>: No Errors\n[1,3]<stdout>:[1] not a tag\n[1,12]<stdout>:no newline\n", "[1,3]<stderr>:warn\n"},
	} {
		t.Run(tc.tags.String(), func(t *testing.T) {
			var out, errb bytes.Buffer
			obs := &lineObserver{}
			c := newConsole(cli.Output{Tags: tc.tags}, 13, &out, &errb, func(r int) string { return "h" + strconv.Itoa(r%2) }, obs)
			var sc scratch
			for _, f := range frames {
				c.write(&sc, f.rank, f.s, []byte(f.data))
			}
			if out.String() != tc.stdout || errb.String() != tc.stderr {
				t.Errorf("stdout %q, stderr %q; want %q, %q", out.String(), errb.String(), tc.stdout, tc.stderr)
			}
			want := []string{"0@h0 total images/sec: 10", "3@h1  No Errors", "3@h1 [1] not a tag", "3@h1 warn", "12@h0 no newline"}
			if !slices.Equal(obs.lines, want) {
				t.Errorf("observed %q, want %q", obs.lines, want)
			}
		})
	}
}

// TestConsoleProgressBar: a progress bar's states (each ended at the
// carriage return the next one begins with, as the agent sends them)
// keep their tag each, so a terminal redraws "[0] 50%" over "[0] 0%";
// "\r\n" is one line end; untagged, the bytes are the rank's. The
// stderr tail keeps the bar's last state, not every one.
func TestConsoleProgressBar(t *testing.T) {
	frames := []string{"\r", "  0%|\r", " 50%|#\r", "100%|##\n", "crlf\r\nTraceback\n"}
	for _, tc := range []struct {
		tags plan.TagStyle
		want string
	}{
		{plan.TagNone, "\r  0%|\r 50%|#\r100%|##\ncrlf\r\nTraceback\n"},
		{plan.TagRank, "[0] \r[0]   0%|\r[0]  50%|#\r[0] 100%|##\n[0] crlf\r\n[0] Traceback\n"},
	} {
		t.Run(tc.tags.String(), func(t *testing.T) {
			var errb bytes.Buffer
			c := newConsole(cli.Output{Tags: tc.tags}, 1, io.Discard, &errb, nil, nil)
			var sc scratch
			for _, f := range frames {
				c.write(&sc, 0, wire.Stderr, []byte(f))
			}
			if errb.String() != tc.want {
				t.Errorf("stderr %q, want %q", errb.String(), tc.want)
			}
			if tail, want := c.tail(0), []string{"100%|##", "crlf", "Traceback"}; !slices.Equal(tail, want) {
				t.Errorf("tail %q, want %q", tail, want)
			}
		})
	}
}

// TestConsoleUntaggedWholeLines: untagged output of ranks writing at once
// still reaches the console in whole lines, never two ranks' bytes in
// one line.
func TestConsoleUntaggedWholeLines(t *testing.T) {
	var out bytes.Buffer
	c := newConsole(cli.Output{Tags: plan.TagNone}, 8, &out, io.Discard, nil, nil)
	const ranks, frames = 8, 200
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			var sc scratch
			line := strings.Repeat(strconv.Itoa(r), 100) + "\n"
			for range frames {
				c.write(&sc, r, wire.Stdout, []byte(line+line+line))
			}
		})
	}
	wg.Wait()
	n := 0
	for l := range strings.Lines(out.String()) {
		n++
		if len(l) != 101 || strings.Count(l, l[:1]) != 100 {
			t.Fatalf("line %d mixes ranks: %q", n, l)
		}
	}
	if n != ranks*frames*3 {
		t.Errorf("%d lines, want %d", n, ranks*frames*3)
	}
}
