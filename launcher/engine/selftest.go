package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/cli"
	"github.com/gangway-hpc/gangway/launcher/selftest"
)

// Bounds of each direction of each pair of the fabric self-test: it
// ends at whichever comes first. 64 MiB take tens of milliseconds on a
// healthy link (a few ms at 100 Gb/s); a link at 100 Mb/s stops at the
// time bound with about 25 MB sent, enough to time it.
const (
	selftestBytes  = 64 << 20
	selftestWithin = 2 * time.Second
	// selftestWait bounds the wait for one step's answers: the stream,
	// the agents' handshake (5 s) and drain (10 s), and some slack.
	selftestWait = selftestWithin + 20*time.Second
)

// SelftestError is the ending of an attempt the self-test stopped before
// any rank started: --selftest=strict found slow hosts, or (Replace) it
// found no more slow hosts than spares stand by, which take their places
// (Run's replaceUnfit). The slow hosts, slowest first, as named and by
// index among the job's hosts.
type SelftestError struct {
	Slow    []string
	Index   []int
	Median  float64 // MB/s
	Replace bool
}

func (e *SelftestError) Error() string {
	if e.Replace {
		return fmt.Sprintf("--selftest: slow hosts %s (under a third of the median host's %.1f MB/s): to be left out for spares",
			strings.Join(e.Slow, ", "), e.Median)
	}
	return fmt.Sprintf("--selftest=strict: slow hosts %s (under a third of the median host's %.1f MB/s): leave them out of the host list, or use --selftest to only report",
		strings.Join(e.Slow, ", "), e.Median)
}

// runSelftest is the fabric self-test (--selftest): every host opens a
// sink; then, step by step, pairs of hosts (ring neighbours and a few
// chords, selftest.Pairs) stream to each other's sinks on the addresses
// the ranks will use, each host in one stream at a time; the launcher
// prints each pair's bandwidth, the median and the slow hosts, and with
// strict stops the job when a host is slow.
func (j *job) runSelftest(ctx context.Context, addrs []string) error {
	mode, n := j.cfg.Network.Selftest, len(j.sessions)
	if mode == cli.SelftestOff {
		return nil
	}
	if n < 2 {
		if !j.cfg.Out.Quiet {
			j.out.say("selftest: one host: no pair to measure")
		}
		return nil
	}
	var old []string
	for _, s := range j.sessions {
		if s.facts.Selftest < wire.SelftestVersion {
			old = append(old, label(s))
		}
	}
	if len(old) > 0 {
		return fmt.Errorf("--selftest: the agents on %s do not serve the fabric self-test (upgrade them, or leave --selftest out)", strings.Join(old, ", "))
	}
	token := randomHex(wire.SelftestTokenLen / 2)
	j.broadcast(wire.KindSelftest, wire.Selftest{Op: wire.SelftestListen, Token: token})
	defer j.broadcast(wire.KindSelftest, wire.Selftest{Op: wire.SelftestClose, Token: token})
	res, err := j.collect(ctx, wire.KindSelftestResult, 30*time.Second)
	if err != nil {
		return fmt.Errorf("selftest: %w", err)
	}
	sinks := make([]string, n)
	names := make([]string, n)
	for i, s := range j.sessions {
		var r wire.SelftestResult
		if err := res[i].Decode(&r); err != nil {
			return &hostError{Host: s.host.Name, Err: err}
		}
		if r.Err != "" || r.Port < 1 || r.Port > 65535 {
			return &hostError{Host: s.host.Name, Err: fmt.Errorf("selftest sink: port %d: %s", r.Port, r.Err)}
		}
		addr, err := literalIP(ctx, addrs[i])
		if err != nil {
			return &hostError{Host: s.host.Name, Err: fmt.Errorf("selftest: %w", err)}
		}
		sinks[i] = net.JoinHostPort(addr, strconv.Itoa(r.Port))
		names[i] = label(s)
	}
	pairs := selftest.Pairs(n)
	var ms []selftest.Measured
	for _, step := range selftest.Steps(pairs) {
		m, err := j.selftestStep(ctx, token, step, sinks)
		if err != nil {
			return err
		}
		ms = append(ms, m...)
	}
	r := selftest.Judge(names, pairs, ms, selftestBytes, selftestWithin)
	strict := mode == cli.SelftestStrict && len(r.Slow) > 0
	// With enough spares standing by, slow hosts are left out in either
	// mode: the attempt ends here and starts again on the spares.
	replace := len(r.Slow) > 0 && len(r.Slow) <= j.spares
	r.Stopped = strict || replace
	j.selftest = &r.Selftest
	var b bytes.Buffer
	selftest.Write(&b, r)
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if !j.cfg.Out.Quiet || strings.HasPrefix(line, "selftest: slow hosts") {
			j.out.say(line)
		}
	}
	if strict || replace {
		return &SelftestError{Slow: r.Outliers, Index: r.Slow, Median: r.MedianMBps, Replace: replace}
	}
	return nil
}

// selftestStep runs one step's streams at once and returns what each
// measured; a stream that failed is measured with its error, not
// returned as one (a dead link is what the test is for).
func (j *job) selftestStep(ctx context.Context, token string, step []selftest.Stream, sinks []string) ([]selftest.Measured, error) {
	from := make([]int, 0, len(step))
	for _, st := range step {
		s := j.sessions[st.From]
		m := wire.Selftest{Op: wire.SelftestSend, Token: token, Target: sinks[st.To], Bytes: selftestBytes, Within: selftestWithin}
		if err := s.conn.Send(wire.KindSelftest, m); err != nil {
			return nil, s.sendFailed("send selftest", err)
		}
		from = append(from, st.From)
	}
	got, err := j.collectFrom(ctx, wire.KindSelftestResult, from, selftestWait)
	if err != nil {
		return nil, fmt.Errorf("selftest: %w", err)
	}
	out := make([]selftest.Measured, 0, len(step))
	for _, st := range step {
		var r wire.SelftestResult
		if err := got[st.From].Decode(&r); err != nil {
			return nil, &hostError{Host: j.sessions[st.From].host.Name, Err: err}
		}
		if r.Err == "" && (r.Bytes < 0 || r.Bytes > selftestBytes || r.Took <= 0) {
			return nil, &hostError{Host: j.sessions[st.From].host.Name, Err: errors.New("selftest: a send's answer out of bounds")}
		}
		out = append(out, selftest.Measured{Stream: st, Bytes: r.Bytes, Took: r.Took, Err: r.Err})
	}
	return out, nil
}

// literalIP is addr when it is an IP address, else the first address it
// resolves to (an agent streams only to literal addresses).
func literalIP(ctx context.Context, addr string) (string, error) {
	if net.ParseIP(addr) != nil {
		return addr, nil
	}
	ips, err := net.DefaultResolver.LookupHost(ctx, addr)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", addr, err)
	}
	return ips[0], nil
}
