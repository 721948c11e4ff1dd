package diagnose

import (
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// Blame is the host an attempt's ending is put down to, when the node
// rather than the program is at fault, and why.
type Blame struct {
	Host string
	Why  string
}

// nodeFault are stderr lines that name the node rather than the program:
// the GPU or its memory failed, fell off the bus or is held elsewhere,
// the InfiniBand fabric returned errors. A program's own CUDA error (an
// illegal address, an out-of-memory) is not here: another node would
// fail it the same way.
var nodeFault = []*regexp.Regexp{
	regexp.MustCompile(`(?i)uncorrectable ECC error`),
	regexp.MustCompile(`(?i)\bECC error\b`),
	regexp.MustCompile(`(?i)Xid\b.*\b(48|63|64|74|79|92|94|95)\b`),
	regexp.MustCompile(`(?i)fallen off the bus|GPU has fallen off|GPU is lost`),
	regexp.MustCompile(`(?i)no CUDA-capable device is detected`),
	regexp.MustCompile(`(?i)CUDA-capable device\(s\) is/are busy or unavailable|cudaErrorDevicesUnavailable`),
	regexp.MustCompile(`(?i)NVLink (error|fatal)`),
	regexp.MustCompile(`(?i)NCCL WARN NET/IB.*(completion with error|Got completion|port .* not active)`),
	regexp.MustCompile(`(?i)ibv_\w+ failed|IBV_WC_RETRY_EXC_ERR|transport retry counter exceeded`),
	regexp.MustCompile(`(?i)Input/output error.*(nvidia|/dev/nvidia)`),
}

// BlameFor decides whether an attempt that ended with re (its first
// failure) is the node's fault: its agent was lost (the node died or its
// network did), a rank was killed by SIGBUS (a memory error the kernel
// raised), or the rank's last stderr lines (tail, oldest first) name a
// GPU, GPU memory or fabric fault. ok is false for everything else: the
// program's own errors, which a restart elsewhere would not cure.
func BlameFor(re *RankError, tail []string) (b Blame, ok bool) {
	if re == nil {
		return Blame{}, false
	}
	switch {
	case re.ExitCode == ExitLost && re.CutOffBy != "":
		return Blame{Host: re.CutOffBy, Why: "a relay lost with the hosts behind it"}, true
	case re.ExitCode == ExitLost:
		return Blame{Host: re.Host, Why: re.Err}, true
	case re.Signal == int(syscall.SIGBUS):
		return Blame{Host: re.Host, Why: "rank " + strconv.Itoa(re.Rank) + " was killed by SIGBUS (a memory error on the node)"}, true
	}
	for i := len(tail) - 1; i >= 0; i-- {
		line := strings.TrimSpace(tail[i])
		for _, re2 := range nodeFault {
			if re2.MatchString(line) {
				return Blame{Host: re.Host, Why: "rank " + strconv.Itoa(re.Rank) + "'s stderr names a node fault: " + clip(line, 160)}, true
			}
		}
	}
	return Blame{}, false
}

// clip shortens a rank's line to n bytes at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// Blame is the hosts an attempt's ending is put down to: every host whose
// agent was lost (the node died, or its network did: what the other
// ranks then fail with is a consequence), else the first failure's host
// when BlameFor blames it. Nil when the program is at fault.
func (fs Failures) Blame() []Blame {
	var out []Blame
	seen := map[string]bool{}
	for _, f := range fs.List {
		b, ok := BlameFor(f, nil)
		if f.ExitCode == ExitLost && ok && !seen[b.Host] {
			seen[b.Host] = true
			out = append(out, b)
		}
	}
	if len(out) > 0 || len(fs.List) == 0 {
		return out
	}
	first := fs.List[0]
	var tail []string
	if fs.Tail != nil {
		tail = fs.Tail(first.Rank)
	}
	if b, ok := BlameFor(first, tail); ok {
		return []Blame{b}
	}
	return nil
}
