package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
)

// The output generator: gwbench run as a rank (`gwbench -gen BYTES`)
// writes BYTES/lineLen numbered, fixed-width lines to stdout:
//
//	r00003 l0000000042 qqqq...q\n      (100 bytes)
//
// rank (5 digits), sequence number (10 digits), then 80 copies of one
// letter that depends on the sequence number, so the verifier can tell an
// intact line from pieces of two lines glued together.
const (
	lineLen    = 100
	payloadLen = lineLen - 1 // without '\n'
	headLen    = 19          // "r00003 l0000000042 "
)

// genMain is the generator's main: args are BYTES [RANK]; without RANK the
// rank comes from the launcher's environment (gangway RANK, Hydra
// PMI_RANK, Open MPI OMPI_COMM_WORLD_RANK).
func genMain(args []string, stdout io.Writer) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "gwbench -gen BYTES [RANK]")
		return 2
	}
	total, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gwbench -gen:", err)
		return 2
	}
	rank := -1
	if len(args) > 1 {
		rank, _ = strconv.Atoi(args[1])
	}
	for _, k := range []string{"RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"} {
		if v := os.Getenv(k); rank < 0 && v != "" {
			rank, _ = strconv.Atoi(v)
		}
	}
	if rank < 0 {
		fmt.Fprintln(os.Stderr, "gwbench -gen: no rank (RANK, PMI_RANK, OMPI_COMM_WORLD_RANK)")
		return 2
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	var line [lineLen]byte
	for seq := range total / lineLen {
		fillLine(line[:], rank, seq)
		if _, err := w.Write(line[:]); err != nil {
			return 1
		}
	}
	if err := w.Flush(); err != nil {
		return 1
	}
	return 0
}

// fillLine writes line seq of rank into b (lineLen bytes).
func fillLine(b []byte, rank int, seq int64) {
	b[0] = 'r'
	putDigits(b[1:6], int64(rank))
	b[6] = ' '
	b[7] = 'l'
	putDigits(b[8:18], seq)
	b[18] = ' '
	c := byte('a' + seq%26)
	for i := headLen; i < payloadLen; i++ {
		b[i] = c
	}
	b[payloadLen] = '\n'
}

func putDigits(b []byte, v int64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
}

// verifier checks a launcher's tagged output of the generators: every
// line whole, tagged with the rank that wrote it, in order, none missing.
type verifier struct {
	// untagged: lines carry no rank tag (Hydra without -prepend-rank);
	// the rank is read from the line itself.
	untagged bool
	ranks    int
	lines    int64   // expected per rank
	next     []int64 // next sequence number per rank
	Good     int64   // intact lines, tag matching the payload's rank, in order
	Bad      int64   // rank-tagged lines that are not one whole generator line
	Gaps     int64   // intact lines that skipped ahead (lines missing before them)
	Other    int64   // untagged lines (launcher messages)
	first    []string
}

func newVerifier(ranks int, lines int64) *verifier {
	return &verifier{ranks: ranks, lines: lines, next: make([]int64, ranks)}
}

// Lost is the number of expected lines that did not arrive intact.
func (v *verifier) Lost() int64 { return int64(v.ranks)*v.lines - v.Good }

func (v *verifier) String() string {
	s := fmt.Sprintf("%d/%d lines intact, %d lost, %d mangled, %d out of order", v.Good, int64(v.ranks)*v.lines, v.Lost(), v.Bad, v.Gaps)
	if len(v.first) > 0 {
		s += fmt.Sprintf("; first bad: %q", v.first)
	}
	return s
}

// run reads r to its end.
func (v *verifier) run(r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			v.bad(line)
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			continue
		}
		if len(line) > 0 {
			v.check(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// check handles one line: a tag ("[R] " from gangway's and Hydra's
// -prepend-rank, "[1,R]<stdout>:" from mpirun --tag-output) and the
// generator's line.
func (v *verifier) check(line []byte) {
	rank, rest, ok := parseTag(line)
	if v.untagged {
		rest, ok = line, len(line) > 6 && line[0] == 'r'
		if ok {
			r, ok2 := atoi(line[1:6])
			rank, ok = int(r), ok2
		}
	}
	if !ok {
		v.Other++
		return
	}
	if len(rest) != lineLen || rest[payloadLen] != '\n' || rest[0] != 'r' || rest[6] != ' ' || rest[7] != 'l' || rest[18] != ' ' {
		v.bad(line)
		return
	}
	pr, ok1 := atoi(rest[1:6])
	seq, ok2 := atoi(rest[8:18])
	if !ok1 || !ok2 || int(pr) != rank || rank >= v.ranks {
		v.bad(line)
		return
	}
	c := byte('a' + seq%26)
	for _, b := range rest[headLen:payloadLen] {
		if b != c {
			v.bad(line)
			return
		}
	}
	if seq != v.next[rank] {
		v.Gaps++
	}
	v.next[rank] = seq + 1
	v.Good++
}

func (v *verifier) bad(line []byte) {
	v.Bad++
	if len(v.first) < 2 {
		v.first = append(v.first, string(line[:min(len(line), 140)]))
	}
}

func parseTag(line []byte) (rank int, rest []byte, ok bool) {
	if len(line) < 4 || line[0] != '[' {
		return 0, nil, false
	}
	if bytes.HasPrefix(line, []byte("[1,")) {
		i := bytes.Index(line, []byte("]<stdout>:"))
		if i < 0 {
			return 0, nil, false
		}
		r, ok := atoi(line[3:i])
		return int(r), line[i+len("]<stdout>:"):], ok
	}
	i := bytes.Index(line, []byte("] "))
	if i < 0 {
		return 0, nil, false
	}
	r, ok := atoi(line[1:i])
	return int(r), line[i+2:], ok
}

func atoi(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
