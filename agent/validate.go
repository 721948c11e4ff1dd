package agent

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// validateStartJob checks a StartJob against this host before anything
// is prepared, so that whatever a launcher sends is refused with a reason
// (Ready.Err) rather than crashing or confusing the agent: ranks in the
// job's range and each listed once, local ranks 0..n-1 for the n ranks
// here, GPUs this host has, a known binding with a CPU per local rank
// for core binding, a command and KEY=VALUE environment entries, a stdin
// rank of the job, a non-negative kill grace. cpus are the CPUs the
// agent may bind ranks to (allowedCPUs). It does no I/O: the working
// directory is checked by prepare.
func validateStartJob(j wire.StartJob, f wire.Facts, cpus []int) error {
	if j.KillGrace < 0 {
		return fmt.Errorf("kill grace %v: must not be negative", j.KillGrace)
	}
	pe, err := parseBind(j.Bind)
	if err != nil {
		return err
	}
	size := -1 // the job's size, when the agent knows it (PMI)
	if j.PMI != nil {
		if j.PMI.Size < 1 {
			return fmt.Errorf("PMI job size %d: want at least 1", j.PMI.Size)
		}
		size = j.PMI.Size
	}
	if j.StdinRank < -1 || size > 0 && j.StdinRank >= size {
		return fmt.Errorf("stdin rank %d: want -1 or a rank of the job", j.StdinRank)
	}
	if err := checkEnv(j.Env); err != nil {
		return fmt.Errorf("job %w", err)
	}
	var gpus map[int]bool
	if len(f.GPUs) > 0 {
		gpus = make(map[int]bool, len(f.GPUs))
		for _, g := range f.GPUs {
			gpus[g.Index] = true
		}
	}
	n := len(j.Ranks)
	ranks := make(map[int]bool, n)
	local := make(map[int]int, n) // local rank -> rank
	for _, r := range j.Ranks {
		switch {
		case r.Rank < 0:
			return fmt.Errorf("rank %d: ranks are not negative", r.Rank)
		case size > 0 && r.Rank >= size:
			return fmt.Errorf("rank %d: outside the job's %s", r.Rank, textx.Count(size, "rank"))
		case ranks[r.Rank]:
			return fmt.Errorf("rank %d listed twice", r.Rank)
		}
		ranks[r.Rank] = true
		if r.LocalRank < 0 || r.LocalRank >= n {
			if n == 1 {
				return fmt.Errorf("rank %d: local rank %d: want 0 (this host runs 1 rank)", r.Rank, r.LocalRank)
			}
			return fmt.Errorf("rank %d: local rank %d: want 0 to %d (this host runs %s)", r.Rank, r.LocalRank, n-1, textx.Count(n, "rank"))
		}
		if other, dup := local[r.LocalRank]; dup {
			return fmt.Errorf("rank %d: local rank %d is rank %d's too", r.Rank, r.LocalRank, other)
		}
		local[r.LocalRank] = r.Rank
		if err := checkCommand(r); err != nil {
			return fmt.Errorf("rank %d: %w", r.Rank, err)
		}
		for _, g := range r.GPUs {
			if g < 0 || gpus != nil && !gpus[g] {
				return fmt.Errorf("rank %d: GPU %d: this host has %s", r.Rank, g, gpuList(f.GPUs))
			}
		}
		if (j.Bind == "core" || j.Bind == "hwthread") && r.LocalRank >= len(cpus) {
			return fmt.Errorf("rank %d: -bind-to %s: local rank %d needs a CPU of its own, and the agent may use %s (%s); use -bind-to none or numa, or fewer ranks on this host",
				r.Rank, j.Bind, r.LocalRank, textx.Count(len(cpus), "CPU"), FormatCPUList(cpus))
		}
		if pe > 0 && (r.LocalRank+1)*pe > len(cpus) {
			return fmt.Errorf("rank %d: PE=%d: local rank %d needs CPUs %d-%d of the %d the agent may use (%s); use a smaller PE or fewer ranks on this host",
				r.Rank, pe, r.LocalRank, r.LocalRank*pe, (r.LocalRank+1)*pe-1, len(cpus), FormatCPUList(cpus))
		}
	}
	return nil
}

// checkCommand checks a rank's argv and environment: a program, no NUL
// bytes (exec cannot pass them), and KEY=VALUE entries with a name. Names
// are not held to ValidEnvName: `-x PREFIX*` forwards the launcher's own
// environment as it is, exported bash functions (BASH_FUNC_module%%)
// included.
func checkCommand(r wire.RankSpec) error {
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return fmt.Errorf("empty command")
	}
	for i, a := range r.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("argument %d %q contains a NUL byte", i, short(a))
		}
	}
	return checkEnv(r.Env)
}

// checkEnv checks KEY=VALUE entries (a rank's, or the job's shared ones).
func checkEnv(env []string) error {
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("environment entry %q: want KEY=VALUE without NUL bytes", short(kv))
		}
	}
	return nil
}

// gpuList names a host's GPUs for an error message.
func gpuList(gs []wire.GPU) string {
	if len(gs) == 0 {
		return "no GPUs"
	}
	idx := make([]int, len(gs))
	for i, g := range gs {
		idx[i] = g.Index
	}
	slices.Sort(idx)
	return "GPUs " + FormatCPUList(idx)
}

// short cuts a peer's string for an error message: Ready.Err must stay a
// small control frame whatever the launcher sent.
func short(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
