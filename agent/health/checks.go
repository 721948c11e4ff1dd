package health

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// SMI is what nvidia-smi answered to the three health queries, for
// JudgeGPUs: each query's output or error.
type SMI struct {
	// Missing: nvidia-smi is not installed; nothing else is read.
	Missing bool
	// DriverGPUs are the GPUs the host shows without nvidia-smi (the
	// facts' /proc/driver/nvidia list): a failing nvidia-smi on a host
	// that has GPUs fails, on one that has none it is not checked.
	DriverGPUs  int
	GPUs        []byte
	GPUsErr     error
	Apps        []byte
	AppsErr     error
	Remapped    []byte
	RemappedErr error
}

// gpuChecks are the checks JudgeGPUs answers, in order.
var gpuChecks = []string{wire.CheckGPUDriver, wire.CheckGPUBusy, wire.CheckGPUECC, wire.CheckGPURemap, wire.CheckGPURetired}

// JudgeGPUs turns nvidia-smi's answers into the GPU checks (driver,
// busy, ECC, remap, retired pages) and the number of GPUs it listed
// (-1 when unknown). It is a pure function of the answers: the agent
// runs nvidia-smi (Gather), tests pass fixtures.
func JudgeGPUs(s SMI) (count int, checks []wire.Check) {
	all := func(st wire.CheckStatus, detail string) []wire.Check {
		out := []wire.Check{}
		for _, n := range gpuChecks {
			out = append(out, wire.Check{Name: n, Status: st, Detail: detail})
		}
		return out
	}
	if s.Missing {
		return -1, all(wire.CheckNotChecked, "nvidia-smi is not installed")
	}
	if s.GPUsErr != nil {
		out := all(wire.CheckNotChecked, "nvidia-smi did not answer")
		out[0].Detail = fmt.Sprintf("nvidia-smi failed and the driver shows no GPU: %v", s.GPUsErr)
		if s.DriverGPUs > 0 {
			out[0] = wire.Check{Name: wire.CheckGPUDriver, Status: wire.CheckFail,
				Detail: fmt.Sprintf("nvidia-smi failed with %d GPUs in /proc/driver/nvidia: %v", s.DriverGPUs, s.GPUsErr)}
		}
		return -1, clipDetails(out)
	}
	gpus, err := ParseGPUs(s.GPUs)
	if err != nil {
		out := all(wire.CheckNotChecked, "nvidia-smi's answer could not be read")
		out[0].Detail = err.Error()
		return -1, clipDetails(out)
	}
	if len(gpus) == 0 {
		return 0, all(wire.CheckOK, "no GPU")
	}
	checks = []wire.Check{
		{Name: wire.CheckGPUDriver, Status: wire.CheckOK, Detail: fmt.Sprintf("%d GPUs", len(gpus))},
		judgeBusy(byUUID(gpus), s.Apps, s.AppsErr),
		judgeECC(gpus),
		judgeRemap(byUUID(gpus), s.Remapped, s.RemappedErr),
		judgeRetired(gpus),
	}
	return len(gpus), clipDetails(checks)
}

// byUUID indexes gpus by UUID, to label what nvidia-smi's other
// queries name by UUID.
func byUUID(gpus []GPU) map[string]GPU {
	m := make(map[string]GPU, len(gpus))
	for _, g := range gpus {
		m[g.UUID] = g
	}
	return m
}

// judgeBusy fails when any process holds a compute context: the job's
// ranks have not started when the agent checks, so every holder is
// outside the job. CUDA MPS's server is not counted.
func judgeBusy(byUUID map[string]GPU, out []byte, qerr error) wire.Check {
	c := wire.Check{Name: wire.CheckGPUBusy}
	apps, err := ParseApps(out)
	if qerr != nil {
		err = qerr
	}
	if err != nil {
		c.Status, c.Detail = wire.CheckNotChecked, err.Error()
		return c
	}
	if len(apps) == 0 {
		c.Status, c.Detail = wire.CheckOK, "no process on any GPU"
		return c
	}
	var held []string
	mps := 0
	for _, a := range apps {
		if isMPSServer(a.Name) {
			mps++
			continue
		}
		where := "GPU " + a.GPUUUID
		if g, ok := byUUID[a.GPUUUID]; ok {
			where = g.Label()
		}
		s := fmt.Sprintf("%s held by pid %d %s", where, a.PID, a.Name)
		if a.Memory != "" {
			s += " (" + a.Memory + ")"
		}
		held = append(held, s)
	}
	if len(held) == 0 {
		c.Status, c.Detail = wire.CheckOK, fmt.Sprintf("no process on any GPU but %d MPS server contexts", mps)
		return c
	}
	c.Status, c.Detail = wire.CheckFail, strings.Join(held, "; ")
	return c
}

// isMPSServer reports whether a compute process is CUDA MPS's server: a
// site that runs MPS has it on every GPU, and its clients (the jobs)
// are listed as processes of their own.
func isMPSServer(name string) bool {
	return name == "nvidia-cuda-mps-server" || strings.HasSuffix(name, "/nvidia-cuda-mps-server")
}

// judgeECC fails on any uncorrectable ECC error since the driver loaded
// (volatile): the GPU's memory returned bad data, and until a reset its
// results cannot be trusted. Lifetime (aggregate) counts alone do not
// fail: a reset or a remap may have dealt with them.
func judgeECC(gpus []GPU) wire.Check {
	c := wire.Check{Name: wire.CheckGPUECC}
	var bad []string
	known := 0
	for _, g := range gpus {
		if g.ECCVolatile == Unknown {
			continue
		}
		known++
		if g.ECCVolatile > 0 {
			bad = append(bad, fmt.Sprintf("%s: %d uncorrectable ECC errors since the driver loaded", g.Label(), g.ECCVolatile))
		}
	}
	switch {
	case len(bad) > 0:
		c.Status, c.Detail = wire.CheckFail, strings.Join(bad, "; ")
	case known == 0:
		c.Status, c.Detail = wire.CheckNotChecked, "no GPU reports ECC counters (ECC off?)"
	case known < len(gpus):
		c.Status, c.Detail = wire.CheckOK, fmt.Sprintf("no uncorrectable ECC error (%d of %d GPUs report ECC)", known, len(gpus))
	default:
		c.Status, c.Detail = wire.CheckOK, "no uncorrectable ECC error"
	}
	return c
}

// judgeRemap fails on a pending row remap (the GPU needs a reset before
// the remap takes effect) or a remap failure (the GPU has no spare rows
// left).
func judgeRemap(byUUID map[string]GPU, out []byte, qerr error) wire.Check {
	c := wire.Check{Name: wire.CheckGPURemap}
	rows, err := ParseRemapped(out)
	if qerr != nil {
		err = qerr
	}
	if err != nil {
		c.Status, c.Detail = wire.CheckNotChecked, err.Error()
		return c
	}
	if len(rows) == 0 {
		c.Status, c.Detail = wire.CheckNotChecked, "no GPU reports row remapping (before A100)"
		return c
	}
	var bad []string
	for _, r := range rows {
		where := "GPU " + r.UUID + " (" + r.BusID + ")"
		if g, ok := byUUID[r.UUID]; ok {
			where = g.Label()
		}
		switch {
		case r.Failure:
			bad = append(bad, where+": a row remap failed (no spare rows: replace the GPU)")
		case r.Pending:
			bad = append(bad, where+": a row remap is pending (reset the GPU)")
		}
	}
	if len(bad) > 0 {
		c.Status, c.Detail = wire.CheckFail, strings.Join(bad, "; ")
		return c
	}
	c.Status, c.Detail = wire.CheckOK, "no pending or failed row remap"
	return c
}

// judgeRetired fails on a page pending retirement (GPUs before A100:
// the retirement takes effect at the next driver load).
func judgeRetired(gpus []GPU) wire.Check {
	c := wire.Check{Name: wire.CheckGPURetired}
	var bad []string
	known := 0
	for _, g := range gpus {
		switch g.RetiredPending {
		case "":
			continue
		case "Yes":
			bad = append(bad, g.Label()+": a page is pending retirement (reset the GPU)")
		}
		known++
	}
	switch {
	case len(bad) > 0:
		c.Status, c.Detail = wire.CheckFail, strings.Join(bad, "; ")
	case known == 0:
		c.Status, c.Detail = wire.CheckNotChecked, "no GPU reports page retirement (A100 and later remap rows: see gpu-remap)"
	default:
		c.Status, c.Detail = wire.CheckOK, "no page pending retirement"
	}
	return c
}

// TmpStat is a file system's space, from statfs: what an unprivileged
// user may still write (Free) of its size (Total), in bytes.
type TmpStat struct {
	Free, Total uint64
}

// JudgeTmp says whether dir, the ranks' TMPDIR, can take their
// temporary files: it exists (err is what reading it gave) and, with
// minFree above 0, has at least minFree bytes free.
func JudgeTmp(dir string, st TmpStat, err error, minFree int64) wire.Check {
	c := wire.Check{Name: wire.CheckTmpDir, Status: wire.CheckFail}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.Detail = fmt.Sprintf("TMPDIR %s does not exist", dir)
	case err != nil:
		c.Detail = fmt.Sprintf("TMPDIR %s: %v", dir, err)
	case minFree > 0 && st.Free < uint64(minFree):
		c.Detail = fmt.Sprintf("TMPDIR %s has %s free of %s (at least %s wanted: --health-min-tmp)", dir, Bytes(st.Free), Bytes(st.Total), Bytes(uint64(minFree)))
	default:
		c.Status, c.Detail = wire.CheckOK, fmt.Sprintf("TMPDIR %s has %s free of %s", dir, Bytes(st.Free), Bytes(st.Total))
	}
	return clipDetail(c)
}

// SiteResult is how the site's check command ended.
type SiteResult struct {
	Command  string
	Err      error // it could not start, or waiting for it failed
	Code     int   // its exit status (128+N for signal N)
	TimedOut time.Duration
	Output   string // stdout and stderr, bounded (Bounded)
}

// JudgeSite turns the site command's ending into its check: exit 0 is
// healthy, anything else (an exit status, a signal, the timeout, a
// failure to start) is not.
func JudgeSite(r SiteResult) wire.Check {
	c := wire.Check{Name: wire.CheckSite, Status: wire.CheckFail, Output: r.Output}
	switch {
	case r.TimedOut > 0:
		c.Detail = fmt.Sprintf("%q did not end within %v (killed)", r.Command, r.TimedOut)
	case r.Err != nil:
		c.Detail = fmt.Sprintf("%q: %v", r.Command, r.Err)
	case r.Code != 0:
		c.Detail = fmt.Sprintf("%q exited with status %d", r.Command, r.Code)
	default:
		c.Status, c.Detail = wire.CheckOK, fmt.Sprintf("%q exited with status 0", r.Command)
	}
	return clipDetail(c)
}

// Bytes prints n in binary units: "512 B", "1.5 GiB".
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func clipDetails(cs []wire.Check) []wire.Check {
	for i := range cs {
		cs[i] = clipDetail(cs[i])
	}
	return cs
}

// clipDetail keeps a check within wire's bounds.
func clipDetail(c wire.Check) wire.Check {
	if len(c.Detail) > wire.MaxCheckDetail {
		c.Detail = strings.ToValidUTF8(c.Detail[:wire.MaxCheckDetail-4], "") + " ..."
	}
	if len(c.Output) > wire.MaxCheckOutput {
		c.Output = strings.ToValidUTF8(c.Output[:wire.MaxCheckOutput], "")
	}
	return c
}
