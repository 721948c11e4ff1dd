package relay

import (
	"fmt"
	"slices"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// Ends held per subtree (wire.Ends, told Hello.Ends). A host whose every
// rank exited 0 (or was stopped by the launcher) sends one Ends in place
// of their exits and its Done; a
// relay takes its own host's and its children's into one frame for its
// subtree, sent once the subtree has ended: its own host's job (if it
// runs ranks) and every child it passed a start to (each child's Ends
// marked Last, or its loss). So a job's clean end costs the launcher one
// frame per first-level relay, not an exit and a Done a host.
//
// A failure is never held: a host whose rank failed sends its exits as
// they come, and its Done (an Ends with Done) is passed up at once, in
// its place among the frames its relay forwards, so the launcher takes
// every one of its exits before its end. What a relay holds goes up
// before it forwards a child's Cut or a grandchild's (a host known to
// have ended cleanly is not then counted lost), and within endsWait of
// its first entry (endsStopWait once the launcher has stopped the job):
// a child that never confirms its end holds up none of its siblings'.

// Waits for the rest of a subtree before its ends go up without them.
var (
	endsWait     = 2 * time.Second
	endsStopWait = 100 * time.Millisecond
)

// ownEnd is how this relay's own host's job ended, as far as said.
type ownEnd uint8

const (
	ownRunning ownEnd = iota
	ownClean
	ownFailed
)

// ends is a subtree's ends being held.
type ends struct {
	own      ownEnd
	ownSent  bool         // own's end has gone up
	last     map[int]bool // children whose Last came
	hosts    []int        // hosts behind the relay that ended cleanly, not yet sent
	stopped  int          // of the ranks of own and hosts not yet sent, those the launcher ended
	timer    *time.Timer
	stopping bool // the launcher has stopped the job: wait endsStopWait at most
	over     bool // this relay's Last has gone up
}

// SetEnds says whether the launcher takes Ends (Hello.Ends).
func (r *Relay) SetEnds(on bool) {
	r.mu.Lock()
	r.endsOn = on
	r.mu.Unlock()
}

// OwnEnded takes this host's own job's end (clean: no rank failed;
// stopped: how many of its ranks the launcher ended) into the subtree's
// Ends when children were given the job (true); false: the session
// sends its Ends itself.
func (r *Relay) OwnEnded(clean bool, stopped int) bool {
	r.endsMu.Lock()
	defer r.endsMu.Unlock()
	r.mu.Lock()
	if !r.endsOn || r.closed || len(r.started) == 0 || r.ends.over {
		r.mu.Unlock()
		return false
	}
	r.ends.own = ownFailed
	if clean {
		r.ends.own = ownClean
		r.ends.stopped += stopped
	}
	e := r.endsDue()
	r.mu.Unlock()
	r.sendEnds(e)
	return true
}

// childEnds takes a started child's Ends into its subtree's (true); a
// child not given a job through this relay, or an Ends after the
// child's Last or this relay's, has it passed on as it is (false), for
// the launcher to take as the child's. An error is the child's protocol
// violation.
func (r *Relay) childEnds(c *child, m wire.Msg) (taken bool, err error) {
	e, err := m.Ends()
	if err != nil {
		return false, fmt.Errorf("protocol violation of %s: %w", c.name, err)
	}
	if len(e.Spans) > 0 {
		return false, fmt.Errorf("protocol violation of %s: its ends name spans, which it was not told to send", c.name)
	}
	r.mu.Lock()
	if !r.endsOn || !r.started[c.host] {
		r.mu.Unlock()
		return false, nil
	}
	if r.ends.last[c.host] || r.ends.over {
		// Late (its subtree, or this relay's, said Last already): it
		// goes up on its own, in an envelope, for the launcher to take
		// as the child's.
		r.mu.Unlock()
		return false, nil
	}
	r.mu.Unlock()
	if e.Done {
		// Its Done goes up now, after its exits (forwarded as they
		// came, by this goroutine) and before anything it sends later.
		if err := r.up.SendEnvelope(wire.KindRelayed, c.host, wire.KindDone, nil); err != nil {
			return true, nil // the relay's own session is gone; Close ends the rest
		}
	}
	r.endsMu.Lock()
	defer r.endsMu.Unlock()
	r.mu.Lock()
	es := &r.ends
	if e.Self {
		es.hosts = append(es.hosts, c.host)
	}
	es.hosts = append(es.hosts, e.Hosts...)
	es.stopped += e.Stopped
	if e.Last {
		if es.last == nil {
			es.last = map[int]bool{}
		}
		es.last[c.host] = true
	}
	due := r.endsDue()
	r.mu.Unlock()
	r.sendEnds(due)
	return true, nil
}

// childGone drops a lost child from what the subtree's ends wait for;
// the ends held go up first (before its Cut). r.endsMu and r.mu are
// held.
func (r *Relay) childGone(host int) (flush, due *wire.Ends) {
	if !r.endsOn {
		return nil, nil
	}
	flush = r.endsNow(false)
	delete(r.ends.last, host)
	return flush, r.endsDue()
}

// flushEnds sends the ends held now (before a Cut goes up).
func (r *Relay) flushEnds() {
	r.endsMu.Lock()
	defer r.endsMu.Unlock()
	r.mu.Lock()
	var e *wire.Ends
	if r.endsOn {
		e = r.endsNow(false)
	}
	r.mu.Unlock()
	r.sendEnds(e)
}

// Stopped is the launcher's stop: the ends held go up within
// endsStopWait from here on, so that the launcher hears the subtree's
// confirmations within its stop's bounds.
func (r *Relay) Stopped() {
	r.endsMu.Lock()
	defer r.endsMu.Unlock()
	r.mu.Lock()
	es := &r.ends
	if es.stopping || !r.endsOn {
		r.mu.Unlock()
		return
	}
	es.stopping = true
	if es.timer != nil && es.timer.Stop() {
		es.timer = nil
		r.wg.Done()
	}
	due := r.endsDue()
	r.mu.Unlock()
	r.sendEnds(due)
}

// endsDue is the subtree's Ends when the subtree has ended (marked
// Last), else nil, with a timer armed for what is held. r.mu is held.
func (r *Relay) endsDue() *wire.Ends {
	es := &r.ends
	if es.over {
		return nil
	}
	complete := !r.ownJob || es.own != ownRunning
	for h := range r.started {
		if !es.last[h] {
			complete = false
			break
		}
	}
	if complete {
		return r.endsNow(true)
	}
	if es.timer == nil && (len(es.hosts) > 0 || (es.own != ownRunning && !es.ownSent)) {
		d := endsWait
		if es.stopping {
			d = endsStopWait
		}
		r.wg.Add(1)
		var t *time.Timer
		t = time.AfterFunc(d, func() {
			defer r.wg.Done()
			r.endsMu.Lock()
			defer r.endsMu.Unlock()
			r.mu.Lock()
			var e *wire.Ends
			if r.ends.timer == t {
				r.ends.timer = nil
				if !r.closed {
					e = r.endsNow(false)
				}
			}
			r.mu.Unlock()
			r.sendEnds(e)
		})
		es.timer = t
	}
	return nil
}

// endsNow is what is held, as one Ends (nil when there is nothing to
// say), marked Last when last; the timer stops. r.mu is held.
func (r *Relay) endsNow(last bool) *wire.Ends {
	es := &r.ends
	if es.timer != nil && es.timer.Stop() {
		r.wg.Done()
	}
	es.timer = nil
	e := &wire.Ends{Last: last}
	if es.own != ownRunning && !es.ownSent {
		e.Self, e.Done = es.own == ownClean, es.own == ownFailed
		es.ownSent = true
	}
	if len(es.hosts) > 0 {
		slices.Sort(es.hosts)
		e.Hosts = slices.Compact(es.hosts)
		es.hosts = nil
		if r.spans {
			f := wire.Fences{Hosts: e.Hosts}
			f.Compact()
			e.Hosts, e.Spans = nil, f.Spans
		}
	}
	e.Stopped, es.stopped = es.stopped, 0
	if last {
		es.over = true
	}
	if !last && !e.Self && !e.Done && len(e.Hosts) == 0 && len(e.Spans) == 0 {
		return nil
	}
	return e
}

// sendEnds sends e, if any. r.endsMu is held from e's making to here:
// what is held and sent after a Last would be a violation, and two
// goroutines that made their Ends in one order must send them in it.
func (r *Relay) sendEnds(e *wire.Ends) {
	if e != nil {
		_ = r.up.Send(wire.KindEnds, e)
	}
}
