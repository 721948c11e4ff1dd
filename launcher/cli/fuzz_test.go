package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/gangway-hpc/gangway/launcher/plan"
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
		{"-genv", "A", "1", "-env", "B", "", "-genvlist", "PATH,A", "-envlist", "B", "prog"},
		{"-genvnone", "-envall", "--genv=A=1", "prog"},
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
		{"--fusion-threshold-mb", "64", "--cycle-time-ms=2.5", "--hierarchical-allreduce", "--log-level", "debug", "--nics", "eth0", "prog"},
		{"--autotune-gaussian-process-noise", "1.5", "--tcp=1", "prog"},
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
		{"-c", "4", "-ppn", "2", "-hosts", "a,b", "-iface", "eth0", "-bind-to", "core:2", "-l", "prog"},
		{"--nproc_per_node", "gpu", "--rdzv_backend", "c10d", "--rdzv_endpoint", "h:29400", "--rdzv_id", "7", "-m", "pkg"},
		{"--node_rank", "0", "prog"},
		{"--mpi", "-np", "2", "--gloo", "prog"},
		{"--output", "tag,dir=x", "--display", "map,bind", "--map-by", "socket:OVERSUBSCRIBE", "prog"},
		{"-launcher", "ssh", "--ssh-port", "2222", "--ssh-identity-file", "k", "prog"},
		{"-genv", "A"},
		{"--bind-to", "core:-3", "--cpus-per-proc", "0", "prog"},
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
		argv := c.Argv
		if len(argv) >= 2 && argv[0] == "python3" && argv[1] == "-m" && !slices.Equal(argv, args[max(len(args)-len(argv), 0):]) {
			argv = argv[2:] // -m: PROGRAM is a module
		}
		if len(argv) > len(args) || !slices.Equal(argv, args[len(args)-len(argv):]) {
			t.Fatalf("Parse(%q): Argv %q is not a suffix of the arguments", args, c.Argv)
		}
		if c.Place.NP < 0 || c.Place.NP > plan.MaxRanks {
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

// FuzzParseSize: --health-min-tmp's parser never panics and never
// returns a negative size.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1G", "512M", "1GiB", "1.5g", "-1", "1e300G", "NaN", "G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := ParseSize(s); err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}
