package transport

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// JobEnder is a Dialer whose hosts are a batch scheduler's job. When
// ranks fail, the launcher asks it whether the scheduler ended the job
// (scancel, its time limit, preemption, a failed node): then that, not
// the program, is why ranks were killed by a signal, and no restart can
// help, since the allocation is gone.
type JobEnder interface {
	// JobEnded says how the scheduler ended the job, or "" when it did
	// not or cannot tell before ctx ends.
	JobEnded(ctx context.Context) string
}

var _ JobEnder = (*srunDialer)(nil)

// scontrolWait bounds the question to slurmctld, and how long JobEnded
// waits for a job Slurm is ending to leave COMPLETING (its nodes finish
// killing its processes: the launcher's agents end with their sessions,
// before the launcher asks).
var scontrolWait = 3 * time.Second

// JobEnded asks slurmctld for the job's state (scontrol show job). A
// job Slurm has ended while the launcher, which runs inside it, still
// runs was ended from outside. Slurm's own word on the step (slurmstepd's
// "*** STEP ... CANCELLED ***" line) is written by one node only and only
// while its part of the step is still running, so it cannot be relied on.
func (d *srunDialer) JobEnded(ctx context.Context) string {
	if d.job == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, scontrolWait)
	defer cancel()
	for {
		cmd := exec.CommandContext(ctx, "scontrol", "show", "job", "-o", d.job)
		cmd.WaitDelay = time.Second
		out, err := cmd.Output()
		if err != nil {
			d.log.Debug("cannot ask Slurm for the job's state", zap.String("job", d.job), zap.Error(err))
			return ""
		}
		f := parseJobRecord(out)
		if f["JobState"] != "COMPLETING" {
			return jobEnded(d.job, f)
		}
		select {
		case <-ctx.Done():
			return jobEnded(d.job, f)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// parseJobRecord reads the fields of `scontrol show job -o`'s one line
// (Key=Value separated by spaces; the first of a key counts). Values of
// some fields (Command, Comment) may hold spaces: their later words are
// not fields and are skipped, which the fields read here never are.
func parseJobRecord(out []byte) map[string]string {
	line, _, _ := bytes.Cut(out, []byte("\n"))
	f := map[string]string{}
	for _, w := range strings.Fields(string(line)) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			continue
		}
		if _, seen := f[k]; !seen {
			f[k] = v
		}
	}
	return f
}

// jobEnded says how Slurm ended job id, whose scontrol fields are f, or ""
// when the job still runs (or f is not a job record).
func jobEnded(id string, f map[string]string) string {
	state := f["JobState"]
	timedOut := func() bool {
		run, ok1 := parseSlurmDuration(f["RunTime"])
		limit, ok2 := parseSlurmDuration(f["TimeLimit"])
		return ok1 && ok2 && limit > 0 && run >= limit
	}
	limit := fmt.Sprintf("its time limit (TimeLimit=%s)", f["TimeLimit"])
	why := ""
	if r := f["Reason"]; r != "" && r != "None" {
		why = "; Reason=" + r
	}
	switch state {
	case "", "PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "RESIZING", "SIGNALING", "STAGE_OUT":
		return ""
	case "CANCELLED":
		return fmt.Sprintf("Slurm cancelled job %s (scancel, by its user or an administrator)%s", id, why)
	case "TIMEOUT":
		return fmt.Sprintf("Slurm ended job %s: it reached %s", id, limit)
	case "PREEMPTED":
		return fmt.Sprintf("Slurm preempted job %s%s: a job of a higher priority (partition or QOS) took its nodes; submit it again, or to a partition that is not preempted", id, why)
	case "NODE_FAIL":
		return fmt.Sprintf("Slurm ended job %s: one of its nodes failed (JobState=NODE_FAIL%s)", id, why)
	case "DEADLINE":
		return fmt.Sprintf("Slurm ended job %s: it passed its deadline (Deadline=%s)", id, f["Deadline"])
	case "COMPLETING":
		if timedOut() {
			return fmt.Sprintf("Slurm is ending job %s: it reached %s", id, limit)
		}
		return fmt.Sprintf("Slurm is ending job %s (JobState=COMPLETING: cancelled, preempted or a node failed; sacct -j %s says which)", id, id)
	}
	return fmt.Sprintf("Slurm ended job %s (JobState=%s%s)", id, state, why)
}

// parseSlurmDuration reads Slurm's time format, [days-]hours:minutes:seconds
// or minutes:seconds (RunTime, TimeLimit); false for UNLIMITED, NONE,
// Partition_Limit and anything else.
func parseSlurmDuration(s string) (time.Duration, bool) {
	days := 0
	if d, rest, ok := strings.Cut(s, "-"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 1e6 {
			return 0, false
		}
		days, s = n, rest
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, false
	}
	total := 0
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 1e6 || p[0] == '+' {
			return 0, false
		}
		total = total*60 + n
	}
	return time.Duration(days)*24*time.Hour + time.Duration(total)*time.Second, true
}
