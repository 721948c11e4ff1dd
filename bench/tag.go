package bench

import "bytes"

// maxTagDigits bounds the digits of a rank or job id in a tag, so a rank
// always fits in an int.
const maxTagDigits = 9

// StripTag removes a rank tag from the start of line and returns the rank and
// the rest of the line. It knows three styles:
//
//	[1,3]<stdout>:text   mpirun --tag-output (rank 3; job id ignored)
//	[3]<stderr>:text     horovodrun
//	[3] text             gangway's -l and Hydra's -prepend-rank
//
// ok is false, and rest is line, when line carries no tag. rest aliases line.
func StripTag(line []byte) (rank int, rest []byte, ok bool) {
	if len(line) < 3 || line[0] != '[' {
		return 0, line, false
	}
	a, n := tagNumber(line[1:])
	if n == 0 {
		return 0, line, false
	}
	i := 1 + n
	if i < len(line) && line[i] == ',' {
		b, m := tagNumber(line[i+1:])
		if m == 0 {
			return 0, line, false
		}
		i += 1 + m
		if r, ok := tagStream(line[i:]); ok {
			return b, r, true
		}
		return 0, line, false
	}
	if i >= len(line) || line[i] != ']' {
		return 0, line, false
	}
	if r, ok := tagStream(line[i:]); ok {
		return a, r, true
	}
	if i+1 < len(line) && line[i+1] == ' ' {
		return a, line[i+2:], true
	}
	return 0, line, false
}

// tagNumber reads 1..maxTagDigits decimal digits and returns their value and
// how many bytes it read (0 for none or too many).
func tagNumber(b []byte) (int, int) {
	v, n := 0, 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		if n == maxTagDigits {
			return 0, 0
		}
		v = v*10 + int(b[n]-'0')
		n++
	}
	return v, n
}

// tagStream matches "]<stdout>:" or "]<stderr>:" and returns what follows.
func tagStream(b []byte) ([]byte, bool) {
	for _, p := range [][]byte{[]byte("]<stdout>:"), []byte("]<stderr>:")} {
		if bytes.HasPrefix(b, p) {
			return b[len(p):], true
		}
	}
	return nil, false
}
