package engine

import (
	"slices"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// Stack dumps (hang diagnosis), as the pure state decides them.

// dump is one collection of every rank's stacks.
type dump struct {
	pending map[int]bool // hosts that have not answered
	stop    bool         // stop the job once collected
	cause   error        // and end it with this cause (nil: the cause it has)
	stacks  map[int]string
	tools   []string
}

// The tools a dump names: agents use a handful ("gdb", "faulthandler"...);
// more, or longer names, are not kept.
const (
	maxTools   = 8
	maxToolLen = 64
)

// startDump asks every running host for its ranks' stacks, waiting for
// them within at most; stop stops the job once they are in, ending it
// with cause unless that is nil. Abort lets the agents end ranks in ways
// that print stacks (the job is being stopped anyway).
func (st *state) startDump(say string, abort, stop bool, cause error, within time.Duration) []action {
	if st.dump != nil { // a dump is on its way: stop after it, and wait no longer than this one would
		st.dump.stop = st.dump.stop || stop
		return []action{actDumpWithin{within}}
	}
	d := &dump{pending: map[int]bool{}, stop: stop, cause: cause, stacks: map[int]string{}}
	// A job that is stopped once the stacks are in blames nobody for what
	// the collection does to its ranks (SIGABRT, SIGQUIT).
	st.ended = st.ended || stop
	for h := range st.hosts {
		if !st.done[h] {
			d.pending[h] = true
		}
	}
	st.dump = d
	acts := []action{actSay{say}, actDump{abort: abort, within: within}}
	if len(d.pending) == 0 {
		acts = append(acts, st.finishDump()...)
	}
	return acts
}

// dumped takes one host's stacks; the last host's completes the dump.
func (st *state) dumped(host int, d wire.Dumped) []action {
	if st.dump == nil || !st.dump.pending[host] {
		return nil
	}
	delete(st.dump.pending, host)
	for r, text := range d.Stacks {
		if st.owns(host, r) {
			st.dump.stacks[r] = text
		}
	}
	for _, t := range d.Tools {
		if len(st.dump.tools) < maxTools && len(t) <= maxToolLen && !slices.Contains(st.dump.tools, t) {
			st.dump.tools = append(st.dump.tools, t)
		}
	}
	if len(st.dump.pending) > 0 {
		return nil
	}
	return st.finishDump()
}

// noDumpFrom stops waiting for host's stacks (it is lost or cut off); the
// last host's end completes the dump.
func (st *state) noDumpFrom(host int) []action {
	if st.dump == nil || !st.dump.pending[host] {
		return nil
	}
	delete(st.dump.pending, host)
	if len(st.dump.pending) > 0 {
		return nil
	}
	return st.finishDump()
}

// finishDump reports the stacks, then stops the job if asked to.
func (st *state) finishDump() []action {
	d := st.dump
	st.dump = nil
	acts := []action{actStacks{stacks: d.stacks, tools: d.tools}}
	if d.cause != nil {
		acts = append(acts, actCancel{d.cause})
	}
	if d.stop {
		acts = append(acts, st.stop()...)
	}
	return acts
}
