// Package health checks an agent's host before each attempt of a job:
// its GPUs (nvidia-smi: the driver answers, no process outside the job
// holds one, no uncorrectable ECC error, no pending or failed row remap,
// no page pending retirement), the ranks' TMPDIR (it exists, it has
// room) and the site's own check command, run as the job's user.
//
// Each check is a pure function of what was read (JudgeGPUs, JudgeTmp,
// JudgeSite), tested on fixtures; Gather does the reading. A check that
// needs a tool the host lacks (no nvidia-smi) says "not checked", never
// "ok". The launcher adds the checks that compare hosts (the GPU count,
// the InfiniBand ports) from the facts. Of gangway's packages it imports
// only agent/wire and internal/...
package health

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// Options is how Gather reads the host. Nil functions use the real ones.
type Options struct {
	// NvidiaSMI runs nvidia-smi with args and returns its standard
	// output; an error matching exec.ErrNotFound means it is not
	// installed. It must not answer from a cache (health is read fresh
	// for every attempt), and may be called from two goroutines at once.
	NvidiaSMI func(ctx context.Context, args ...string) ([]byte, error)
	// DriverGPUs are the GPUs the host's facts found (JudgeGPUs).
	DriverGPUs int
	// Statfs reads the space of the file system holding dir.
	Statfs func(dir string) (TmpStat, error)
	// TmpDir is the ranks' TMPDIR when the launcher does not set it: the
	// agent's base environment's, else /tmp.
	TmpDir string
	// Site runs the site's check command (RunSite's Options).
	Site SiteOptions
}

// Gather runs the checks req asks for and returns the host's health.
func Gather(ctx context.Context, o Options, req wire.HealthRequest) wire.Health {
	// The site's command runs while nvidia-smi answers: an attempt
	// waits for the slower of the two, not for their sum.
	var site wire.Check
	var wg sync.WaitGroup
	if req.Command != "" {
		wg.Go(func() { site = JudgeSite(RunSite(ctx, req.Command, req.Timeout, o.Site)) })
	}
	smi := o.NvidiaSMI
	if smi == nil {
		smi = runNvidiaSMI
	}
	s := SMI{DriverGPUs: o.DriverGPUs}
	// A GPU that fell over can hang nvidia-smi: that is an answer too.
	sctx, cancel := context.WithTimeout(ctx, SMITimeout)
	defer cancel()
	s.GPUs, s.GPUsErr = smi(sctx, GPUQuery...)
	if errors.Is(s.GPUsErr, exec.ErrNotFound) {
		s.Missing = true
	} else if s.GPUsErr == nil {
		var q sync.WaitGroup
		q.Go(func() { s.Apps, s.AppsErr = smi(sctx, AppsQuery...) })
		s.Remapped, s.RemappedErr = smi(sctx, RemapQuery...)
		q.Wait()
	}
	h := wire.Health{}
	h.GPUs, h.Checks = JudgeGPUs(s)

	dir := req.TmpDir
	if dir == "" {
		dir = o.TmpDir
	}
	if dir == "" {
		dir = "/tmp"
	}
	statfs := o.Statfs
	if statfs == nil {
		statfs = Statfs
	}
	st, err := statDir(dir, statfs)
	h.Checks = append(h.Checks, JudgeTmp(dir, st, err, req.MinTmpFree))

	wg.Wait()
	if req.Command != "" {
		h.Checks = append(h.Checks, site)
	}
	return h
}

// SMITimeout bounds the health checks' nvidia-smi calls together; past
// it they fail ("gpu-driver" fails on a host whose driver lists GPUs).
const SMITimeout = 20 * time.Second

// statDir reads dir's file system space; dir must be a directory.
func statDir(dir string, statfs func(string) (TmpStat, error)) (TmpStat, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return TmpStat{}, err
	}
	if !fi.IsDir() {
		return TmpStat{}, syscall.ENOTDIR
	}
	return statfs(dir)
}

// runNvidiaSMI runs the real nvidia-smi, uncached.
func runNvidiaSMI(ctx context.Context, args ...string) ([]byte, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, err
	}
	var out, errOut boundedBuffer
	out.max, errOut.max = 1<<20, 4<<10
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// Killed at ctx's end, an nvidia-smi stuck in the driver may not die
	// at once: do not wait for it past this.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		// nvidia-smi prints most failures ("couldn't communicate with
		// the NVIDIA driver") on stdout.
		msg := out.String() + errOut.String()
		if len(msg) > 500 {
			msg = msg[:500]
		}
		return nil, &smiError{err: err, msg: msg}
	}
	return out.Bytes(), nil
}

type smiError struct {
	err error
	msg string
}

func (e *smiError) Error() string {
	return "nvidia-smi: " + e.err.Error() + ": " + strings.TrimSpace(e.msg)
}

func (e *smiError) Unwrap() error { return e.err }
