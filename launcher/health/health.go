// Package health is the launcher's room that judges the hosts of an
// attempt before any rank starts: it takes each agent's own checks
// (Facts.Health: GPUs, TMPDIR, the site's command) and adds those that
// compare hosts, gpu-count (--gpus-per-host, else the most common count)
// and ib (the RDMA ports most hosts have ACTIVE are ACTIVE here, at
// their rate). Judge is a pure function of the facts; Err turns its
// verdict into the error that stops the job. The verdict is per host, so
// that a later step can leave unhealthy hosts out and take spares
// instead. It imports no other launcher room.
package health

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// Options are the launcher's side of the checks.
type Options struct {
	// GPUsPerHost is how many GPUs every host must have (--gpus-per-host);
	// 0 takes the count most hosts have.
	GPUsPerHost int
}

// Host is one host's verdict: every check, the agent's and the
// launcher's, in the agent's order then gpu-count and ib. Name is the
// host as the layout names it (what a spare would replace), Agent the
// name its agent reports when that differs. Hosts with the same verdict
// may share one Checks (read only).
type Host struct {
	Name   string       `json:"host"`
	Agent  string       `json:"agent,omitempty"`
	Checks []wire.Check `json:"checks"`
}

// Label names h for a person: "198.18.0.2 (h1)".
func (h Host) Label() string {
	if h.Agent != "" {
		return h.Name + " (" + h.Agent + ")"
	}
	return h.Name
}

// Failed are h's failed checks (wire.Health's Failed over all of them).
func (h Host) Failed() []wire.Check {
	return (&wire.Health{Checks: h.Checks}).Failed()
}

// Healthy reports whether no check of h failed ("not checked" is not a
// failure: a missing tool does not stop a job, and is never shown as ok).
func (h Host) Healthy() bool { return len(h.Failed()) == 0 }

// Judge gives each host (the layout's names and the facts, in the
// layout's order) its verdict. A host whose facts carry no health (its agent ran no checks)
// gets one "health" check, not checked.
func Judge(names []string, facts []wire.Facts, o Options) []Host {
	counts := gpuCounts(facts, o)
	ib := ibExpect(facts)
	out := make([]Host, len(facts))
	// Hosts of one shape share their facts' health (wire.FactsDecoder)
	// and most share a verdict: one list of checks for each, not one
	// per host of a launch.
	type verdict struct {
		health    *wire.Health
		count, ib wire.Check
	}
	verdicts := map[verdict][]wire.Check{}
	// The ib check of hosts that share their ports' list (the facts
	// decoder's) is one: judge is a function of the list.
	type portList struct {
		first *wire.HCA
		n     int
	}
	ibs := map[portList]wire.Check{}
	ibJudge := func(hcas []wire.HCA) wire.Check {
		if len(hcas) == 0 {
			return ib.judge(hcas)
		}
		k := portList{&hcas[0], len(hcas)}
		c, ok := ibs[k]
		if !ok {
			c = ib.judge(hcas)
			if len(ibs) < 64 {
				ibs[k] = c
			}
		}
		return c
	}
	for i, f := range facts {
		h := Host{Name: names[i]}
		if f.Name != "" && f.Name != names[i] {
			h.Agent = f.Name
		}
		if f.Health == nil {
			h.Checks = []wire.Check{{Name: "health", Status: wire.CheckNotChecked, Detail: "the agent ran no health checks"}}
			out[i] = h
			continue
		}
		v := verdict{f.Health, counts[i], ibJudge(f.HCAs)}
		if h.Checks = verdicts[v]; h.Checks == nil {
			h.Checks = append(slices.Clone(f.Health.Checks), v.count, v.ib)
			if len(verdicts) < 64 {
				verdicts[v] = h.Checks
			}
		}
		out[i] = h
	}
	return out
}

// Unhealthy are the indices of the hosts that failed a check.
func Unhealthy(hosts []Host) []int {
	var bad []int
	for i, h := range hosts {
		if !h.Healthy() {
			bad = append(bad, i)
		}
	}
	return bad
}

// Error stops a job whose hosts failed their health checks before any
// rank started: it names each host, its failed checks and their output.
type Error struct {
	Total int    // hosts judged
	Hosts []Host // those that failed, in the layout's order
}

// Err is the Error for hosts, or nil when every host is healthy.
func Err(hosts []Host) error {
	bad := Unhealthy(hosts)
	if len(bad) == 0 {
		return nil
	}
	e := &Error{Total: len(hosts)}
	for _, i := range bad {
		e.Hosts = append(e.Hosts, hosts[i])
	}
	return e
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d hosts failed health checks, so no rank was started (--no-health-check skips them):", len(e.Hosts), e.Total)
	for _, h := range e.Hosts {
		for _, c := range h.Failed() {
			fmt.Fprintf(&b, "\n  %s: %s: %s", h.Label(), c.Name, c.Detail)
			if out := strings.TrimRight(c.Output, "\n"); out != "" {
				for l := range strings.SplitSeq(out, "\n") {
					b.WriteString("\n      " + l)
				}
			}
		}
	}
	return b.String()
}
