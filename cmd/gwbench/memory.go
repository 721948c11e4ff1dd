package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/internal/osproc"
)

// memory measures a fresh agent's resident size while it runs 8 ranks
// (sleep), sampled from /proc/PID/status while all 8 are alive, and notes
// the private memory of the ranks' supervisors.
func (b *bench) memory(ctx context.Context) error {
	e := b.net
	agent := e.agentPd[0]
	rss := b.add(&Result{Scenario: "memory", Case: "agent with 8 running ranks", Metric: "VmRSS", Unit: "MiB", Launcher: "agent", Kind: Info})
	var hwm, sups float64
	j := jobSpec{Hosts: 1, PerHost: 8, Argv: []string{"/bin/sleep", "1.5"}}
	for range 3 {
		done := make(chan outcome, 1)
		go func() { done <- runTimed(ctx, cmdSpec{argv: e.gangway(j), timeout: time.Minute}) }()
		peak, seen := 0.0, false
		tick := time.NewTicker(50 * time.Millisecond)
	sample:
		for {
			select {
			case o := <-done:
				if o.Err != nil {
					tick.Stop()
					return o.Err
				}
				break sample
			case <-tick.C:
				ranks, supervisors := ranksOf(agent, "sleep")
				if len(ranks) < 8 {
					continue
				}
				st, err := procStatus(agent)
				if err != nil {
					tick.Stop()
					return err
				}
				seen = true
				peak = max(peak, st["VmRSS"])
				hwm = max(hwm, st["VmHWM"])
				var anon float64
				for _, s := range supervisors {
					if st, err := procStatus(s); err == nil {
						anon += st["RssAnon"]
					}
				}
				sups = max(sups, anon)
			}
		}
		tick.Stop()
		if !seen {
			return fmt.Errorf("never saw the agent (pid %d) with 8 running ranks", agent)
		}
		rss.Values = append(rss.Values, peak)
	}
	rss.Note = fmt.Sprintf("pid %d, VmHWM %.1f MiB; ranks: /bin/sleep 1.5 via bin/launcher -np 8; their supervisors' RssAnon %.1f MiB in all", agent, hwm, sups)
	return nil
}

// ranksOf returns the agent's ranks named comm, children of the ranks'
// supervisors (the agent's own binary re-executed, so named as the agent
// is) or of the agent itself, and the supervisors.
func ranksOf(agent int, comm string) (ranks, supervisors []int) {
	ranks = children(agent, comm)
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(agent) + "/comm")
	supervisors = children(agent, strings.TrimSpace(string(b)))
	for _, s := range supervisors {
		ranks = append(ranks, children(s, comm)...)
	}
	return ranks, supervisors
}

// agentHWM records the largest VmHWM of the bed's agents after every
// scenario (output forwarding included).
func (b *bench) agentHWM() {
	var vals []float64
	for _, pid := range b.net.agentPd {
		if st, err := procStatus(pid); err == nil {
			vals = append(vals, st["VmHWM"])
		}
	}
	if len(vals) == 0 {
		return
	}
	s := Summarize(vals)
	b.add(&Result{Scenario: "memory", Case: "agents after all scenarios", Metric: "VmHWM (max over agents)", Unit: "MiB", Launcher: "agent", Kind: Info, Values: []float64{s.Max}, Note: fmt.Sprintf("median over the %d agents %.1f MiB", len(vals), s.Median)})
}

// procStatus reads the Vm* lines of /proc/PID/status in MiB.
func procStatus(pid int) (map[string]float64, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for line := range strings.Lines(string(raw)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(k, "Vm") && !strings.HasPrefix(k, "Rss") {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 2 && f[1] == "kB" {
			n, _ := strconv.ParseFloat(f[0], 64)
			m[k] = n / 1024
		}
	}
	return m, nil
}

// children lists pid's children named comm, from /proc.
func children(pid int, comm string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil || c == pid {
			continue
		}
		if s, err := osproc.ReadStat(c); err == nil && s.Comm == comm && s.PPid == pid {
			out = append(out, c)
		}
	}
	return out
}

// cpuTimes returns the user+system CPU time of pids themselves and of
// their reaped children (ranks), from /proc/PID/stat, in clock ticks.
func cpuTimes(pids []int) (self, kids int64) {
	for _, pid := range pids {
		if s, err := osproc.ReadStat(pid); err == nil {
			self += int64(s.UTime + s.STime)
			kids += s.CUTime + s.CSTime
		}
	}
	return self, kids
}

// clockTick is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTick = 10 * time.Millisecond
