package textx

import "bytes"

// The line ends of rank output, as the agent cuts it into frames and the
// launcher tags it: a newline, or a carriage return not followed by one.
// A progress bar (tqdm, a download's meter) redraws its line after a
// carriage return, without newlines for minutes: each of its states is a
// line of its own, as a terminal shows it; "\r\n" ends one line.

// LineEnd is the index of b's first line end, or -1. A carriage return
// that ends b is one: b holds whole lines (a frame the agent sent).
func LineEnd(b []byte) int {
	nl := bytes.IndexByte(b, '\n')
	end := nl
	if end < 0 {
		end = len(b)
	}
	for off := 0; ; {
		j := bytes.IndexByte(b[off:end], '\r')
		if j < 0 {
			return nl
		}
		if j += off; j+1 == len(b) || b[j+1] != '\n' {
			return j
		}
		off = j + 1 // "\r\n": its newline is nl
	}
}

// LastLineEnd is the index of b's last line end, or -1. A carriage
// return that ends b is not one yet: b is what a read has given so far,
// and the newline of a "\r\n" may come in the next read.
func LastLineEnd(b []byte) int {
	nl := bytes.LastIndexByte(b, '\n')
	// A carriage return after the last newline, but not b's last byte.
	if cr := bytes.LastIndexByte(b[nl+1:max(nl+1, len(b)-1)], '\r'); cr >= 0 {
		return nl + 1 + cr
	}
	return nl
}
