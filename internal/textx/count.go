package textx

import "strconv"

// Count is n and a noun that agrees with it: "1 host", "2 hosts", "0
// hosts". one is the singular; the plural adds an s (every noun the
// launcher and the agent count: host, rank, slot, CPU, GPU, socket).
func Count(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + one + "s"
}
