package pmi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// PMI-2 framing (docs/pmi.md §2.3): a 6-byte ASCII decimal length, then
// "cmd=<name>;" and "key=value;" pairs, with ';' in a value written ";;".
const (
	pmi2HeaderLen = 6
	pmi2KeyMax    = 64   // PMI2_MAX_KEYLEN
	pmi2ValMax    = 1024 // PMI2_MAX_VALLEN
	// pmi2Abort is the code Events.Abort reports for a PMI-2 abort that
	// carries no exitcode= (MPICH 4.0's does not).
	pmi2Abort = 1
)

// parsePMI2Header reads the length field. leftAligned reports a "%-6d"
// header: the MPICH ≤ 4.0 (and Slurm libpmi2) writer, whose length counts
// the header too, so its last 6 bytes are stack garbage.
func parsePMI2Header(h []byte) (n int, leftAligned bool, err error) {
	s := strings.Trim(string(h), " \x00")
	n, err = strconv.Atoi(s)
	if err != nil || n <= 0 || n > maxMessage {
		return 0, false, fmt.Errorf("bad PMI-2 length header %q", h)
	}
	return n, h[0] != ' ', nil
}

// readPMI2 reads one frame: the header, then exactly N bytes.
func readPMI2(r *bufio.Reader) (payload []byte, leftAligned bool, err error) {
	var h [pmi2HeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return nil, false, err
	}
	n, leftAligned, err := parsePMI2Header(h[:])
	if err != nil {
		return nil, false, err
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, false, fmt.Errorf("read PMI-2 command of %d bytes: %w", n, err)
	}
	return payload, leftAligned, nil
}

// parsePMI2 splits a payload into pairs: it stops at the first NUL, splits
// on single ';' (";;" is a literal ';'), drops a trailing fragment with no
// ';' terminator, and ignores tokens without '=' or with an empty key.
//
// With quirk (a left-aligned header) the real command ends 6 bytes before the
// end, followed by stack garbage. If that garbage starts with ';', the
// command's final ';' and the garbage's first would read as an escaped ';'
// and swallow the last pair, so a ';' at the boundary always terminates.
func parsePMI2(payload []byte, quirk bool) attrs {
	boundary := -1
	if quirk {
		boundary = len(payload) - pmi2HeaderLen - 1
	}
	if i := bytes.IndexByte(payload, 0); i >= 0 {
		payload = payload[:i]
	}
	var out attrs
	var tok []byte
	for i := 0; i < len(payload); i++ {
		c := payload[i]
		if c != ';' {
			tok = append(tok, c)
			continue
		}
		if i != boundary && i+1 < len(payload) && payload[i+1] == ';' {
			tok = append(tok, ';')
			i++
			continue
		}
		if k, v, ok := bytes.Cut(tok, []byte("=")); ok && len(k) > 0 {
			out = append(out, attr{string(k), string(v)})
		}
		tok = tok[:0]
	}
	return out
}

// escapePMI2 doubles every ';'.
func escapePMI2(s string) string { return strings.ReplaceAll(s, ";", ";;") }

// encodePMI2 frames a reply: "%6d" (right-aligned, space-padded, hydra's
// format) with the exact payload length, then cmd=<cmd>; and the pairs with
// their values escaped.
func encodePMI2(cmd string, pairs attrs) []byte {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(escapePMI2(cmd))
	b.WriteByte(';')
	for _, kv := range pairs {
		b.WriteString(escapePMI2(kv.key))
		b.WriteByte('=')
		b.WriteString(escapePMI2(kv.val))
		b.WriteByte(';')
	}
	return []byte(fmt.Sprintf("%6d", b.Len()) + b.String())
}

// writePMI2 sends one reply, copying thrid from the request.
func (c *conn) writePMI2(req attrs, cmd string, pairs ...attr) error {
	frame, err := c.pmi2Reply(req, cmd, pairs...)
	if err != nil {
		return err
	}
	return c.write(frame)
}

// pmi2Reply encodes one reply frame, echoing the request's thrid.
func (c *conn) pmi2Reply(req attrs, cmd string, pairs ...attr) ([]byte, error) {
	if th, ok := req.get("thrid"); ok {
		pairs = append(attrs{{"thrid", th}}, pairs...)
	}
	frame := encodePMI2(cmd, pairs)
	if len(frame)-pmi2HeaderLen > maxMessage {
		return nil, fmt.Errorf("PMI-2 reply of %d bytes", len(frame))
	}
	c.s.debugf("pmi rank %d <- %s", c.id(), frame)
	return frame, nil
}

// pmi2FenceResponse answers a kvs-fence once its barrier completed.
func (c *conn) pmi2FenceResponse(req attrs, seq int, err error) {
	pairs := []attr{rcOK}
	if err != nil {
		pairs = []attr{{"rc", "1"}, {"errmsg", fmt.Sprintf("barrier %d failed: %v", seq, err)}}
	}
	frame, err := c.pmi2Reply(req, "kvs-fence-response", pairs...)
	if err != nil {
		c.s.debugf("pmi conn rank %d: %v", c.id(), err)
		c.nc.Close()
		return
	}
	c.writeNow(frame)
}

// pmi2Err is an error reply: rc=1;errmsg=<text>;.
func (c *conn) pmi2Err(req attrs, cmd, format string, args ...any) error {
	return c.writePMI2(req, cmd+"-response", attr{"rc", "1"}, attr{"errmsg", fmt.Sprintf(format, args...)})
}

var (
	rcOK       = attr{"rc", "0"}
	foundTrue  = attr{"found", "TRUE"}
	foundFalse = attr{"found", "FALSE"}
)

// servePMI2 runs the PMI-2 request loop.
func (c *conn) servePMI2() error {
	s := c.s
	for {
		payload, quirk, err := readPMI2(c.br)
		if err != nil {
			return err
		}
		if err := c.awaitReply(); err != nil {
			return err
		}
		s.debugf("pmi rank %d -> %q", c.id(), payload)
		req := parsePMI2(payload, quirk)
		cmd := req.str("cmd")
		switch cmd {
		case "fullinit":
			err = c.pmi2Fullinit(req)
		case "job-getid":
			err = c.writePMI2(req, "job-getid-response", attr{"jobid", s.job.JobID}, rcOK)
		case "info-getjobattr":
			err = c.pmi2JobAttr(req)
		case "info-putnodeattr":
			key, ok := req.get("key")
			val, okv := req.get("value")
			switch {
			case !ok || !okv || key == "":
				err = c.pmi2Err(req, cmd, "missing key or value")
			case len(key) > pmi2KeyMax || len(val) > pmi2ValMax:
				err = c.pmi2Err(req, cmd, "key or value too long")
			default:
				if perr := s.kvs.putNodeAttr(key, val); perr != nil {
					err = c.pmi2Err(req, cmd, "%v", perr)
					break
				}
				err = c.writePMI2(req, "info-putnodeattr-response", rcOK)
			}
		case "info-getnodeattr":
			key := req.str("key")
			if key == "" {
				err = c.pmi2Err(req, cmd, "missing key")
				break
			}
			c.async(func() error {
				v, ok, err := s.kvs.getNodeAttr(c.ctx, key, req.str("wait") == "TRUE")
				switch {
				case err != nil:
					return err
				case ok:
					return c.writePMI2(req, "info-getnodeattr-response", foundTrue, attr{"value", v}, rcOK)
				}
				return c.writePMI2(req, "info-getnodeattr-response", foundFalse, rcOK)
			})
		case "kvs-put":
			key, ok := req.get("key")
			val, okv := req.get("value")
			switch {
			case !ok || !okv || key == "":
				err = c.pmi2Err(req, cmd, "missing key or value")
			case len(key) > pmi2KeyMax || len(val) > pmi2ValMax:
				err = c.pmi2Err(req, cmd, "key or value too long")
			default:
				if perr := s.kvs.put(key, val); perr != nil {
					err = c.pmi2Err(req, cmd, "%v", perr)
					break
				}
				err = c.writePMI2(req, "kvs-put-response", rcOK)
			}
		case "kvs-fence":
			// Answered by whoever completes the barrier: no goroutine
			// waits for it.
			done := c.later()
			if seq, ferr := s.barrier(c, func(seq int, ferr error) { c.pmi2FenceResponse(req, seq, ferr); done() }); ferr != nil {
				done()
				err = c.pmi2Err(req, cmd, "barrier %d failed: %v", seq, ferr)
			}
		case "kvs-get":
			if v, ok := s.kvs.get(req.str("key")); ok {
				err = c.writePMI2(req, "kvs-get-response", foundTrue, attr{"value", v}, rcOK)
			} else {
				err = c.writePMI2(req, "kvs-get-response", foundFalse, rcOK)
			}
		case "finalize":
			s.setFinalized(c.id())
			err = c.writePMI2(req, "finalize-response", rcOK)
		case "abort":
			code, cerr := strconv.Atoi(req.str("exitcode"))
			if cerr != nil {
				code = pmi2Abort
			}
			if s.ev.Abort != nil && !c.aborted {
				s.ev.Abort(c.id(), code, req.str("msg"))
			}
			c.aborted = true // reported once
		case "name-publish", "name-unpublish", "name-lookup":
			// Answered by the job-wide name service: off the reader.
			c.async(func() error { return c.pmi2Name(cmd, req) })
		case "spawn":
			err = c.pmi2Err(req, cmd, "spawn_not_supported")
		default:
			err = c.pmi2Err(req, cmd, "unknown command %q", cmd)
		}
		if err != nil {
			return err
		}
	}
}

// pmi2Name answers name-publish, name-unpublish and name-lookup through
// the job's name service, in Hydra's words (pmiserv_pmi_v2.c).
func (c *conn) pmi2Name(cmd string, req attrs) error {
	name := req.str("name")
	resp := cmd + "-response"
	if name == "" {
		return c.pmi2Err(req, cmd, "missing name")
	}
	rc1 := attr{"rc", "1"}
	names := c.s.names
	var err error
	switch cmd {
	case "name-publish":
		if err = names.Publish(c.ctx, name, req.str("port")); err == nil {
			return c.writePMI2(req, resp, rcOK)
		} else if errors.Is(err, ErrNameExists) {
			return c.writePMI2(req, resp, rc1, attr{"errmsg", "duplicate_service_" + name})
		}
	case "name-unpublish":
		if err = names.Unpublish(c.ctx, name); err == nil {
			return c.writePMI2(req, resp, rcOK)
		} else if errors.Is(err, ErrNameNotFound) {
			return c.writePMI2(req, resp, rc1, attr{"errmsg", "service_" + name + "_not_found"})
		}
	default:
		var port string
		if port, err = names.Lookup(c.ctx, name); err == nil {
			return c.writePMI2(req, resp, attr{"port", port}, foundTrue, rcOK)
		} else if errors.Is(err, ErrNameNotFound) {
			return c.writePMI2(req, resp, foundFalse, rc1)
		}
	}
	return c.pmi2Err(req, cmd, "%v", err)
}

func (c *conn) pmi2Fullinit(req attrs) error {
	s := c.s
	rank, err := strconv.Atoi(req.str("pmirank"))
	if err == nil {
		err = c.confirm(rank)
	}
	if err != nil {
		return c.pmi2Err(req, "fullinit", "pmirank %q: %v", req.str("pmirank"), err)
	}
	s.setInitialized(rank)
	return c.writePMI2(req, "fullinit-response",
		attr{"pmi-version", "2"},
		attr{"pmi-subversion", "0"},
		attr{"rank", strconv.Itoa(rank)},
		attr{"size", strconv.Itoa(s.job.Size)},
		attr{"appnum", strconv.Itoa(s.job.AppNum)},
		attr{"debugged", "FALSE"},
		attr{"pmiverbose", "FALSE"},
		rcOK)
}

func (c *conn) pmi2JobAttr(req attrs) error {
	const resp = "info-getjobattr-response"
	var v string
	var ok bool
	switch req.str("key") {
	case keyUniverseSize:
		v, ok = strconv.Itoa(c.s.job.UniverseSize), c.s.job.UniverseSize > 0
	case keyProcessMapping, keyDeadProcesses:
		v, ok = c.s.kvs.get(req.str("key"))
	}
	if !ok {
		return c.writePMI2(req, resp, foundFalse, rcOK)
	}
	return c.writePMI2(req, resp, foundTrue, attr{"value", v}, rcOK)
}
