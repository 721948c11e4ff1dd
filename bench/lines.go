package bench

import (
	"bytes"
	"time"
)

// ObserveLines is Observe for every line of data: data is split at each
// '\n' (which the lines handed on do not keep), and a last piece without
// a newline is a line too; an empty data holds no line. The result is
// exactly that of calling Observe per line, but without custom metrics
// only the lines that start as a built-in figure can are examined further:
// the launcher hands it a whole output frame of hundreds of lines.
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
	n := eachCandidate(data, func(line []byte) {
		_, rest, _ := StripTag(trimEOL(line))
		if mayMatchBuiltin(rest) {
			c.enqueue(rank, host, t, line)
		}
	})
	c.observed.Add(int64(n))
}

// cutLine splits the first line (without its newline) off data.
func cutLine(data []byte) (line, rest []byte) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return data[:i], data[i+1:]
	}
	return data, nil
}

// eachCandidate calls f with every line of data (as cutLine splits them)
// for which mayMatchBuiltin(StripTag(trimEOL(line))) can be true: those
// that start with a tag or with a byte a built-in figure can start with
// (StripTag only removes a prefix that starts with '['). It returns the
// number of lines in data.
func eachCandidate(data []byte, f func(line []byte)) (lines int) {
	for off := 0; off < len(data); lines++ {
		end := len(data)
		if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
			end = off + i
		}
		if end > off && (builtinStart[data[off]] || data[off] == '[') {
			f(data[off:end])
		}
		off = end + 1
	}
	return lines
}
