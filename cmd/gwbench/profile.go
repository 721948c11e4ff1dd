package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/launcher"
)

// profiles runs the launcher in this process (launcher.Main, as
// cmd/launcher does) under the CPU profiler and writes one profile per
// case to o.profile: 20 launches on 16 namespace hosts, one output run,
// and one run of the scale rows' job (treerank: its barriers, its lines,
// its exits) on the largest -scale-counts of loopback agents (1024 at
// most by default; the agents run in gwbench's worker processes, so the
// profile is the launcher's) at each of -scale-widths, with a heap
// profile taken at the run's highest heap in use.
func (b *bench) profiles(ctx context.Context) error {
	dir, err := filepath.Abs(b.o.profile)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if b.net != nil {
		e := b.net
		j := jobSpec{Hosts: 16, PerHost: 8, Argv: []string{"/bin/true"}}
		args := e.gangway(j)[1:]
		if err := b.profileRuns(ctx, filepath.Join(dir, "launch16.pprof"), 20, args, io.Discard, 5*time.Minute); err != nil {
			return err
		}
		jo := jobSpec{Hosts: 4, PerHost: 4, Argv: []string{b.bins.self, "-gen", strconv.FormatInt(b.o.outBytes, 10)}, Tag: true}
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer null.Close()
		if err := b.profileRuns(ctx, filepath.Join(dir, "output.pprof"), 1, e.gangway(jo)[1:], null, 5*time.Minute); err != nil {
			return err
		}
		if bin, err := b.buildPMIBench(ctx); err == nil {
			jp := jobSpec{Hosts: 16, PerHost: 4, Argv: []string{bin, "barrier", "2000", "0"}, Env: mpichEnv}
			if err := b.profileRuns(ctx, filepath.Join(dir, "pmi64.pprof"), 1, e.gangway(jp)[1:], io.Discard, 5*time.Minute); err != nil {
				return err
			}
		}
	}
	counts := b.scaleCounts()
	n := counts[len(counts)-1]
	if b.o.scaleCounts == nil {
		n = min(n, 1024)
	}
	if err := tasksFit(n, b.o.scaleRanks, readTaskLimits()); err != nil {
		return err
	}
	rank, err := b.buildTreeRank(ctx)
	if err != nil {
		return err
	}
	la, err := startLoopAgents(ctx, n, b.o.scaleRanks, filepath.Join(b.dir, "loop-profile"))
	if err != nil {
		return err
	}
	defer la.stop()
	hf, err := la.hostfile(n, b.o.scaleRanks)
	if err != nil {
		return err
	}
	sshConfig, err := b.scaleSSHConfig(n * b.o.scaleRanks)
	if err != nil {
		return err
	}
	for _, width := range b.widths() {
		name := fmt.Sprintf("scale%d-w%d", n, width)
		args := append(append(la.args(hf), sshConfig...), scaleJob(width, rank)...)
		peak := watchHeap(filepath.Join(dir, name+"-heap.pprof"))
		err := b.profileRuns(ctx, filepath.Join(dir, name+".pprof"), 1, args, io.Discard, scaleTimeout(n*b.o.scaleRanks))
		if err == nil {
			if lerr := scaleLeftovers(); lerr != nil {
				err = fmt.Errorf("%s: %w", name, lerr)
			}
		}
		sum, perr := peak()
		if err == nil {
			err = perr
		}
		b.progress("profile %s: %s", name, sum)
		b.extra["profile "+name] = sum
		if err != nil {
			return err
		}
	}
	// Where the bytes were allocated, over every profiled run (and
	// gwbench's own work): go tool pprof -sample_index=alloc_space.
	f, err := os.Create(filepath.Join(dir, "allocs.pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

// watchHeap writes the heap profile (go tool pprof -sample_index=inuse_space)
// taken at the highest heap in use seen while it runs, sampled every 100
// ms, to path, and the goroutine profile at the most goroutines seen
// beside it (-goroutine.pprof for -heap.pprof); the returned function
// stops it, writes the files and says the peaks of heap, stacks and
// goroutines.
func watchHeap(path string) (stop func() (string, error)) {
	quit := make(chan struct{})
	done := make(chan error, 1)
	var summary string
	go func() {
		var best, gor []byte
		var high, stacks uint64
		gmax := 0
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if g := runtime.NumGoroutine(); g > gmax {
				gmax = g
				var buf bytes.Buffer
				if err := pprof.Lookup("goroutine").WriteTo(&buf, 0); err == nil {
					gor = buf.Bytes()
				}
			}
			stacks = max(stacks, ms.StackInuse)
			if ms.HeapInuse > high {
				high = ms.HeapInuse
				var buf bytes.Buffer
				if err := pprof.Lookup("heap").WriteTo(&buf, 0); err == nil {
					best = buf.Bytes()
				}
			}
			select {
			case <-t.C:
				continue
			case <-quit:
			}
			summary = fmt.Sprintf("peak heap in use %.1f MiB, peak stacks %.1f MiB, at most %d goroutines (sampled every 100 ms)", float64(high)/(1<<20), float64(stacks)/(1<<20), gmax)
			done <- errors.Join(os.WriteFile(path, best, 0o644), os.WriteFile(strings.TrimSuffix(path, "heap.pprof")+"goroutine.pprof", gor, 0o644))
			return
		}
	}()
	return func() (string, error) {
		close(quit)
		err := <-done
		return summary, err
	}
}

// profileRuns runs launcher.Main runs times with args under the CPU
// profiler, each within timeout, writing the profile to path.
func (b *bench) profileRuns(ctx context.Context, path string, runs int, args []string, stdout io.Writer, timeout time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	t0 := time.Now()
	for i := range runs {
		var errb testbed.Tail
		errb.Max = 8 << 10
		rctx, cancel := context.WithTimeout(ctx, timeout)
		code := launcher.Main(rctx, args, launcher.Deps{Stdout: stdout, Stderr: &errb, Version: "gwbench", Cwd: b.dir},
			func(string, bool) *zap.Logger { return zap.NewNop() })
		cancel()
		if code != 0 {
			pprof.StopCPUProfile()
			return fmt.Errorf("in-process launcher run %d for %s: exit code %d: %s", i, filepath.Base(path), code, lastLines(errb.String(), 4))
		}
	}
	pprof.StopCPUProfile()
	b.progress("profile %s: %d runs in %v", path, runs, time.Since(t0).Round(time.Millisecond))
	b.extra["profile "+filepath.Base(path)] = fmt.Sprintf("%d in-process launcher runs in %v", runs, time.Since(t0).Round(time.Millisecond))
	return nil
}
