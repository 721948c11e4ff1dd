package pmi

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
)

// Keys the server answers itself, whatever was put.
const (
	keyProcessMapping = "PMI_process_mapping"
	keyDeadProcesses  = "PMI_dead_processes"
	keyUniverseSize   = "universeSize" // PMI-2 info-getjobattr only
)

// kvs is the agent's view of the job's key-value space plus the node-local
// attribute space (PMI-2 info-putnodeattr) and the barrier state.
//
// Puts are buffered in pending and become visible to gets only when the
// barrier that follows them completes, on every host at once: this is the
// PMI contract (MPICH orders puts and gets with barriers) and keeps a get's
// answer independent of which host the putter runs on.
//
// Everything it keeps for the job counts against one budget (Limits):
// pending puts, the puts of a barrier being fenced, the visible keys, node
// attributes and the names of the server's own table.
type kvs struct {
	job    Job
	nlocal int
	fencer Fencer

	mu       sync.Mutex
	budget   budget
	data     map[string]string // visible: merged at each barrier
	pending  map[string]string // puts since the last barrier
	pendCost usage             // pending's share of the budget
	cur      *epoch            // the barrier being entered
	nodeAttr map[string]string
	nodeWait map[string]chan struct{} // closed when the key is put
}

// epoch is one barrier: seq counts from 1.
type epoch struct {
	seq     int
	entered map[int]bool
	// cost is the budget its puts hold from enter until complete.
	cost usage
	// waiters are the entered ranks' replies, called once by whoever
	// completes the barrier (nil error: released). They must not block.
	waiters []func(seq int, err error)
}

func newEpoch(seq int) *epoch {
	return &epoch{seq: seq, entered: make(map[int]bool)}
}

func newKVS(job Job, nlocal int, f Fencer) *kvs {
	return &kvs{
		job:      job,
		nlocal:   nlocal,
		fencer:   f,
		budget:   budget{lim: job.Limits},
		data:     make(map[string]string),
		pending:  make(map[string]string),
		cur:      newEpoch(1),
		nodeAttr: make(map[string]string),
		nodeWait: make(map[string]chan struct{}),
	}
}

// put buffers a key for the next barrier. A later put of the same key
// wins. It refuses a put beyond the budget (ErrLimit). The strings are
// copied: a request's key and value may share the memory of its whole
// line.
func (k *kvs) put(key, value string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := setCost(k.pending, key, value)
	if err := k.budget.take(d); err != nil {
		return err
	}
	k.pending[strings.Clone(key)] = strings.Clone(value)
	k.pendCost = k.pendCost.plus(d)
	return nil
}

// get never blocks: it answers the server-owned keys and then whatever the
// completed barriers made visible.
func (k *kvs) get(key string) (string, bool) {
	switch key {
	case keyProcessMapping:
		return k.job.Mapping, k.job.Mapping != ""
	case keyDeadProcesses:
		// Hydra answers the comma list of dead ranks. This server does not
		// track deaths on other hosts, so it always answers the empty list
		// (found, empty value): MPICH's fault-tolerance query then succeeds
		// with "no failures" instead of failing.
		return "", true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.data[key]
	return v, ok
}

// enter enters rank into the current barrier; reply is called once when
// the barrier completes (see complete). The last local rank to enter gets
// last=true with the barrier and the puts made since the previous one: the
// caller then fences them and calls complete. No goroutine waits for a
// barrier.
func (k *kvs) enter(rank int, reply func(seq int, err error)) (e *epoch, puts map[string]string, last bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e = k.cur
	if e.entered[rank] {
		return e, nil, false, fmt.Errorf("rank %d entered barrier %d twice", rank, e.seq)
	}
	e.entered[rank] = true
	e.waiters = append(e.waiters, reply)
	if len(e.entered) < k.nlocal {
		return e, nil, false, nil
	}
	puts = k.pending
	e.cost = k.pendCost
	k.pending = make(map[string]string)
	k.pendCost = usage{}
	k.cur = newEpoch(e.seq + 1)
	return e, puts, true, nil
}

// complete ends barrier e with the Fencer's answer: all (every host's
// puts) becomes visible over this host's puts, then every local rank's
// reply runs, with the barrier's error if the fence failed or its result
// would pass the budget (then nothing of it becomes visible).
func (k *kvs) complete(e *epoch, puts, all map[string]string, err error) {
	k.mu.Lock()
	k.budget.give(e.cost)
	e.cost = usage{}
	if err != nil {
		err = fmt.Errorf("barrier %d: fence: %w", e.seq, err)
	} else if k.data == nil { // dropped: the server is closed
		err = fmt.Errorf("barrier %d: %w", e.seq, ErrClosed)
	} else if terr := k.budget.take(mergeCost(k.data, puts, all)); terr != nil {
		err = fmt.Errorf("barrier %d: the job's puts: %w", e.seq, terr)
	} else {
		maps.Copy(k.data, puts)
		maps.Copy(k.data, all)
	}
	k.mu.Unlock()
	for _, reply := range e.waiters {
		reply(e.seq, err)
	}
}

// mergeCost is the change of data's usage when puts and then all are
// copied into it.
func mergeCost(data, puts, all map[string]string) usage {
	var d usage
	for key, v := range puts {
		if _, over := all[key]; !over {
			d = d.plus(setCost(data, key, v))
		}
	}
	for key, v := range all {
		d = d.plus(setCost(data, key, v))
	}
	return d
}

// putNodeAttr stores a node-local attribute and wakes its waiters; it
// refuses one beyond the budget (ErrLimit).
func (k *kvs) putNodeAttr(key, value string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.budget.take(setCost(k.nodeAttr, key, value)); err != nil {
		return err
	}
	k.nodeAttr[strings.Clone(key)] = strings.Clone(value)
	if ch, ok := k.nodeWait[key]; ok {
		close(ch)
		delete(k.nodeWait, key)
	}
	return nil
}

// drop lets go of every entry once the server is closed, and says how
// many bytes they held; gets then find only the server-owned keys.
func (k *kvs) drop() (bytes int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	bytes = k.budget.used.bytes
	k.data, k.pending, k.nodeAttr = nil, nil, nil
	k.budget.used, k.pendCost = usage{}, usage{}
	return bytes
}

// reserve takes d from the budget (the server's own name table).
func (k *kvs) reserve(d usage) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.budget.take(d)
}

// release gives d back.
func (k *kvs) release(d usage) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.budget.give(d)
}

// getNodeAttr answers a node-local attribute; with wait it blocks until the
// key is put or ctx ends.
func (k *kvs) getNodeAttr(ctx context.Context, key string, wait bool) (string, bool, error) {
	for {
		k.mu.Lock()
		v, ok := k.nodeAttr[key]
		if ok || !wait {
			k.mu.Unlock()
			return v, ok, nil
		}
		ch, ok := k.nodeWait[key]
		if !ok {
			ch = make(chan struct{})
			k.nodeWait[key] = ch
		}
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return "", false, fmt.Errorf("wait for node attribute %q: %w", key, context.Cause(ctx))
		}
	}
}

// localNames is the name service of a server given none: a table of its
// own, with the job-wide service's answers. Its names count against the
// job's budget when it has one (kvs).
type localNames struct {
	kvs   *kvs // nil: unbounded (tests' stand-in tables)
	mu    sync.Mutex
	names map[string]string
}

var _ Names = (*localNames)(nil)

func newLocalNames(k *kvs) *localNames { return &localNames{kvs: k, names: map[string]string{}} }

func (l *localNames) Publish(_ context.Context, service, port string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.names[service]; ok {
		return ErrNameExists
	}
	if l.kvs != nil {
		if err := l.kvs.reserve(entryCost(service, port)); err != nil {
			return err
		}
	}
	l.names[strings.Clone(service)] = strings.Clone(port)
	return nil
}

func (l *localNames) Unpublish(_ context.Context, service string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	port, ok := l.names[service]
	if !ok {
		return ErrNameNotFound
	}
	if l.kvs != nil {
		l.kvs.release(entryCost(service, port))
	}
	delete(l.names, service)
	return nil
}

// drop lets go of the table once the server is closed.
func (l *localNames) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = nil
}

func (l *localNames) Lookup(_ context.Context, service string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.names[service]
	if !ok {
		return "", ErrNameNotFound
	}
	return p, nil
}
