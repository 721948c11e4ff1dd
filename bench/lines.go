package bench

import (
	"bytes"
	"time"
)

// ObserveLines is Observe for every line of data: data is split at each
// '\n' (which the lines handed on do not keep), and a last piece without
// a newline is a line too; an empty data holds no line. The result is
// exactly that of calling Observe per line, but without custom metrics
// only the lines that can hold a built-in figure are examined one by one:
// the launcher hands it a whole output frame of thousands of lines.
func (c *Collector) ObserveLines(rank int, host string, t time.Time, data []byte) {
	if len(data) == 0 {
		return
	}
	if !c.filter {
		for len(data) > 0 {
			var line []byte
			line, data = cutLine(data)
			c.Observe(rank, host, t, line)
		}
		return
	}
	n := bytes.Count(data, nl)
	if data[len(data)-1] != '\n' {
		n++
	}
	c.observed.Add(int64(n))
	eachCandidate(data, func(line []byte) {
		_, rest, _ := StripTag(trimEOL(line))
		if mayMatchBuiltin(rest) {
			c.enqueue(rank, host, t, line)
		}
	})
}

var nl = []byte("\n")

// cutLine splits the first line (without its newline) off data.
func cutLine(data []byte) (line, rest []byte) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return data[:i], data[i+1:]
	}
	return data, nil
}

// mayStart marks the first bytes after which a line can pass
// mayMatchBuiltin without holding "/sec" or "bandwidth": a tag ('['),
// "DLL ", and blanks or a digit before a number.
var mayStart = [256]bool{'[': true, 'D': true, ' ': true, '\t': true,
	'0': true, '1': true, '2': true, '3': true, '4': true, '5': true, '6': true, '7': true, '8': true, '9': true}

// eachCandidate calls f with every line of data (as cutLine splits them)
// for which mayMatchBuiltin(StripTag(trimEOL(line))) can be true: those
// starting with a byte of mayStart or holding "/sec" or "bandwidth"
// (StripTag only removes a prefix, so the rest holds neither when the
// line does not). Both substrings are searched for over all of data, not
// per line.
func eachCandidate(data []byte, f func(line []byte)) {
	sec := nextIndex(data, 0, []byte("/sec"))
	bw := nextIndex(data, 0, []byte("bandwidth"))
	for off := 0; off < len(data); {
		end := len(data)
		if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
			end = off + i
		}
		// A substring found before this line was in an earlier line:
		// search again from here.
		if sec < off {
			sec = nextIndex(data, off, []byte("/sec"))
		}
		if bw < off {
			bw = nextIndex(data, off, []byte("bandwidth"))
		}
		if (end > off && mayStart[data[off]]) || sec < end || bw < end {
			f(data[off:end])
		}
		off = end + 1
	}
}

// nextIndex is the index of the first sub in data[from:], counted from
// the start of data; len(data) when there is none.
func nextIndex(data []byte, from int, sub []byte) int {
	if i := bytes.Index(data[from:], sub); i >= 0 {
		return from + i
	}
	return len(data)
}
