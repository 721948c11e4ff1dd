package pmi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// PMI-1 limits as hydra advertises them (cmd=maxes). The client clamps the
// value length to 1024-256-64-30 = 674 (docs/pmi.md §1.3).
const (
	pmi1KVSNameMax = 256
	pmi1KeyMax     = 64
	pmi1ValMax     = 1024
	// pmi1ReplyMax is the longest reply line, '\n' included, that the
	// client's 1024-byte PMIU_readline returns in one piece.
	pmi1ReplyMax = 1023
)

// getResultPrefix is the fixed part of a found get_result; the value is last.
const getResultPrefix = "cmd=get_result rc=0 msg=success value="

// attr is one key=value pair of a request, in wire order.
type attr struct{ key, val string }

// attrs is a parsed request; lookups take the first occurrence of a key.
type attrs []attr

func (a attrs) get(key string) (string, bool) {
	for _, kv := range a {
		if kv.key == key {
			return kv.val, true
		}
	}
	return "", false
}

func (a attrs) str(key string) string { v, _ := a.get(key); return v }

// parsePMI1 parses one PMI-1 line (without or with its '\n'): tokens
// separated by spaces, each split at its first '='. A token that starts with
// "value=" takes the rest of the line, spaces included (flux keyval_parse
// style), so Open MPI's space-padded base64 survives. Tokens without '=' or
// with an empty key are ignored.
func parsePMI1(line string) attrs {
	line = strings.TrimSuffix(line, "\n")
	line = strings.TrimSuffix(line, "\r")
	var out attrs
	for len(line) > 0 {
		if line[0] == ' ' {
			line = line[1:]
			continue
		}
		if v, ok := strings.CutPrefix(line, "value="); ok {
			out = append(out, attr{"value", v})
			break
		}
		tok := line
		if i := strings.IndexByte(line, ' '); i >= 0 {
			tok, line = line[:i], line[i+1:]
		} else {
			line = ""
		}
		if k, v, ok := strings.Cut(tok, "="); ok && k != "" {
			out = append(out, attr{k, v})
		}
	}
	return out
}

// readLine reads one '\n'-terminated line. A last line without '\n' is
// dropped (the client always terminates its lines).
func (c *conn) readLine() (string, error) {
	b, err := c.br.ReadSlice('\n')
	switch {
	case errors.Is(err, io.EOF) || (err == nil && len(b) == 0):
		return "", io.EOF
	case err != nil:
		return "", fmt.Errorf("read PMI-1 line: %w", err)
	}
	return string(b), nil
}

// writeLine sends one PMI-1 reply line, refusing lines the client would
// split.
func (c *conn) writeLine(line string) error {
	c.s.debugf("pmi rank %d <- %s", c.id(), line)
	if len(line)+1 > pmi1ReplyMax {
		return fmt.Errorf("PMI-1 reply of %d bytes exceeds %d", len(line)+1, pmi1ReplyMax)
	}
	return c.write([]byte(line + "\n"))
}

// servePMI1 runs the PMI-1 request loop. It returns v2=true when the client
// asked for PMI-2 (cmd=init pmi_version=2) and was acknowledged.
func (c *conn) servePMI1() (v2 bool, err error) {
	s := c.s
	for {
		line, err := c.readLine()
		if err != nil {
			return false, err
		}
		if err := c.awaitReply(); err != nil {
			return false, err
		}
		c.s.debugf("pmi rank %d -> %s", c.id(), strings.TrimSuffix(line, "\n"))
		req := parsePMI1(line)
		if _, ok := req.get("mcmd"); ok {
			if err := c.skipMulti(); err != nil {
				return false, err
			}
			if err := c.writeLine("cmd=spawn_result rc=-1 msg=spawn_not_supported"); err != nil {
				return false, err
			}
			continue
		}
		var reply string
		switch cmd := req.str("cmd"); cmd {
		case "init":
			switch req.str("pmi_version") {
			case "1":
				reply = "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"
				s.setInitialized(c.id())
			case "2":
				return true, c.writeLine("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0")
			default:
				reply = "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1"
			}
		case "initack":
			rank, err := strconv.Atoi(req.str("pmiid"))
			if err == nil {
				err = c.confirm(rank)
			}
			if err != nil {
				return false, fmt.Errorf("initack %q: %w", req.str("pmiid"), err)
			}
			reply = fmt.Sprintf("cmd=initack\ncmd=set size=%d\ncmd=set rank=%d\ncmd=set debug=0", s.job.Size, rank)
		case "get_maxes":
			reply = fmt.Sprintf("cmd=maxes kvsname_max=%d keylen_max=%d vallen_max=%d", pmi1KVSNameMax, pmi1KeyMax, pmi1ValMax)
		case "get_appnum":
			reply = "cmd=appnum appnum=" + strconv.Itoa(s.job.AppNum)
		case "get_my_kvsname":
			reply = "cmd=my_kvsname kvsname=" + s.job.KVSName
		case "get_universe_size":
			size := s.job.UniverseSize
			if size <= 0 {
				size = -1
			}
			reply = "cmd=universe_size size=" + strconv.Itoa(size)
		case "put":
			reply = c.pmi1Put(req)
		case "get":
			reply = c.pmi1Get(req)
		case "barrier_in":
			// Released by whoever completes the barrier (pmi1BarrierOut):
			// no goroutine waits for it.
			done := c.later()
			if _, err := s.barrier(c, func(seq int, err error) { c.pmi1BarrierOut(seq, err); done() }); err != nil {
				return false, err // closes the connection: barrier_out has no rc
			}
			continue
		case "finalize":
			s.setFinalized(c.id())
			reply = "cmd=finalize_ack"
		case "abort":
			code, err := strconv.Atoi(req.str("exitcode"))
			if err != nil {
				code = 1
			}
			if s.ev.Abort != nil && !c.aborted {
				s.ev.Abort(c.id(), code, req.str("msg"))
			}
			c.aborted = true // reported once
			continue         // no reply: the client waits to be killed
		case "publish_name", "unpublish_name", "lookup_name":
			// The job-wide name service answers from elsewhere (the
			// launcher): wait off the reader, as a barrier does.
			c.async(func() error { return c.writeLine(c.pmi1Name(cmd, req)) })
			continue
		default:
			reply = "cmd=" + pmi1Token(cmd) + "_result rc=-1 msg=unknown_command"
		}
		if err := c.writeLine(reply); err != nil {
			return false, err
		}
	}
}

// pmi1BarrierOut releases the rank from a completed barrier. A failed
// barrier closes the connection: barrier_out has no rc.
func (c *conn) pmi1BarrierOut(_ int, err error) {
	if err != nil {
		c.s.debugf("pmi conn rank %d: %v", c.id(), err)
		c.nc.Close()
		return
	}
	const line = "cmd=barrier_out"
	c.s.debugf("pmi rank %d <- %s", c.id(), line)
	c.writeNow([]byte(line + "\n"))
}

// pmi1Put answers cmd=put, buffering the key for the next barrier.
func (c *conn) pmi1Put(req attrs) string {
	key, _ := req.get("key")
	val, hasVal := req.get("value")
	switch {
	case !c.kvsnameOK(req):
		return "cmd=put_result rc=-1 msg=unknown_kvsname"
	case key == "" || !hasVal:
		return "cmd=put_result rc=-1 msg=missing_key_or_value"
	case len(key) > pmi1KeyMax:
		return "cmd=put_result rc=-1 msg=key_too_long"
	case len(getResultPrefix)+len(val)+1 > pmi1ReplyMax:
		// Could never be returned in one get_result line.
		return "cmd=put_result rc=-1 msg=value_too_long"
	}
	if err := c.s.kvs.put(key, val); err != nil {
		return "cmd=put_result rc=-1 msg=" + pmi1Token(err.Error())
	}
	return "cmd=put_result rc=0 msg=success"
}

// pmi1Get answers cmd=get from the cache; it never blocks.
func (c *conn) pmi1Get(req attrs) string {
	key := req.str("key")
	switch {
	case !c.kvsnameOK(req):
		return "cmd=get_result rc=-1 msg=unknown_kvsname value=unknown"
	case key == "" || len(key) > pmi1KeyMax:
		return "cmd=get_result rc=-1 msg=bad_key value=unknown"
	}
	val, ok := c.s.kvs.get(key)
	switch {
	case !ok:
		return "cmd=get_result rc=-1 msg=key_" + key + "_not_found value=unknown"
	case len(getResultPrefix)+len(val)+1 > pmi1ReplyMax:
		return "cmd=get_result rc=-1 msg=value_too_long value=unknown"
	}
	return getResultPrefix + val
}

// pmi1Name answers publish_name, unpublish_name and lookup_name through
// the job's name service, in Hydra's words (pmiserv_pmi_v1.c).
func (c *conn) pmi1Name(cmd string, req attrs) string {
	service := req.str("service")
	result := "cmd=" + strings.TrimSuffix(cmd, "_name") + "_result"
	if service == "" {
		return result + " rc=-1 msg=missing_service"
	}
	names := c.s.names
	switch cmd {
	case "publish_name":
		switch err := names.Publish(c.ctx, service, req.str("port")); {
		case err == nil:
			return result + " info=ok rc=0 msg=success"
		case errors.Is(err, ErrNameExists):
			return result + " info=ok rc=1 msg=key_already_present"
		default:
			return result + " rc=-1 msg=" + pmi1Token(err.Error())
		}
	case "unpublish_name":
		switch err := names.Unpublish(c.ctx, service); {
		case err == nil:
			return result + " info=ok rc=0 msg=success"
		case errors.Is(err, ErrNameNotFound):
			return result + " info=ok rc=1 msg=service_not_found"
		default:
			return result + " rc=-1 msg=" + pmi1Token(err.Error())
		}
	}
	switch port, err := names.Lookup(c.ctx, service); {
	case err == nil:
		return result + " port=" + port + " info=ok rc=0 msg=success"
	case errors.Is(err, ErrNameNotFound):
		return result + " rc=1 msg=service_not_found"
	default:
		return result + " rc=-1 msg=" + pmi1Token(err.Error())
	}
}

// kvsnameOK accepts requests for this job's kvsname, or with none given.
func (c *conn) kvsnameOK(req attrs) bool {
	name, ok := req.get("kvsname")
	return !ok || name == c.s.job.KVSName
}

// skipMulti consumes a multi-line command (mcmd=spawn ... endcmd).
func (c *conn) skipMulti() error {
	for {
		line, err := c.readLine()
		if err != nil {
			return err
		}
		if bytes.Equal(bytes.TrimSpace([]byte(line)), []byte("endcmd")) {
			return nil
		}
	}
}

// pmi1Token makes s safe inside a reply token.
func pmi1Token(s string) string {
	if s == "" {
		return "unknown"
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == '=' || r > '~' {
			return '_'
		}
		return r
	}, s)
}
