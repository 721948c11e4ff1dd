package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// launch is scenario 1: /bin/true x 8 per host at 1..16 hosts, gangway
// (agents running, and cold over sshd) against every peer.
func (b *bench) launch(ctx context.Context) error {
	e := b.net
	counts := []int{1, 2, 4, 8, 16}
	if b.o.quick {
		counts = []int{1, 4, 16}
	}
	for _, n := range counts {
		j := jobSpec{Hosts: n, PerHost: 8, Argv: []string{"/bin/true"}}
		name := fmt.Sprintf("%d hosts x 8 /bin/true", n)
		cpu := &Result{Scenario: "launch", Case: name, Metric: "CPU of gangway's launcher (user+sys)", Unit: "ms", Launcher: lGangway, Kind: Info}
		acpu := &Result{Scenario: "launch", Case: name, Metric: "CPU of the agents themselves (sum)", Unit: "ms", Launcher: lGangway, Kind: Info, Note: "/proc/PID/stat utime+stime, 10 ms ticks"}
		rcpu := &Result{Scenario: "launch", Case: name, Metric: "CPU of the ranks (sum)", Unit: "ms", Launcher: lGangway, Kind: Info, Note: "the agents' cutime+cstime: the ranks and their supervisors"}
		var self0, kids0 int64
		cs := []contender{
			{name: lGangway, kind: Ours, argv: e.gangway(j),
				before: func() { self0, kids0 = cpuTimes(e.agentPd) },
				after: func(o outcome) {
					self, kids := cpuTimes(e.agentPd)
					cpu.Values = append(cpu.Values, ms(o.CPU))
					acpu.Values = append(acpu.Values, ms(time.Duration(self-self0)*clockTick))
					rcpu.Values = append(rcpu.Values, ms(time.Duration(kids-kids0)*clockTick))
				}},
			{name: lGangwayCold, kind: Ours, argv: e.gangwayCold(j)},
		}
		if n == 16 && !b.o.quick && b.preflightFlag() {
			// Diagnostic rows: the same without the all-pairs preflight.
			cs = append(cs,
				contender{name: lGangway + " --preflight=false", kind: Ours, argv: withFlag(e.gangway(j), "--preflight=false")},
				contender{name: lGangwayCold + " --preflight=false", kind: Ours, argv: withFlag(e.gangwayCold(j), "--preflight=false")})
		}
		peers, err := b.launchPeers(j)
		if err != nil {
			return err
		}
		cs = append(cs, peers...)
		for i := range cs {
			if cs[i].timeout == 0 {
				cs[i].timeout = time.Minute // a hung peer costs a minute, not the run
			}
		}
		b.progress("launch: %s (%d launchers, %d+%d rounds)", name, len(cs), b.o.warmup, b.o.runs)
		b.interleave(ctx, caseSpec{scenario: "launch", name: name, unit: "ms"}, cs)
		b.add(cpu)
		b.add(acpu)
		b.add(rcpu)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// launchPeers are the peers of scenario 1 that are installed: all of them,
// or with -quick only Hydra (the fastest peer in docs/testbed.md).
func (b *bench) launchPeers(j jobSpec) ([]contender, error) {
	e := b.net
	var cs []contender
	if !b.o.quick {
		if b.peer(mpirunBin) {
			tree, err := e.mpirun(j, true)
			if err != nil {
				return nil, err
			}
			flat, _ := e.mpirun(j, false)
			cs = append(cs, contender{name: lMpirun, kind: Peer, argv: tree}, contender{name: lMpirunFlat, kind: Peer, argv: flat})
		}
	}
	if b.peer(hydraBin) {
		h, err := e.hydra(j)
		if err != nil {
			return nil, err
		}
		cs = append(cs, contender{name: lHydra, kind: Peer, argv: h, timeout: time.Minute})
	}
	if !b.o.quick {
		if b.peer(pdshBin) {
			argv, env := e.pdsh(j.Hosts)
			cs = append(cs, contender{name: lPdsh, kind: Peer, argv: argv, env: env})
		}
		cs = append(cs, contender{name: lFanout, kind: Peer, argv: e.sshFanout(j.Hosts)})
	}
	return cs, nil
}

// peer reports whether bin is installed, noting it once when it is not.
func (b *bench) peer(bin string) bool {
	if have(bin) {
		return true
	}
	msg := bin + " not installed (make bench installs openmpi-bin, mpich and pdsh; Debian only)"
	for _, s := range b.skipped {
		if s == msg {
			return false
		}
	}
	b.skip("%s", msg)
	return false
}

// withFlag inserts flag after argv[0] (the launcher).
func withFlag(argv []string, flag string) []string {
	return append([]string{argv[0], flag}, argv[1:]...)
}

// preflightFlag reports whether bin/launcher has --preflight.
func (b *bench) preflightFlag() bool {
	out, _ := exec.Command(b.bins.launcher, "-h").CombinedOutput()
	return strings.Contains(string(out), "-preflight")
}
