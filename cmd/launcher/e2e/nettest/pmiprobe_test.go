package nettest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The PMI probe: a rank that speaks PMI-1 or PMI-2 itself over PMI_FD (no
// MPI library), asks the server one of each question docs/pmi.md lists
// and writes every answer to $GANGWAY_PROBE_OUT/rank.R, one exchange a
// line: "STEP\tREPLY". TestPMIDifferential runs it under mpiexec.hydra and
// under the launcher and compares the answers field by field.
//
// Every rank runs the same script; only some steps are one rank's (the
// publisher is rank 0, the one who looks the name up from another host is
// the last rank), and the barriers between them order them.

const (
	probeProtoEnv = "GANGWAY_PROBE_PMI" // 1 or 2
	probeOutEnv   = "GANGWAY_PROBE_OUT" // a directory for the transcripts
)

// probeConn is one rank's PMI connection and its transcript.
type probeConn struct {
	rank, size int
	rw         *bufio.ReadWriter
	out        bytes.Buffer
	kvsname    string // PMI-1: from get_my_kvsname
	jobid      string // PMI-2: from job-getid
}

// pmiProbe runs the probe script for PMI_VERSION 1 or 2.
func pmiProbe() error {
	rank, err := strconv.Atoi(os.Getenv("PMI_RANK"))
	if err != nil {
		return fmt.Errorf("PMI_RANK: %w", err)
	}
	size, err := strconv.Atoi(os.Getenv("PMI_SIZE"))
	if err != nil {
		return fmt.Errorf("PMI_SIZE: %w", err)
	}
	fd, err := strconv.Atoi(os.Getenv("PMI_FD"))
	if err != nil {
		return fmt.Errorf("PMI_FD: %w", err)
	}
	f := os.NewFile(uintptr(fd), "pmi")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("PMI_FD %d: %w", fd, err)
	}
	defer nc.Close()
	p := &probeConn{rank: rank, size: size, rw: bufio.NewReadWriter(bufio.NewReader(nc), bufio.NewWriter(nc))}
	switch os.Getenv(probeProtoEnv) {
	case "1":
		err = p.script1()
	case "2":
		err = p.script2()
	default:
		err = fmt.Errorf("%s=%q: want 1 or 2", probeProtoEnv, os.Getenv(probeProtoEnv))
	}
	path := filepath.Join(os.Getenv(probeOutEnv), "rank."+strconv.Itoa(rank))
	if werr := os.WriteFile(path, p.out.Bytes(), 0o644); err == nil {
		err = werr
	}
	return err
}

func (p *probeConn) record(step, reply string) {
	fmt.Fprintf(&p.out, "%s\t%s\n", step, reply)
}

// line1 sends one PMI-1 request line and reads one reply line.
func (p *probeConn) line1(step, req string) (string, error) {
	if _, err := p.rw.WriteString(req + "\n"); err != nil {
		return "", err
	}
	if err := p.rw.Flush(); err != nil {
		return "", err
	}
	reply, err := p.rw.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: read reply: %w", step, err)
	}
	reply = strings.TrimSuffix(reply, "\n")
	p.record(step, reply)
	return reply, nil
}

// pmi1Field is a field of a PMI-1 reply ("" when absent).
func pmi1Field(reply, key string) string {
	for _, tok := range strings.Fields(reply) {
		if v, ok := strings.CutPrefix(tok, key+"="); ok {
			return v
		}
	}
	return ""
}

func (p *probeConn) other() int { return (p.rank + 1) % p.size }
func (p *probeConn) last() bool { return p.rank == p.size-1 }

// script1 is the PMI-1 conversation.
func (p *probeConn) script1() error {
	type req struct {
		step, line string
		only       func() bool // nil: every rank
	}
	all := func() bool { return true }
	first := func() bool { return p.rank == 0 }
	steps := func(rs ...req) error {
		for _, r := range rs {
			if r.only != nil && !r.only() {
				continue
			}
			line := strings.ReplaceAll(r.line, "$KVS", p.kvsname)
			reply, err := p.line1(r.step, line)
			if err != nil {
				return err
			}
			if r.step == "get_my_kvsname" {
				p.kvsname = pmi1Field(reply, "kvsname")
			}
		}
		return nil
	}
	barrier := func(n int) req { return req{"barrier " + strconv.Itoa(n), "cmd=barrier_in", all} }
	if err := steps(
		req{"init", "cmd=init pmi_version=1 pmi_subversion=1", all},
		req{"get_maxes", "cmd=get_maxes", all},
		req{"get_appnum", "cmd=get_appnum", all},
		req{"get_my_kvsname", "cmd=get_my_kvsname", all},
		req{"get_universe_size", "cmd=get_universe_size", all},
		req{"get PMI_process_mapping", "cmd=get kvsname=$KVS key=PMI_process_mapping", all},
		req{"put", fmt.Sprintf("cmd=put kvsname=$KVS key=probe-%d value=v-%d", p.rank, p.rank), all},
		barrier(1),
		req{"get put by another rank", fmt.Sprintf("cmd=get kvsname=$KVS key=probe-%d", p.other()), all},
		req{"get missing key", "cmd=get kvsname=$KVS key=probe-missing", all},
		req{"publish_name", "cmd=publish_name service=probe-svc port=port-0", first},
		req{"publish_name duplicate", "cmd=publish_name service=probe-svc port=port-dup", first},
		barrier(2),
		req{"lookup_name from another rank", "cmd=lookup_name service=probe-svc", p.last},
		req{"lookup_name missing", "cmd=lookup_name service=probe-nosuch", all},
		barrier(3),
		req{"unpublish_name by another rank", "cmd=unpublish_name service=probe-svc", p.last},
		barrier(4),
		req{"unpublish_name missing", "cmd=unpublish_name service=probe-svc", first},
		req{"lookup_name after unpublish", "cmd=lookup_name service=probe-svc", first},
	); err != nil {
		return err
	}
	if p.rank == 0 {
		// MPI_Comm_spawn's request: one command, one process of
		// /bin/true, no arguments, no preput values, no info.
		spawn := strings.Join([]string{"mcmd=spawn", "nprocs=1", "execname=/bin/true", "totspawns=1", "spawnssofar=1",
			"argcnt=0", "preput_num=0", "info_num=0", "endcmd"}, "\n")
		if _, err := p.line1("spawn", spawn); err != nil {
			return err
		}
	}
	return steps(barrier(5), req{"finalize", "cmd=finalize", all})
}

// PMI-2 framing: a 6-byte decimal length, then the command.
func (p *probeConn) cmd2(step string, pairs ...string) (map[string]string, error) {
	payload := strings.Join(pairs, ";") + ";"
	if _, err := fmt.Fprintf(p.rw, "%6d%s", len(payload), payload); err != nil {
		return nil, err
	}
	if err := p.rw.Flush(); err != nil {
		return nil, err
	}
	var h [6]byte
	if _, err := io.ReadFull(p.rw, h[:]); err != nil {
		return nil, fmt.Errorf("%s: read reply header: %w", step, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(h[:])))
	if err != nil || n <= 0 || n > 1<<16 {
		return nil, fmt.Errorf("%s: bad reply header %q", step, h)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(p.rw, body); err != nil {
		return nil, fmt.Errorf("%s: read reply: %w", step, err)
	}
	p.record(step, string(body))
	fields := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(string(body), ";"), ";") {
		k, v, _ := strings.Cut(kv, "=")
		fields[k] = v
	}
	return fields, nil
}

// script2 is the PMI-2 conversation.
func (p *probeConn) script2() error {
	reply, err := p.line1("init", "cmd=init pmi_version=2 pmi_subversion=0")
	if err != nil {
		return err
	}
	if pmi1Field(reply, "rc") != "0" {
		return fmt.Errorf("PMI-2 init refused: %q", reply)
	}
	type req struct {
		step  string
		pairs []string
		only  func() bool
	}
	r := func(step string, pairs ...string) req { return req{step, pairs, nil} }
	one := func(only func() bool, step string, pairs ...string) req { return req{step, pairs, only} }
	first := func() bool { return p.rank == 0 }
	fence := func(n int) req { return r("kvs-fence "+strconv.Itoa(n), "cmd=kvs-fence") }
	steps := func(rs ...req) error {
		for _, q := range rs {
			if q.only != nil && !q.only() {
				continue
			}
			pairs := make([]string, len(q.pairs))
			for i, kv := range q.pairs {
				pairs[i] = strings.ReplaceAll(kv, "$JOB", p.jobid)
			}
			f, err := p.cmd2(q.step, pairs...)
			if err != nil {
				return err
			}
			if q.step == "job-getid" {
				p.jobid = f["jobid"]
			}
		}
		return nil
	}
	if err := steps(
		r("fullinit", "cmd=fullinit", "pmirank="+strconv.Itoa(p.rank), "threaded=FALSE"),
		r("job-getid", "cmd=job-getid"),
		r("info-getjobattr PMI_process_mapping", "cmd=info-getjobattr", "key=PMI_process_mapping"),
		r("info-getjobattr universeSize", "cmd=info-getjobattr", "key=universeSize"),
		r("info-putnodeattr", "cmd=info-putnodeattr", fmt.Sprintf("key=probe-node-%d", p.rank), fmt.Sprintf("value=n-%d", p.rank)),
		r("info-getnodeattr own", "cmd=info-getnodeattr", fmt.Sprintf("key=probe-node-%d", p.rank), "wait=FALSE"),
		r("info-getnodeattr missing", "cmd=info-getnodeattr", "key=probe-node-missing", "wait=FALSE"),
		r("kvs-put", "cmd=kvs-put", fmt.Sprintf("key=probe-%d", p.rank), fmt.Sprintf("value=v-%d", p.rank)),
		fence(1),
		r("kvs-get put by another rank", "cmd=kvs-get", "jobid=$JOB", "srcid=-1", fmt.Sprintf("key=probe-%d", p.other())),
		r("kvs-get missing key", "cmd=kvs-get", "jobid=$JOB", "srcid=-1", "key=probe-missing"),
		one(first, "name-publish", "cmd=name-publish", "name=probe-svc", "port=port-0", "infokeycount=0"),
		one(first, "name-publish duplicate", "cmd=name-publish", "name=probe-svc", "port=port-dup", "infokeycount=0"),
		one(first, "kvs-put published", "cmd=kvs-put", "key=probe-published", "value=1"),
		fence(2),
		// Hydra's kvs-fence answers at once (its kvs-get waits for the
		// other ranks' fences instead), so a fence alone does not order
		// rank 0's publish before this lookup there: a get of a key rank 0
		// put after publishing does.
		one(p.last, "kvs-get published", "cmd=kvs-get", "jobid=$JOB", "srcid=0", "key=probe-published"),
		one(p.last, "name-lookup from another rank", "cmd=name-lookup", "name=probe-svc", "infokeycount=0"),
		r("name-lookup missing", "cmd=name-lookup", "name=probe-nosuch", "infokeycount=0"),
		fence(3),
		one(p.last, "name-unpublish by another rank", "cmd=name-unpublish", "name=probe-svc", "infokeycount=0"),
		one(p.last, "kvs-put unpublished", "cmd=kvs-put", "key=probe-unpublished", "value=1"),
		fence(4),
		one(first, "kvs-get unpublished", "cmd=kvs-get", "jobid=$JOB", "srcid="+strconv.Itoa(p.size-1), "key=probe-unpublished"),
		one(first, "name-unpublish missing", "cmd=name-unpublish", "name=probe-svc", "infokeycount=0"),
		one(first, "name-lookup after unpublish", "cmd=name-lookup", "name=probe-svc", "infokeycount=0"),
		one(first, "spawn", "cmd=spawn", "ncmds=1", "preputcount=0", "subcmd=/bin/true", "maxprocs=1", "argc=0", "infokeycount=0"),
		fence(5),
		r("finalize", "cmd=finalize"),
	); err != nil {
		return err
	}
	return nil
}
