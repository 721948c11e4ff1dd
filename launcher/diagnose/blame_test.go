package diagnose

import (
	"strings"
	"testing"
)

// TestBlameFor: a lost agent, SIGBUS and node-fault lines in the stderr
// tail blame the rank's host; a program's own errors, a plain exit code,
// SIGKILL or SIGSEGV do not.
func TestBlameFor(t *testing.T) {
	lost := &RankError{Rank: 3, Host: "gpu07", ExitCode: ExitLost, Err: "lost the agent on gpu07: connection closed"}
	exit := &RankError{Rank: 5, Host: "gpu02", Pid: 10, ExitCode: 1}
	for _, tc := range []struct {
		name string
		re   *RankError
		tail []string
		host string // "" for no blame
		why  string
	}{
		{"no failure", nil, nil, "", ""},
		{"lost agent", lost, nil, "gpu07", "lost the agent on gpu07"},
		{"sigbus", &RankError{Rank: 1, Host: "gpu03", Signal: 7, ExitCode: 135}, nil, "gpu03", "SIGBUS"},
		{"sigkill is not the node's", &RankError{Rank: 1, Host: "gpu03", Signal: 9, ExitCode: 137}, nil, "", ""},
		{"sigsegv is not the node's", &RankError{Rank: 1, Host: "gpu03", Signal: 11, ExitCode: 139}, nil, "", ""},
		{"plain exit", exit, []string{"Traceback (most recent call last):", "ValueError: bad batch"}, "", ""},
		{"cuda oom is the program's", exit, []string{"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}, "", ""},
		{"illegal address is the program's", exit, []string{"RuntimeError: CUDA error: an illegal memory access was encountered"}, "", ""},
		{"uncorrectable ecc", exit, []string{"step 10", "RuntimeError: CUDA error: uncorrectable ECC error encountered"}, "gpu02", "uncorrectable ECC error"},
		{"no device", exit, []string{"RuntimeError: No CUDA GPUs are available", "CUDA error: no CUDA-capable device is detected"}, "gpu02", "no CUDA-capable device"},
		{"busy", exit, []string{"cudaErrorDevicesUnavailable: CUDA-capable device(s) is/are busy or unavailable"}, "gpu02", "busy or unavailable"},
		{"fell off the bus", exit, []string{"NVRM: GPU at PCI:0000:07:00: GPU has fallen off the bus."}, "gpu02", "fallen off the bus"},
		{"xid 79", exit, []string{"NVRM: Xid (PCI:0000:07:00): 79, pid=1234, GPU has fallen off the bus."}, "gpu02", "Xid"},
		{"ib completion error", exit, []string{"gpu02:1234:1300 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<53242> with error 12, opcode 0, len 0, vendor err 129"}, "gpu02", "NET/IB"},
		{"ib retry exceeded", exit, []string{"transport retry counter exceeded"}, "gpu02", "retry counter"},
		{"latest line wins", exit, []string{"uncorrectable ECC error", "NCCL WARN NET/IB : Got completion with error"}, "gpu02", "NET/IB"},
		{"long line clipped", exit, []string{"uncorrectable ECC error " + strings.Repeat("é", 200)}, "gpu02", "..."},
	} {
		b, ok := BlameFor(tc.re, tc.tail)
		switch {
		case tc.host == "" && ok:
			t.Errorf("%s: blamed %+v, want no blame", tc.name, b)
		case tc.host != "" && (!ok || b.Host != tc.host || !strings.Contains(b.Why, tc.why)):
			t.Errorf("%s: %+v (ok %v), want host %s and %q in why", tc.name, b, ok, tc.host, tc.why)
		case ok && len(b.Why) > 250:
			t.Errorf("%s: why is %d bytes", tc.name, len(b.Why))
		}
	}
}

// FuzzBlameFor: any stderr tail gives an answer, never a panic, and a
// blame always names the rank's host.
func FuzzBlameFor(f *testing.F) {
	for _, s := range []string{"", "uncorrectable ECC error", "NCCL WARN NET/IB : Got completion with error", "Xid 79", "\xff\xfe ECC error \xff"} {
		f.Add(s, 1, 0)
	}
	f.Fuzz(func(t *testing.T, line string, exit, sig int) {
		re := &RankError{Rank: 2, Host: "h", ExitCode: exit, Signal: sig}
		if b, ok := BlameFor(re, strings.Split(line, "\n")); ok && b.Host != "h" {
			t.Fatalf("blamed %q", b.Host)
		}
	})
}

// TestFailuresBlame: lost agents are blamed before the rank failures they
// cause elsewhere, each host once; else the first failure decides.
func TestFailuresBlame(t *testing.T) {
	gloo := &RankError{Rank: 0, Host: "a", ExitCode: 1}
	lostB := &RankError{Rank: 8, Host: "b", ExitCode: ExitLost, Err: "lost the agent on b: connection closed"}
	lostB9 := &RankError{Rank: 9, Host: "b", ExitCode: ExitLost, Err: "lost the agent on b: connection closed"}
	ecc := &RankError{Rank: 3, Host: "c", ExitCode: 1}
	tails := map[int][]string{0: {"RuntimeError: [gloo] Connection reset by peer"}, 3: {"CUDA error: uncorrectable ECC error encountered"}}
	tail := func(r int) []string { return tails[r] }
	for _, tc := range []struct {
		name string
		list []*RankError
		want []string
	}{
		{"none", nil, nil},
		{"lost after a consequence", []*RankError{gloo, lostB, lostB9}, []string{"b"}},
		{"program error", []*RankError{gloo}, nil},
		{"node fault first", []*RankError{ecc, gloo}, []string{"c"}},
		{"node fault not first", []*RankError{gloo, ecc}, nil},
	} {
		var got []string
		for _, b := range (Failures{List: tc.list, Tail: tail}).Blame() {
			got = append(got, b.Host)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: blamed %v, want %v", tc.name, got, tc.want)
		}
	}
}
