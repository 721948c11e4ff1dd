package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrRunning is returned by a second call of Collector.Run.
var ErrRunning = errors.New("bench: Collector.Run called twice")

// Collector recognises benchmark lines while a job runs. Observe is called
// from the launcher's output path and never blocks; Run, on a goroutine the
// caller owns, does the parsing. The owner pattern:
//
//	c, err := bench.NewCollector(opts)
//	done := make(chan error, 1)
//	go func() { done <- c.Run(ctx) }()
//	// output path, for every whole line: c.Observe(rank, host, time.Now(), line)
//	// (or for a chunk of whole lines: c.ObserveLines(rank, host, now, chunk))
//	// when every rank's output is drained:
//	c.Close()
//	<-done
//	rep := c.Report(meta)
type Collector struct {
	opts   Options
	filter bool // no custom recognisers: skip lines no built-in can match
	q      chan observed
	stop   chan struct{}

	closeOnce sync.Once
	stopped   atomic.Bool // Close called or Run returned: Observe drops
	started   atomic.Bool
	finished  atomic.Bool
	observed  atomic.Int64
	dropped   atomic.Int64

	mu  sync.Mutex // guards acc
	acc *accum
	seq int // line counter for accum's line numbers
}

type observed struct {
	rank int
	host string
	at   time.Time
	line []byte
}

// NewCollector returns a Collector using Builtin() and opts.Metrics.
func NewCollector(opts Options) (*Collector, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	return &Collector{
		opts:   o,
		filter: len(o.Metrics) == 0,
		q:      make(chan observed, o.QueueSize),
		stop:   make(chan struct{}),
		acc:    newAccum(o),
	}, nil
}

// Observe hands one whole line of rank's output (tagged or not, with or
// without its newline) to the Collector. It copies line, never blocks, and
// counts the line as dropped when the queue is full or the Collector is
// closed. A zero t means now. Safe for concurrent use.
func (c *Collector) Observe(rank int, host string, t time.Time, line []byte) {
	c.observed.Add(1)
	if c.filter {
		_, rest, _ := StripTag(trimEOL(line))
		if !mayMatchBuiltin(rest) {
			return
		}
	}
	c.enqueue(rank, host, t, line)
}

// enqueue queues a line that passed the filter.
func (c *Collector) enqueue(rank int, host string, t time.Time, line []byte) {
	if c.stopped.Load() {
		c.dropped.Add(1)
		return
	}
	if t.IsZero() {
		t = time.Now()
	}
	select {
	case c.q <- observed{rank: rank, host: host, at: t, line: append([]byte(nil), line...)}:
	default:
		c.dropped.Add(1)
	}
}

// Run parses queued lines until Close is called or ctx ends, then drains
// what is queued and returns: nil after Close, context.Cause(ctx) otherwise.
// The report stays available either way. Run may be called once.
func (c *Collector) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.finished.Store(true)
	defer c.stopped.Store(true)
	for {
		select {
		case l := <-c.q:
			c.parse(l)
		case <-c.stop:
			c.drain()
			return nil
		case <-ctx.Done():
			c.stopped.Store(true)
			c.drain()
			return context.Cause(ctx)
		}
	}
}

func (c *Collector) drain() {
	for {
		select {
		case l := <-c.q:
			c.parse(l)
		default:
			return
		}
	}
}

func (c *Collector) parse(l observed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.acc.add(l.rank, l.host, l.at, c.seq, l.line)
}

// Close tells Run to parse what is queued and return. Lines observed after
// Close are counted as dropped. Close does not wait; wait for Run instead.
// Close may be called more than once.
func (c *Collector) Close() {
	c.closeOnce.Do(func() {
		c.stopped.Store(true)
		close(c.stop)
	})
}

// Report aggregates what has been parsed so far. Call it after Run has
// returned for the final figure; earlier calls give a snapshot.
func (c *Collector) Report(meta Meta) Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines := LineStats{Observed: c.observed.Load(), Dropped: c.dropped.Load()}
	if c.finished.Load() {
		// Lines that raced past the stopped check after Run drained.
		lines.Dropped += int64(len(c.q))
	}
	return c.acc.report(c.opts, meta, lines)
}

// LastSample is the time of the latest benchmark line parsed so far, zero
// when none was. Call it after Run has returned for the final answer.
func (c *Collector) LastSample() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acc.last
}
