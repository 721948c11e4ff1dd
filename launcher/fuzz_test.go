package launcher

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"gangway/hostfile"
)

// argSep joins argv words in the fuzz corpus; argv words cannot hold NUL.
const argSep = "\x00"

func FuzzParseArgs(f *testing.F) {
	for _, args := range [][]string{
		{"-np", "4", "python3", "train.py"},
		{"-np", "2", "python3", "train.py", "-np", "3", "--lr", "0.1"},
		{"--np=4", "-H", "a:2,b:2", "prog"},
		{"-host", "ubuntu@a:2:2222,b::2223", "prog"},
		{"-x", "A=1", "-x", "NCCL_*", "-x", "HOME", "prog"},
		{"-mca", "btl", "tcp", "--mca", "pml", "ob1", "prog"},
		{"--mca=btl=tcp", "prog"},
		{"-N", "2", "-map-by", "node", "-bind-to", "none", "--oversubscribe", "prog"},
		{"-wdir", "/d", "--tag-output", "--timestamp-output", "--output-filename", "o", "--output-from", "0,2-3", "prog"},
		{"--stdin", "none", "--timeout", "1m30s", "--kill-grace", "2s", "prog"},
		{"--timeout", "90", "--dry-run", "--transport", "ssh", "-p", "2222", "prog"},
		{"-np", "2", "--", "-prog", "-np", "3"},
		{"-map-by", "foo", "prog"},
		{"--map-by", "ppr:2:node:PE=2", "--rank-by", "node", "-H", "a:2,b:2", "prog"},
		{"--nproc-per-node", "4", "--nnodes", "1:2", "--standalone", "prog"},
		{"--num_gpus=2", "--num_nodes", "1", "--include", "a:0,1@b", "-H", "a,b", "prog"},
		{"--master_addr", "x", "--master-port", "99999", "-q", "--display-map", "--prefix", "/p", "prog"},
		{"-bind-to", "core", "prog"},
		{"--bogus", "prog"},
		{"-np"},
		{"-mca", "btl"},
		{"-h"},
		{"--version"},
		{"-np", "-5", "-h"},
		{"-H", "a:1048576", "-H", "a:1", "prog"},
		{"--analyze", "-np", "-3", "run.log"},
		{"---np", "2", "prog"},
		{"-nq", "2", "prog"},
		{"--hostfil", "h", "prog"},
		{"-x", "UNSET_HERE", "-x", "RANK=9", "-x", "OMPI_COMM_WORLD_RANK", "prog"},
		{"--transport", "ssh", "--ssh", "ssh -o 'UserKnownHostsFile=/a b' -p\\ 2", "prog"},
		{"--ssh", "ssh 'unterminated", "prog"},
		{"-", "x"},
		{},
	} {
		f.Add(strings.Join(args, argSep))
	}
	env := map[string]string{"HOME": "/root", "NCCL_DEBUG": "INFO", "A": "1"}
	getenv, environ := fakeEnv(env)
	f.Fuzz(func(t *testing.T, joined string) {
		var args []string
		if joined != "" {
			args = strings.Split(joined, argSep)
		}
		in := slices.Clone(args)
		c, err := Parse(args, getenv, environ)
		if !slices.Equal(args, in) {
			t.Fatalf("Parse changed its argv: %q, was %q", args, in)
		}
		if err != nil {
			return
		}
		if len(c.Argv) > len(args) || !slices.Equal(c.Argv, args[len(args)-len(c.Argv):]) {
			t.Fatalf("Parse(%q): Argv %q is not a suffix of the arguments", args, c.Argv)
		}
		if c.Place.NP < 0 || c.Place.NP > MaxRanks {
			t.Fatalf("Parse(%q) accepted NP %d", args, c.Place.NP)
		}
		if c.Mode == ModeHelp || c.Mode == ModeVersion || c.Mode == ModeAnalyze {
			return
		}
		if len(c.Argv) == 0 {
			t.Fatalf("Parse(%q) accepted no program", args)
		}
		if c.Control.Timeout < 0 || c.Control.KillGrace < 0 || c.Transport.StartTimeout < 0 || c.Place.NPerNode < 0 || c.Place.GPUsPer < 1 {
			t.Fatalf("Parse(%q) accepted %+v", args, c)
		}
		if c.Place.Source != HostsLocal && len(c.Place.Hosts) == 0 || c.Place.Source == HostsLocal && len(c.Place.Hosts) != 0 {
			t.Fatalf("Parse(%q): host source %v with hosts %v", args, c.Place.Source, c.Place.Hosts)
		}
		for _, h := range c.Place.Hosts {
			if err := h.Validate(); err != nil {
				t.Fatalf("Parse(%q) accepted an invalid host: %v", args, err)
			}
		}
	})
}

func FuzzParseRankSet(f *testing.F) {
	for _, s := range []string{"0", "3", "0,2,4-7", " 1 , 3-4 ", "5-5", "8-100", "", "a", "-1", "1,", "3-1", "1-", "1-2-3", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := ParseRankSet(s)
		if err != nil {
			return
		}
		if rs.All() {
			t.Fatalf("ParseRankSet(%q) succeeded with the unrestricted set", s)
		}
		if rs.Has(-1) {
			t.Fatalf("ParseRankSet(%q) has -1", s)
		}
		// Every listed rank is a member.
		for _, part := range strings.Split(s, ",") {
			lo, hi, _ := strings.Cut(strings.TrimSpace(part), "-")
			for _, n := range []string{lo, hi} {
				if n == "" {
					continue
				}
				r, err := strconv.Atoi(n)
				if err != nil {
					t.Fatalf("ParseRankSet(%q) accepted %q: %v", s, n, err)
				}
				if !rs.Has(r) {
					t.Fatalf("ParseRankSet(%q) lacks %d", s, r)
				}
			}
		}
	})
}

// decodePlan turns fuzz bytes into hosts: each pair of bytes is one host,
// slots (0..15) and max_slots (0..15, where 0 is unlimited).
func decodePlan(data []byte) []hostfile.Host {
	var hosts []hostfile.Host
	for i := 0; i+1 < len(data) && len(hosts) < 16; i += 2 {
		hosts = append(hosts, hostfile.Host{Name: "h" + itoa(len(hosts)), Slots: int(data[i] % 16), MaxSlots: int(data[i+1] % 16)})
	}
	return hosts
}

func FuzzPlan(f *testing.F) {
	seeds := []struct {
		hosts         []byte
		np, nPerNode  int
		node, oversub bool
	}{
		{[]byte{2, 0, 3, 0, 1, 0}, 5, 0, false, false},
		{[]byte{2, 0, 3, 0, 1, 0}, 5, 0, true, false},
		{[]byte{2, 0, 1, 0}, 0, 0, false, false},
		{[]byte{2, 0, 2, 0}, 0, 1, false, false},
		{[]byte{4, 0, 2, 0}, 0, 2, true, false},
		{[]byte{2, 0}, 0, 3, false, true},
		{[]byte{2, 0, 1, 0}, 5, 0, false, true},
		{[]byte{2, 2, 1, 0}, 5, 0, false, true},
		{[]byte{2, 2, 1, 1}, 4, 0, false, true},
		{[]byte{1, 0, 0, 0, 1, 0}, 2, 0, false, false},
		{[]byte{0, 0, 0, 0}, 0, 0, false, false},
		{[]byte{2, 0, 2, 0}, 5, 0, false, false},
		{[]byte{2, 0}, -1, 0, false, false},
		{nil, 1, 0, false, false},
	}
	for _, s := range seeds {
		f.Add(s.hosts, s.np, s.nPerNode, s.node, s.oversub)
	}
	f.Fuzz(func(t *testing.T, data []byte, np, nPerNode int, node, oversub bool) {
		hosts := decodePlan(data)
		np %= 200 // keep allocations small; negative values stay negative
		nPerNode %= 20
		o := PlanOptions{MapBy: "slot", NPerNode: nPerNode, Oversubscribe: oversub}
		if node {
			o.MapBy = "node"
		}
		ranks, err := Plan(hosts, np, o)
		if err != nil {
			return
		}
		if np > 0 && len(ranks) != np || len(ranks) == 0 {
			t.Fatalf("Plan(%v, %d, %+v) gave %d ranks", hosts, np, o, len(ranks))
		}
		count := make([]int, len(hosts))
		locals := make([][]int, len(hosts))
		for i, r := range ranks {
			if r.Rank != i {
				t.Fatalf("rank %d at index %d", r.Rank, i)
			}
			if r.Host < 0 || r.Host >= len(hosts) {
				t.Fatalf("rank %d on host %d of %d", i, r.Host, len(hosts))
			}
			count[r.Host]++
			locals[r.Host] = append(locals[r.Host], r.LocalRank)
		}
		node0 := 0
		for h := range hosts {
			for l, lr := range locals[h] {
				if lr != l {
					t.Fatalf("host %d: local ranks %v, want 0..%d in rank order", h, locals[h], count[h]-1)
				}
			}
			for _, r := range ranks {
				if r.Host == h && (r.LocalSize != count[h] || r.NodeRank != node0) {
					t.Fatalf("rank %d on host %d: LocalSize %d NodeRank %d, want %d %d", r.Rank, h, r.LocalSize, r.NodeRank, count[h], node0)
				}
			}
			if count[h] > 0 {
				node0++
			}
			limit := hosts[h].Slots
			if nPerNode > 0 {
				limit = nPerNode
			}
			if !oversub && count[h] > limit {
				t.Fatalf("host %d: %d ranks on %d slots without --oversubscribe", h, count[h], limit)
			}
			if m := hosts[h].MaxSlots; oversub && nPerNode == 0 && m >= hosts[h].Slots && m > 0 && count[h] > m {
				t.Fatalf("host %d: %d ranks above max_slots %d", h, count[h], m)
			}
		}
		if np == 0 {
			want := 0
			for _, h := range hosts {
				if nPerNode > 0 {
					want += nPerNode
				} else {
					want += h.Slots
				}
			}
			if len(ranks) != want {
				t.Fatalf("Plan(%v, 0, %+v) gave %d ranks, want every slot (%d)", hosts, o, len(ranks), want)
			}
		}
	})
}
