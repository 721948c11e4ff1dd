package wire

import (
	"fmt"
	"path/filepath"
	"time"
)

// HealthRequest asks an agent to check its host before an attempt
// (Hello.Health). The agent answers in Facts.Health. A nil request
// (--no-health-check) asks for no checks.
type HealthRequest struct {
	// TmpDir is the ranks' TMPDIR when the launcher sets it (-x TMPDIR);
	// "" means the agent's own environment's TMPDIR, else /tmp.
	TmpDir string `json:"tmp_dir,omitempty"`
	// MinTmpFree is the free space, in bytes, that TmpDir must have; 0
	// does not check the space (the directory must still exist).
	MinTmpFree int64 `json:"min_tmp_free,omitempty"`
	// Command is the site's own check (--health-check), run by the agent
	// with /bin/sh -c as the job's user; "" runs none.
	Command string `json:"command,omitempty"`
	// Timeout bounds Command; past it the check is killed and fails.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Health is an agent's answer to a HealthRequest: one Check per check it
// ran or could not run.
type Health struct {
	// GPUs is how many GPUs nvidia-smi listed for the checks (fresh for
	// this attempt, unlike the facts' cached list); -1 when nvidia-smi is
	// missing or failed, so the count is not known.
	GPUs   int     `json:"gpus"`
	Checks []Check `json:"checks"`
}

// Check is the outcome of one health check on one host.
type Check struct {
	Name   string      `json:"name"` // CheckGPUBusy...; agents may add names
	Status CheckStatus `json:"status"`
	// Detail says what was found, for a person: "GPU 3 (GPU-…,
	// 0000:07:00.0): 2 uncorrectable ECC errors", or why it was not
	// checked.
	Detail string `json:"detail,omitempty"`
	// Output is the site check's output (stdout and stderr), at most
	// MaxCheckOutput bytes.
	Output string `json:"output,omitempty"`
}

// CheckStatus is a check's verdict.
type CheckStatus string

// Check verdicts. NotChecked is never healthy: a tool was missing, or the
// agent predates the check.
const (
	CheckOK         CheckStatus = "ok"
	CheckFail       CheckStatus = "fail"
	CheckNotChecked CheckStatus = "not_checked"
)

// Health check names. The launcher adds CheckGPUCount and CheckIB, which
// compare hosts.
const (
	CheckGPUCount   = "gpu-count"   // the GPUs it should have are there
	CheckGPUDriver  = "gpu-driver"  // nvidia-smi answers where the driver shows GPUs
	CheckGPUBusy    = "gpu-busy"    // no GPU is held by a process outside the job
	CheckGPUECC     = "gpu-ecc"     // no uncorrectable ECC error since the driver loaded
	CheckGPURemap   = "gpu-remap"   // no pending or failed row remap
	CheckGPURetired = "gpu-retired" // no page pending retirement (GPUs before A100)
	CheckIB         = "ib"          // the RDMA ports the others use are ACTIVE at their rate
	CheckTmpDir     = "tmpdir"      // the ranks' TMPDIR exists and has room
	CheckSite       = "site"        // the site's --health-check command
)

// Bounds of a Health, checked by Validate on both sides.
const (
	MaxChecks       = 64
	MaxCheckName    = 64
	MaxCheckDetail  = 4 << 10
	MaxCheckOutput  = 4 << 10
	MaxHealthGPUs   = 1 << 10
	MaxHealthCmd    = 4 << 10
	MaxHealthTmpDir = 4 << 10
)

// Validate says why r is not a request an agent may act on.
func (r *HealthRequest) Validate() error {
	switch {
	case r == nil:
		return nil
	case r.TmpDir != "" && !filepath.IsAbs(r.TmpDir):
		return fmt.Errorf("health: TMPDIR %q is not an absolute path", r.TmpDir)
	case len(r.TmpDir) > MaxHealthTmpDir:
		return fmt.Errorf("health: TMPDIR of %d bytes (at most %d)", len(r.TmpDir), MaxHealthTmpDir)
	case r.MinTmpFree < 0:
		return fmt.Errorf("health: negative free-space threshold %d", r.MinTmpFree)
	case len(r.Command) > MaxHealthCmd:
		return fmt.Errorf("health: a check command of %d bytes (at most %d)", len(r.Command), MaxHealthCmd)
	case r.Command != "" && r.Timeout <= 0:
		return fmt.Errorf("health: check command without a timeout")
	}
	return nil
}

// Validate says why h is not a health answer the launcher can judge:
// too many checks, a name that is not lower-case words joined by '-', an
// unknown verdict, a detail or output over its bound.
func (h *Health) Validate() error {
	if h == nil {
		return nil
	}
	if h.GPUs < -1 || h.GPUs > MaxHealthGPUs {
		return fmt.Errorf("health: %d GPUs", h.GPUs)
	}
	if len(h.Checks) > MaxChecks {
		return fmt.Errorf("health: %d checks (at most %d)", len(h.Checks), MaxChecks)
	}
	seen := map[string]bool{}
	for _, c := range h.Checks {
		if !checkName(c.Name) {
			return fmt.Errorf("health: bad check name %q", clipName(c.Name))
		}
		if seen[c.Name] {
			return fmt.Errorf("health: check %s twice", c.Name)
		}
		seen[c.Name] = true
		switch c.Status {
		case CheckOK, CheckFail, CheckNotChecked:
		default:
			return fmt.Errorf("health: check %s: unknown status %q", c.Name, clipName(string(c.Status)))
		}
		if len(c.Detail) > MaxCheckDetail || len(c.Output) > MaxCheckOutput {
			return fmt.Errorf("health: check %s: %d bytes of detail and %d of output (at most %d and %d)",
				c.Name, len(c.Detail), len(c.Output), MaxCheckDetail, MaxCheckOutput)
		}
	}
	return nil
}

// checkName accepts "gpu-ecc": lower-case letters and digits in words
// joined by single '-', at most MaxCheckName bytes.
func checkName(s string) bool {
	if s == "" || len(s) > MaxCheckName || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && s[i-1] != '-':
		default:
			return false
		}
	}
	return true
}

func clipName(s string) string {
	if len(s) > MaxCheckName {
		return s[:MaxCheckName] + "..."
	}
	return s
}

// Failed are h's checks that failed; nil for a nil h.
func (h *Health) Failed() []Check {
	if h == nil {
		return nil
	}
	var out []Check
	for _, c := range h.Checks {
		if c.Status == CheckFail {
			out = append(out, c)
		}
	}
	return out
}
