package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/textx"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/plan"
)

// The failure report keeps each rank's last tailLines stderr lines, each
// cut to tailLineBytes: at most 40 KiB per rank, whatever the rank prints.
const (
	tailLines     = 10
	tailLineBytes = 4 << 10
)

// observer sees every whole line (the bench collector), a frame at a
// time: data is whole lines, each ended by '\n' except perhaps the last.
// It must not block, nor keep data.
type observer interface {
	ObserveLines(rank int, host string, t time.Time, data []byte)
}

// console routes rank output: tagged (or not) to the launcher's
// stdout/stderr (whole lines only, one write per frame, under one lock so
// lines of different ranks never mix), raw to per-rank files, and to the
// observer (which attributes lines by their frame's rank, whatever the
// tags).
type console struct {
	stdout, stderr io.Writer
	tags           plan.TagStyle // resolved: never plan.TagAuto
	timestamp      bool
	from           plan.RankSet
	dir            string
	hostOf         func(rank int) string
	obs            observer

	// last is when each rank last printed (unix nanoseconds; 0 never),
	// for hang detection and the quietest ranks.
	last []atomic.Int64

	mu    sync.Mutex // guards writes to stdout/stderr
	fmu   sync.Mutex // guards files and tails
	files map[fileKey]*os.File
	tails map[int]*ring
	ferr  error
}

type fileKey struct {
	rank int
	s    wire.Stream
}

type ring struct {
	lines    [tailLines]string
	n        int
	progress bool // the last line is a progress bar's state
}

// add keeps l as the newest line. A progress bar's states (progress: l
// ended at a carriage return) replace each other, as on a terminal: the
// tail keeps the bar's last state, not a screenful of them.
func (r *ring) add(l string, progress bool) {
	if progress && l == "" {
		return // the carriage return a bar starts its redraw with
	}
	if r.progress && r.n > 0 {
		r.n-- // the bar's last state gives way, as on a terminal
	}
	r.lines[r.n%tailLines] = l
	r.n++
	r.progress = progress
}

func (r *ring) list() []string {
	var out []string
	start := max(0, r.n-tailLines)
	for i := start; i < r.n; i++ {
		out = append(out, r.lines[i%tailLines])
	}
	return out
}

// scratch is a per-goroutine buffer for building tagged output.
type scratch struct{ buf []byte }

// lines returns data's lines, each after prefix, the last one ended with
// a newline if it has no end. A line ends at a newline, or at a carriage
// return not followed by one: a progress bar's states, each redrawn
// over the last, keep their tag and go on as drawn. Untagged whole lines
// are data itself.
func (sc *scratch) lines(prefix, data []byte) []byte {
	if last := data[len(data)-1]; len(prefix) == 0 && (last == '\n' || last == '\r') {
		return data
	}
	b := sc.buf[:0]
	rest := data
	for len(rest) > 0 {
		i := textx.LineEnd(rest)
		b = append(b, prefix...)
		if i < 0 {
			b = append(b, rest...)
			b = append(b, '\n')
			break
		}
		b = append(b, rest[:i+1]...)
		rest = rest[i+1:]
	}
	sc.buf = b
	return b
}

// write handles one output frame of whole lines from one rank.
func (c *console) write(sc *scratch, rank int, s wire.Stream, data []byte) {
	if len(data) == 0 {
		return
	}
	now := time.Now()
	if rank >= 0 && rank < len(c.last) {
		c.last[rank].Store(now.UnixNano())
	}
	if c.dir != "" {
		c.toFile(rank, s, data)
	}
	// Every line, stdout and stderr, feeds the throughput collector (Python
	// logging writes to stderr); stderr also feeds the failure report.
	if c.obs != nil {
		host := ""
		if c.hostOf != nil {
			host = c.hostOf(rank)
		}
		c.obs.ObserveLines(rank, host, now, data)
	}
	if s == wire.Stderr {
		c.fmu.Lock()
		t := c.tails[rank]
		if t == nil {
			t = &ring{}
			c.tails[rank] = t
		}
		for rest := data; len(rest) > 0; {
			i := textx.LineEnd(rest)
			line, progress := rest, false
			if i >= 0 {
				progress = rest[i] == '\r'
				line, rest = rest[:i], rest[i+1:]
			} else {
				rest = nil
			}
			t.add(clip(bytes.TrimSuffix(line, []byte("\r"))), progress)
		}
		c.fmu.Unlock()
	}
	if !c.from.Has(rank) {
		return
	}
	b := sc.lines(c.prefix(rank, s, now), data)
	w := c.stdout
	if s == wire.Stderr {
		w = c.stderr
	}
	c.mu.Lock()
	_, _ = w.Write(b)
	c.mu.Unlock()
}

func (c *console) prefix(rank int, s wire.Stream, now time.Time) []byte {
	var p []byte
	if c.timestamp {
		p = now.AppendFormat(p, "2006-01-02T15:04:05.000 ")
	}
	switch c.tags {
	case plan.TagMpirun:
		p = append(p, "[1,"...)
		p = strconv.AppendInt(p, int64(rank), 10)
		p = append(p, "]<"...)
		p = append(p, s.String()...)
		p = append(p, ">:"...)
	case plan.TagRank:
		p = append(p, '[')
		p = strconv.AppendInt(p, int64(rank), 10)
		p = append(p, "] "...)
	}
	return p
}

// clip copies a stderr line for the failure report, cut to tailLineBytes.
func clip(line []byte) string { return textx.ClipMore(line, tailLineBytes) }

// toFile writes a frame to DIR/rank.R/STREAM exactly as the rank wrote it.
func (c *console) toFile(rank int, s wire.Stream, data []byte) {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	k := fileKey{rank, s}
	f := c.files[k]
	if f == nil {
		var err error
		if f, err = openRankFile(c.dir, rank, s.String()); err != nil {
			if c.ferr == nil {
				c.ferr = err
			}
			return
		}
		c.files[k] = f
	}
	if _, err := f.Write(data); err != nil && c.ferr == nil {
		c.ferr = fmt.Errorf("rank %d %s file: %w", rank, s, err)
	}
}

// say prints one of the launcher's own messages on stderr, between rank
// lines, never inside one.
func (c *console) say(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.stderr, "launcher: %s\n", msg)
}

func (c *console) tail(rank int) []string {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	if t := c.tails[rank]; t != nil {
		return t.list()
	}
	return nil
}

func (c *console) close() error {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	for _, f := range c.files {
		if err := f.Close(); err != nil && c.ferr == nil {
			c.ferr = err
		}
	}
	c.files = nil
	return c.ferr
}

// openRankFile opens DIR/rank.R/name for writing without following a
// symbolic link anywhere below DIR: rank.R must be a directory of ours
// (made here if missing) and name is opened with O_NOFOLLOW, so a link
// planted in a shared DIR cannot redirect a rank's output into another
// file.
func openRankFile(dir string, rank int, name string) (*os.File, error) {
	rd := filepath.Join(dir, "rank."+strconv.Itoa(rank))
	if err := os.Mkdir(rd, cli.DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if err := ownDir(rd); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(rd, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, cli.FileMode)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	return f, nil
}

// ownDir checks that path is a directory (not a link to one) owned by the
// launcher's user.
func ownDir(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: not a directory (a symbolic link or a file is in the way)", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: owned by uid %d, not by this user (uid %d)", path, st.Uid, os.Geteuid())
	}
	return nil
}

// lastOutput is when each of the first n ranks last printed (zero: never).
func (c *console) lastOutput() map[int]time.Time {
	out := make(map[int]time.Time, len(c.last))
	for r := range c.last {
		if ns := c.last[r].Load(); ns != 0 {
			out[r] = time.Unix(0, ns)
		} else {
			out[r] = time.Time{}
		}
	}
	return out
}

// quietFor is how long no rank has printed anything, counted from since
// when none ever did.
func (c *console) quietFor(since, now time.Time) time.Duration {
	latest := since.UnixNano()
	for r := range c.last {
		latest = max(latest, c.last[r].Load())
	}
	return now.Sub(time.Unix(0, latest))
}

func newConsole(o cli.Output, ranks int, stdout, stderr io.Writer, hostOf func(int) string, obs observer) *console {
	return &console{
		stdout: stdout, stderr: stderr, tags: o.Tags.Resolve(stdout), timestamp: o.Timestamp,
		from: o.From, dir: o.Dir, hostOf: hostOf, obs: obs,
		files: map[fileKey]*os.File{}, tails: map[int]*ring{}, last: make([]atomic.Int64, ranks),
	}
}
