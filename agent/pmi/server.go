package pmi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Job describes the job as every rank sees it.
type Job struct {
	// KVSName is the PMI-1 kvsname (cmd=my_kvsname): a token without spaces,
	// shorter than 256 bytes. Empty means "kvs_" + JobID.
	KVSName string
	// Size is the number of ranks in the whole job.
	Size int
	// Mapping is the PMI_process_mapping value (see ProcessMapping). Empty
	// means unknown: PMI-1 gets answer rc=-1 and MPICH falls back to a
	// hostname exchange; PMI-2 info-getjobattr answers found=FALSE, which
	// MPICH's PMI-2 path treats as fatal.
	Mapping string
	// JobID is the PMI-2 job id (job-getid). Empty means KVSName.
	JobID string
	// UniverseSize is the answer to PMI-1 get_universe_size and PMI-2
	// info-getjobattr universeSize. 0 or less means unknown: PMI-1 gets
	// -1 and PMI-2 found=FALSE, as from Hydra without -usize (MPICH then
	// leaves MPI_UNIVERSE_SIZE unset).
	UniverseSize int
	// Limits bound what the server keeps for the job and how long a
	// reply waits for its rank; zero fields take the defaults.
	Limits Limits
}

// Fencer carries one host's barrier to the rest of the job.
//
// Fence is called once per barrier, by one goroutine, when every local rank
// has entered barrier number seq (1, 2, 3, ...). puts holds the keys this
// host's ranks put since the previous barrier (the Fencer owns the map). It
// must return the union of every host's puts for that barrier, this host's
// included, after every host has called Fence for seq; a key put on two hosts
// takes either value. Fence must return when ctx ends. An error fails the
// barrier for every local rank: PMI-2 ranks get an error reply, PMI-1 ranks
// have their connection closed (their MPI_Init or MPI_Barrier then fails).
type Fencer interface {
	Fence(ctx context.Context, seq int, puts map[string]string) (map[string]string, error)
}

// AsyncFencer is a Fencer that answers without a goroutine waiting on
// it. The server prefers FenceAsync when its Fencer has it: the last local
// rank's connection reader calls it, and the caller's own goroutine (the
// agent's session loop, on the launcher's answer) calls done, which
// writes the local ranks' replies without blocking.
type AsyncFencer interface {
	Fencer
	// FenceAsync starts the fence of barrier seq (see Fence for seq and
	// puts) and returns without waiting for it. It must call done exactly
	// once, possibly before it returns: with every host's puts, or with
	// an error that fails the barrier. done does not block.
	FenceAsync(seq int, puts map[string]string, done func(all map[string]string, err error))
}

// localFencer is the barrier of a job whose ranks are all local.
type localFencer struct{}

func (localFencer) Fence(_ context.Context, _ int, puts map[string]string) (map[string]string, error) {
	return puts, nil
}

func (localFencer) FenceAsync(_ int, puts map[string]string, done func(map[string]string, error)) {
	done(puts, nil)
}

// Names is the job-wide PMI name service behind PMI-1 publish_name,
// unpublish_name and lookup_name and PMI-2 name-publish, name-unpublish
// and name-lookup. Each call returns the service's answer, or an error
// when ctx (the asking rank's connection) ends first. The server calls it
// from a goroutine of the asking connection, so a pending answer holds up
// no other rank's PMI traffic; the asking rank's next request waits for
// it (one request at a time per rank).
//
// Publish returns ErrNameExists for a name already published; Unpublish
// and Lookup return ErrNameNotFound for a name not published, at once: a
// lookup is not held until someone publishes the name (Hydra answers it
// at once too). Other errors are refusals the rank gets as an error
// reply.
type Names interface {
	Publish(ctx context.Context, service, port string) error
	Unpublish(ctx context.Context, service string) error
	Lookup(ctx context.Context, service string) (port string, err error)
}

// Name service answers that ranks get in Hydra's words (see Names).
var (
	ErrNameExists   = errors.New("pmi: service name already published")
	ErrNameNotFound = errors.New("pmi: service name not published")
)

// Events are optional callbacks. They are called from server goroutines, so
// they must not block for long, must be safe for concurrent use, and must not
// call Close (Close waits for the goroutine that is calling them). Names is
// the exception: it is a service whose calls wait for their answers.
type Events struct {
	// Abort reports PMI-1 "cmd=abort exitcode=N" and PMI-2 "abort". code is
	// the raw value the client sent (MPI_Abort's errorcode); PMI-2 carries
	// none and reports 1 unless the client adds exitcode=. The rank then
	// waits to be killed: the agent must kill the job and the launcher exit
	// with code.
	Abort func(rank, code int, msg string)
	// Fail reports that the server dropped rank's connection because
	// the rank broke a bound: it left its replies unread for
	// Limits.WriteTimeout (err wraps ErrStalled). The agent should end
	// the rank, as Hydra ends a job whose rank's PMI connection closes
	// early. Called once per rank, at most.
	Fail func(rank int, err error)
	// Names is the job's name service (the agent forwards it to the
	// launcher). nil means a table of this server's own, which is the
	// job's when every rank is local.
	Names Names

	// What this package's tests observe: disconnect reports the end of a
	// rank's connection while the server is running (finalized is false
	// when the rank never sent finalize: an abnormal exit); debug
	// receives one line per request and reply.
	disconnect func(rank int, finalized bool)
	debug      func(format string, args ...any)
}

// appNum is every rank's application number (PMI-1 get_appnum, PMI-2
// appnum): a gangway job is one application, as Hydra numbers the first
// of an MPMD command line.
const appNum = 0

// ErrClosed is the cancellation cause once Close has been called.
var ErrClosed = errors.New("pmi: server closed")

// Server serves PMI to the ranks of one job that run on this host, each on
// its own socketpair (RankFD). It owns one goroutine per connection; Close
// ends and waits for them all.
type Server struct {
	job   Job
	local []int       // local ranks in the caller's order
	index map[int]int // rank → position in local (MPI_LOCALRANKID)
	kvs   *kvs
	ev    Events
	names Names // ev.Names, or the local table

	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{}
	ranks  map[int]*rankState
	held   atomic.Int64 // what the keys held when Close dropped them
}

type rankState struct {
	conn        *conn // the live connection, if any
	fd          bool  // RankFD was called
	initialized bool
	finalized   bool
	failed      error // why the server dropped the rank (Events.Fail)
}

// NewServer returns a server for localRanks of job. f may be nil only when
// every rank of the job is local; the barrier is then this host alone. The
// server stops when ctx ends or Close is called; call Close in every case to
// wait for its goroutines.
func NewServer(ctx context.Context, job Job, localRanks []int, f Fencer, ev Events) (*Server, error) {
	if job.Size <= 0 {
		return nil, fmt.Errorf("pmi: job size %d", job.Size)
	}
	if job.KVSName == "" {
		job.KVSName = "kvs_" + job.JobID
		if job.JobID == "" {
			job.KVSName = "kvs_0"
		}
	}
	if job.JobID == "" {
		job.JobID = job.KVSName
	}
	job.Limits = job.Limits.withDefaults()
	if !isToken(job.KVSName) || len(job.KVSName) >= pmi1KVSNameMax {
		return nil, fmt.Errorf("pmi: bad kvsname %q", job.KVSName)
	}
	if job.Mapping != "" && !isToken(job.Mapping) {
		return nil, fmt.Errorf("pmi: process mapping %q contains spaces", job.Mapping)
	}
	if len(localRanks) == 0 {
		return nil, errors.New("pmi: no local ranks")
	}
	index := make(map[int]int, len(localRanks))
	ranks := make(map[int]*rankState, len(localRanks))
	for i, r := range localRanks {
		if r < 0 || r >= job.Size {
			return nil, fmt.Errorf("pmi: local rank %d outside job of size %d", r, job.Size)
		}
		if _, dup := index[r]; dup {
			return nil, fmt.Errorf("pmi: local rank %d listed twice", r)
		}
		index[r] = i
		ranks[r] = &rankState{}
	}
	if f == nil {
		if len(localRanks) != job.Size {
			return nil, fmt.Errorf("pmi: no Fencer for a job with %d of %d ranks local", len(localRanks), job.Size)
		}
		f = localFencer{}
	}
	s := &Server{
		job:   job,
		local: slices.Clone(localRanks),
		index: index,
		kvs:   newKVS(job, len(localRanks), f),
		ev:    ev,
		names: ev.Names,
		conns: make(map[*conn]struct{}),
		ranks: ranks,
	}
	if s.names == nil {
		s.names = newLocalNames(s.kvs)
	}
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	s.wg.Go(func() {
		<-s.ctx.Done()
		s.shutdown()
	})
	return s, nil
}

// RankFD returns the child end of a new socketpair(AF_UNIX, SOCK_STREAM) for
// rank and serves the parent end. Pass it in the rank's exec.Cmd.ExtraFiles
// and set PMI_FD to 3 plus its index there (see Env). The caller owns the
// returned file and must close it once the rank has started: the server sees
// the rank's exit as EOF only when no other copy of the child end is open.
func (s *Server) RankFD(rank int) (*os.File, error) {
	s.mu.Lock()
	st, ok := s.ranks[rank]
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, ErrClosed
	case !ok:
		s.mu.Unlock()
		return nil, fmt.Errorf("pmi: rank %d is not local", rank)
	case st.fd:
		s.mu.Unlock()
		return nil, fmt.Errorf("pmi: rank %d already has a PMI connection", rank)
	}
	st.fd = true
	s.mu.Unlock()

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		s.unmarkFD(rank)
		return nil, fmt.Errorf("pmi: socketpair for rank %d: %w", rank, err)
	}
	parent := os.NewFile(uintptr(fds[0]), "pmi-server-"+strconv.Itoa(rank))
	child := os.NewFile(uintptr(fds[1]), "pmi-rank-"+strconv.Itoa(rank))
	nc, err := net.FileConn(parent) // dups the fd
	parent.Close()
	if err != nil {
		child.Close()
		s.unmarkFD(rank)
		return nil, fmt.Errorf("pmi: socketpair for rank %d: %w", rank, err)
	}
	if err := s.startConn(nc, rank); err != nil {
		child.Close()
		return nil, err
	}
	return child, nil
}

func (s *Server) unmarkFD(rank int) {
	s.mu.Lock()
	s.ranks[rank].fd = false
	s.mu.Unlock()
}

// Env returns what the server adds to rank's environment: PMI_FD=fd, the
// descriptor number the child end has in the rank (3+i for
// ExtraFiles[i]). The rank's identity (PMI_RANK, PMI_SIZE,
// MPI_LOCALRANKID, MPI_LOCALNRANKS) is the launcher's to set, once, with
// the rest of the rank's environment.
func (s *Server) Env(rank, fd int) ([]string, error) {
	if _, ok := s.index[rank]; !ok {
		return nil, fmt.Errorf("pmi: rank %d is not local", rank)
	}
	return []string{"PMI_FD=" + strconv.Itoa(fd)}, nil
}

// Initialized reports whether rank has sent PMI-1 init or PMI-2 fullinit.
func (s *Server) Initialized(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.ranks[rank]
	return ok && st.initialized
}

// Finalized reports whether rank has sent finalize. A rank that exits
// without it exited abnormally (MPI semantics). The reply to finalize is sent
// after the flag is set, so after the rank's process has exited this answer
// is final.
func (s *Server) Finalized(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.ranks[rank]
	return ok && st.finalized
}

// Failed returns why the server dropped rank's connection (Events.Fail),
// or nil.
func (s *Server) Failed(rank int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.ranks[rank]; ok {
		return st.failed
	}
	return nil
}

// fail drops c's connection because its rank broke a bound, and reports
// it once.
func (s *Server) fail(c *conn, err error) {
	s.mu.Lock()
	st := s.ranks[c.id()]
	report := st.failed == nil && !s.closed
	if st.failed == nil {
		st.failed = err
	}
	s.mu.Unlock()
	c.nc.Close()
	if report && s.ev.Fail != nil {
		s.ev.Fail(c.id(), err)
	}
}

// Close stops the server: it closes every connection,
// cancels pending barriers (and the Fencer call), waits for every
// goroutine and lets go of the job's keys. It does not close the child
// ends returned by RankFD.
func (s *Server) Close() error {
	s.cancel(ErrClosed)
	s.wg.Wait()
	// No request comes any more: what the job kept goes now, even while
	// the caller still holds the Server.
	s.held.Store(s.kvs.drop())
	if l, ok := s.names.(*localNames); ok {
		l.drop()
	}
	return nil
}

// Held is how many bytes (by the limits' count) the job's keys held when
// Close let them go: a caller may give that much memory back to the host
// at once.
func (s *Server) Held() int64 { return s.held.Load() }

// shutdown closes what blocks the server's goroutines.
func (s *Server) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.nc.Close()
	}
}

func (s *Server) startConn(nc net.Conn, rank int) error {
	c := newConn(s, nc, rank)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		nc.Close()
		return ErrClosed
	}
	s.conns[c] = struct{}{}
	s.ranks[rank].conn = c
	s.wg.Go(c.serve)
	return nil
}

// connDone unregisters c and reports the rank's disconnect.
func (s *Server) connDone(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	rank, finalized, report := c.id(), false, false
	if st, ok := s.ranks[rank]; ok && st.conn == c {
		st.conn = nil
		finalized = st.finalized
		report = !s.closed
	}
	s.mu.Unlock()
	if report && s.ev.disconnect != nil {
		s.ev.disconnect(rank, finalized)
	}
}

// barrier enters c's rank into the current barrier; reply runs once when
// it completes. The last local arrival fences it: through FenceAsync when
// the Fencer has it, else in a goroutine that waits on Fence.
func (s *Server) barrier(c *conn, reply func(seq int, err error)) (seq int, err error) {
	e, puts, last, err := s.kvs.enter(c.id(), reply)
	if err != nil || !last {
		return e.seq, err
	}
	done := func(all map[string]string, err error) { s.kvs.complete(e, puts, all, err) }
	if af, ok := s.kvs.fencer.(AsyncFencer); ok {
		af.FenceAsync(e.seq, maps.Clone(puts), done)
		return e.seq, nil
	}
	if !s.goIfOpen(func() { done(s.kvs.fencer.Fence(s.ctx, e.seq, maps.Clone(puts))) }) {
		done(nil, ErrClosed)
	}
	return e.seq, nil
}

// goIfOpen runs f in a goroutine Close waits for, unless the server is
// closed (then it reports false and f does not run).
func (s *Server) goIfOpen(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Go(f)
	return true
}

func (s *Server) setInitialized(rank int) {
	s.mu.Lock()
	if st, ok := s.ranks[rank]; ok {
		st.initialized = true
	}
	s.mu.Unlock()
}

func (s *Server) setFinalized(rank int) {
	s.mu.Lock()
	if st, ok := s.ranks[rank]; ok {
		st.finalized = true
	}
	s.mu.Unlock()
}

func (s *Server) debugf(format string, args ...any) {
	if s.ev.debug != nil {
		s.ev.debug(format, args...)
	}
}

// isToken reports whether v is non-empty and has no whitespace or NUL.
func isToken(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case ' ', '\t', '\n', '\r', '\v', '\f', 0:
			return false
		}
	}
	return true
}
