package relay

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// Answers gathered per subtree (wire.Gathered, told Hello.Gather): what
// the launcher asks of every host and then waits for from all of them (a
// start's Ready, a preflight's ProbeResult) goes up from a relay in one
// frame for its own host and its subtree, not one frame a host. The
// launcher asks this host first and its children after (a host's relay
// comes before it in the launch), so when this host's session takes the
// request for itself (Begin), the relay waits for its own answer and
// one from each child it holds: the child's own, or the child's own
// subtree's Gathered. A child lost meanwhile is no longer waited for.

// gatherWait bounds how long a relay holds answers for the rest: it
// then sends what it has, and later answers go up as they come, alone,
// so that the launcher's list of the hosts that did not answer names
// them and not their relay's whole subtree.
var gatherWait = 2 * time.Second // a variable for the tests alone

// round is one request's answers, being gathered.
type round struct {
	owe     map[int]bool // children whose answer has not come
	own     bool         // this host's own answer has not come
	seen    map[int]bool // the hosts answered
	hosts   []int
	answers []json.RawMessage
	timer   *time.Timer
}

// SetGather says whether the launcher takes Gathered (Hello.Gather).
func (r *Relay) SetGather(on bool) {
	r.mu.Lock()
	r.gatherOn = on
	r.mu.Unlock()
}

// Begin starts gathering the answers of kind k (wire.Gatherable), when
// this host's session has taken that request for itself; with no
// children, or not told to gather, it does nothing. A round of the same
// kind still gathering goes up with what it has.
func (r *Relay) Begin(k wire.Kind) {
	r.mu.Lock()
	if !r.gatherOn || r.closed || len(r.kids) == 0 {
		r.mu.Unlock()
		return
	}
	old := r.endRound(k)
	rd := &round{owe: make(map[int]bool, len(r.kids)), own: true, seen: map[int]bool{}}
	for h := range r.kids {
		rd.owe[h] = true
	}
	r.wg.Add(1)
	rd.timer = time.AfterFunc(gatherWait, func() {
		defer r.wg.Done()
		r.mu.Lock()
		var g *wire.Gathered
		if r.rounds[k] == rd {
			g = r.endRound(k) // its timer has fired: no second Done
		}
		r.mu.Unlock()
		_ = r.sendGathered(g)
	})
	if r.rounds == nil {
		r.rounds = map[wire.Kind]*round{}
	}
	r.rounds[k] = rd
	r.mu.Unlock()
	_ = r.sendGathered(old)
}

// OwnAnswer takes this host's own answer v of kind k into the round
// gathering it (true), else returns false: the session sends it itself.
func (r *Relay) OwnAnswer(k wire.Kind, v any) (bool, error) {
	r.mu.Lock()
	rd := r.rounds[k]
	if rd == nil || !rd.own {
		r.mu.Unlock()
		return false, nil // encoded once, by the session's send
	}
	raw, err := json.Marshal(v) // a small answer: under the lock, not twice
	if err != nil {
		r.mu.Unlock()
		return false, err
	}
	rd.own = false
	rd.add(r.self, raw)
	g := r.finish(k, rd)
	r.mu.Unlock()
	return true, r.sendGathered(g)
}

// childAnswer takes a child's answer (its own, or its subtree's
// Gathered) into the round gathering that kind (taken); false when no
// round waits for this child (none gathers, or it has answered): the
// frame goes up as it came. An error is the child's protocol violation.
func (r *Relay) childAnswer(c *child, m wire.Msg) (taken bool, err error) {
	var g wire.Gathered
	switch {
	case m.Kind == wire.KindGathered:
		if g, err = m.Gathered(); err != nil {
			return false, fmt.Errorf("protocol violation of %s: %w", c.name, err)
		}
	default:
		if !wire.Gatherable(m.Kind) {
			return false, nil
		}
		g = wire.Gathered{Kind: m.Kind, Hosts: []int{c.host}, Answers: []json.RawMessage{slices.Clone(m.Payload)}}
	}
	r.mu.Lock()
	rd := r.rounds[g.Kind]
	if rd == nil || !rd.owe[c.host] {
		r.mu.Unlock()
		return false, nil
	}
	for _, h := range g.Hosts {
		if h == r.self || rd.seen[h] {
			r.mu.Unlock()
			return false, fmt.Errorf("protocol violation of %s: a second %s answer for host %d", c.name, g.Kind, h)
		}
	}
	delete(rd.owe, c.host)
	for i, h := range g.Hosts {
		rd.add(h, g.Answers[i])
	}
	done := r.finish(g.Kind, rd)
	r.mu.Unlock()
	return true, r.sendGathered(done)
}

// childLost stops waiting for child host's answers; r.mu is held. It
// returns the rounds that are complete without it.
func (r *Relay) childLost(host int) []*wire.Gathered {
	var out []*wire.Gathered
	for k, rd := range r.rounds {
		if rd.owe[host] {
			delete(rd.owe, host)
			if g := r.finish(k, rd); g != nil {
				out = append(out, g)
			}
		}
	}
	return out
}

// finish ends rd, the round of kind k, when nobody is left to answer
// and returns what it gathered, else nil; r.mu is held.
func (r *Relay) finish(k wire.Kind, rd *round) *wire.Gathered {
	if rd.own || len(rd.owe) > 0 {
		return nil
	}
	return r.endRound(k)
}

// endRound removes the round of kind k, stopping its timer, and returns
// what it gathered (nil for none); r.mu is held.
func (r *Relay) endRound(k wire.Kind) *wire.Gathered {
	rd := r.rounds[k]
	if rd == nil {
		return nil
	}
	delete(r.rounds, k)
	if rd.timer.Stop() {
		r.wg.Done() // its callback will not run
	}
	return rd.gathered(k)
}

func (rd *round) add(host int, answer json.RawMessage) {
	rd.seen[host] = true
	rd.hosts = append(rd.hosts, host)
	rd.answers = append(rd.answers, answer)
}

// gathered is the frame of what rd holds, nil when it holds nothing.
func (rd *round) gathered(k wire.Kind) *wire.Gathered {
	if len(rd.hosts) == 0 {
		return nil
	}
	return &wire.Gathered{Kind: k, Hosts: rd.hosts, Answers: rd.answers}
}

// sendGathered sends g up, in frames of at most wire.MaxGathered bytes
// of answers.
func (r *Relay) sendGathered(g *wire.Gathered) error {
	if g == nil {
		return nil
	}
	for len(g.Hosts) > 0 {
		n, size := 0, 0
		for n < len(g.Hosts) {
			size += len(g.Answers[n]) + 12 // the host's index, commas
			if n > 0 && size > wire.MaxGathered {
				break
			}
			n++
		}
		if err := r.up.Send(wire.KindGathered, wire.Gathered{Kind: g.Kind, Hosts: g.Hosts[:n], Answers: g.Answers[:n]}); err != nil {
			return err
		}
		g = &wire.Gathered{Kind: g.Kind, Hosts: g.Hosts[n:], Answers: g.Answers[n:]}
	}
	return nil
}
