package cli

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Health is what every host is checked for before each attempt (README,
// "Failures at scale").
type Health struct {
	Off         bool          // --no-health-check
	GPUsPerHost int           // --gpus-per-host: 0 takes the count most hosts have
	Command     string        // --health-check: the site's check, run on every host as the job's user
	Timeout     time.Duration // --health-check-timeout
	MinTmpFree  int64         // --health-min-tmp: bytes free in the ranks' TMPDIR; 0 checks only that it exists
}

// Health defaults.
const (
	DefaultHealthTimeout = 30 * time.Second
	DefaultMinTmpFree    = 1 << 30
)

func (h *Health) register(fs *flag.FlagSet) {
	fs.BoolVar(&h.Off, "no-health-check", false, "start without checking the hosts first")
	fs.IntVar(&h.GPUsPerHost, "gpus-per-host", 0, "GPUs every host must have (default: as many as most hosts have)")
	fs.StringVar(&h.Command, "health-check", "", "the site's check: run with /bin/sh -c on every host, as the job's user, before each attempt; non-zero exit stops the job")
	h.Timeout = DefaultHealthTimeout
	fs.Var(durationSecs{&h.Timeout}, "health-check-timeout", "how long --health-check may take (seconds or a duration)")
	h.MinTmpFree = DefaultMinTmpFree
	fs.Var(sizeFlag{&h.MinTmpFree}, "health-min-tmp", "free space the ranks' TMPDIR needs on every host (bytes, or with K, M, G, T; 0: only that it exists)")
}

func (h *Health) validate(startTimeout time.Duration) error {
	switch {
	case h.GPUsPerHost < 0:
		return fmt.Errorf("%w: --gpus-per-host %d: must not be negative", ErrUsage, h.GPUsPerHost)
	case h.Command != "" && h.Timeout <= 0:
		return fmt.Errorf("%w: --health-check-timeout must be positive", ErrUsage)
	case h.Command != "" && startTimeout > 0 && h.Timeout >= startTimeout:
		return fmt.Errorf("%w: --health-check-timeout %v must be shorter than --start-timeout %v (hosts answer after their checks)", ErrUsage, h.Timeout, startTimeout)
	case len(h.Command) > 4096:
		return fmt.Errorf("%w: --health-check: %d bytes, at most 4096", ErrUsage, len(h.Command))
	}
	return nil
}

// sizeFlag is a byte count: 123, or with a binary K, M, G or T suffix
// (an optional "iB" or "B" after it): 512M, 1GiB.
type sizeFlag struct{ v *int64 }

func (s sizeFlag) String() string {
	if s.v == nil {
		return "0"
	}
	return strconv.FormatInt(*s.v, 10)
}

func (s sizeFlag) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s.v = n
	return nil
}

// ParseSize reads a byte count with an optional binary unit: "0", "4096",
// "512M", "1G", "1GiB", "2T".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "i")
	shift := 0
	if t != "" {
		switch strings.ToUpper(t[len(t)-1:]) {
		case "K":
			shift = 10
		case "M":
			shift = 20
		case "G":
			shift = 30
		case "T":
			shift = 40
		}
		if shift > 0 {
			t = t[:len(t)-1]
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !(f >= 0) || f*float64(int64(1)<<shift) >= math.MaxInt64/2 {
		return 0, fmt.Errorf("want a size such as 1G or 512M, got %q", s)
	}
	return int64(f * float64(int64(1)<<shift)), nil
}
