// Command synthetic is a CPU-only stand-in for tf_cnn_benchmarks: every
// "image" costs a fixed number of chained SHA-256 hashes, and the output
// follows tf_cnn_benchmarks' format exactly, so gangway's bench package
// reads it like the real tool. Ranks listed in -slow-ranks do -slowdown
// more work per image, which makes them stragglers.
//
// Step times are measured on the process's CPU clock by default (-clock
// cpu), so each rank reports the speed it would have on a device of its own
// even when eight ranks share two cores; -clock wall measures elapsed time
// instead, contention included.
//
// The rank comes from RANK, else OMPI_COMM_WORLD_RANK, else PMI_RANK, else 0.
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

type config struct {
	batch, steps, warmup, every, work int
	slowRanks                         []int
	slowdown                          float64
	clock                             func() time.Duration
	// counted is -clock work's time: a microsecond per hash done.
	counted *time.Duration
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("synthetic", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var slow string
	fs.IntVar(&c.batch, "batch-size", 32, "images per step on this rank")
	fs.IntVar(&c.steps, "steps", 100, "timed steps")
	fs.IntVar(&c.warmup, "warmup-steps", 10, "untimed warm-up steps, not printed")
	fs.IntVar(&c.every, "display-every", 10, "print a step line every N steps")
	fs.IntVar(&c.work, "work", 1500, "SHA-256 iterations per image")
	fs.StringVar(&slow, "slow-ranks", "", "comma-separated ranks that run slower, e.g. 5,6")
	fs.Float64Var(&c.slowdown, "slowdown", 0.2, "fraction of throughput the slow ranks lose, in [0, 1)")
	clock := fs.String("clock", "cpu", "step timer: cpu (process CPU time), wall, or work (a microsecond per hash: exact figures, for tests)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if c.slowRanks, err = parseRanks(slow); err != nil {
		fmt.Fprintf(stderr, "synthetic: -slow-ranks: %v\n", err)
		return 2
	}
	if c.batch < 1 || c.steps < 1 || c.warmup < 0 || c.every < 1 || c.work < 1 || !(c.slowdown >= 0 && c.slowdown < 1) {
		fmt.Fprintln(stderr, "synthetic: want -batch-size, -steps, -display-every, -work >= 1, -warmup-steps >= 0, -slowdown in [0, 1)")
		return 2
	}
	switch *clock {
	case "cpu":
		c.clock = cpuTime
	case "wall":
		t0 := time.Now()
		c.clock = func() time.Duration { return time.Since(t0) }
	case "work":
		// A machine shared with other work (a test suite's other
		// packages) moves even CPU time by 10% and more; counted work
		// does not move, so a slowed rank is exactly -slowdown behind.
		c.counted = new(time.Duration)
		c.clock = func() time.Duration { return *c.counted }
	default:
		fmt.Fprintf(stderr, "synthetic: -clock %q: want cpu, wall or work\n", *clock)
		return 2
	}
	rank, err := rankFromEnv(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "synthetic: %v\n", err)
		return 2
	}
	benchmark(c, rank, stdout)
	return 0
}

func parseRanks(s string) ([]int, error) {
	var ranks []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, err := strconv.Atoi(f)
		if err != nil || r < 0 {
			return nil, fmt.Errorf("bad rank %q", f)
		}
		ranks = append(ranks, r)
	}
	return ranks, nil
}

func rankFromEnv(getenv func(string) string) (int, error) {
	for _, k := range []string{"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"} {
		if v := getenv(k); v != "" {
			r, err := strconv.Atoi(v)
			if err != nil || r < 0 {
				return 0, fmt.Errorf("bad %s=%q", k, v)
			}
			return r, nil
		}
	}
	return 0, nil
}

// benchmark runs warm-up and timed steps and prints tf_cnn_benchmarks lines.
func benchmark(c config, rank int, w io.Writer) {
	work := c.work
	if slices.Contains(c.slowRanks, rank) {
		work = int(math.Round(float64(c.work) / (1 - c.slowdown)))
	}
	fmt.Fprintf(w, "Model:       synthetic-sha256 (%d hashes/image)\n", work)
	fmt.Fprintf(w, "Batch size:  %d per rank\n", c.batch)
	fmt.Fprintf(w, "Rank:        %d\n", rank)
	var h [32]byte
	h[0] = byte(rank)
	fmt.Fprintln(w, "Running warm up")
	for range c.warmup {
		h = c.step(h, work)
	}
	fmt.Fprintln(w, "Done warm up")
	fmt.Fprintln(w, "Step\tImg/sec\ttotal_loss")
	times := make([]float64, 0, c.steps)
	start := c.clock()
	for i := range c.steps {
		t0 := c.clock()
		h = c.step(h, work)
		times = append(times, (c.clock() - t0).Seconds())
		if i == 0 || (i+1)%c.every == 0 {
			mean, unc, jitter := perf(c.batch, times)
			loss := 7.5*math.Exp(-float64(i)/200) + float64(h[0])/2550
			fmt.Fprintf(w, "%d\timages/sec: %.1f +/- %.1f (jitter = %.1f)\t%.3f\n", i+1, mean, unc, jitter, loss)
		}
	}
	elapsed := math.Max((c.clock() - start).Seconds(), 1e-9)
	fmt.Fprintln(w, strings.Repeat("-", 64))
	fmt.Fprintf(w, "total images/sec: %.2f\n", float64(c.steps*c.batch)/elapsed)
	fmt.Fprintln(w, strings.Repeat("-", 64))
}

// cpuTime is the CPU time this process has used (user + system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprintf("getrusage: %v", err)) // cannot fail with valid arguments
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// step hashes work times per image of one batch.
// step is one step of c.batch images of work hashes each; -clock work
// counts them.
func (c config) step(h [32]byte, work int) [32]byte {
	h = step(h, c.batch, work)
	if c.counted != nil {
		*c.counted += time.Duration(c.batch*work) * time.Microsecond
	}
	return h
}

func step(h [32]byte, batch, work int) [32]byte {
	for range batch * work {
		h = sha256.Sum256(h[:])
	}
	return h
}

// perf mirrors tf_cnn_benchmarks' get_perf_timing over all steps so far:
// mean speed = batch / mean(step time), uncertainty = std(speeds)/sqrt(n),
// jitter = 1.4826 * median absolute deviation of speeds.
func perf(batch int, times []float64) (mean, unc, jitter float64) {
	speeds := make([]float64, len(times))
	var sumT, sumS float64
	for i, t := range times {
		t = math.Max(t, 1e-9)
		speeds[i] = float64(batch) / t
		sumT += t
		sumS += speeds[i]
	}
	n := float64(len(times))
	mean = float64(batch) / (sumT / n)
	avg := sumS / n
	var ss float64
	for _, s := range speeds {
		ss += (s - avg) * (s - avg)
	}
	unc = math.Sqrt(ss/n) / math.Sqrt(n)
	med := medianOf(speeds)
	dev := make([]float64, len(speeds))
	for i, s := range speeds {
		dev[i] = math.Abs(s - med)
	}
	return mean, unc, 1.4826 * medianOf(dev)
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
