package bench

import (
	"fmt"
	"math"
)

// DefaultStragglerThreshold flags ranks more than 5% below the median rank.
const DefaultStragglerThreshold = 0.05

// DefaultQueueSize is the Collector's queue length in lines.
const DefaultQueueSize = 1 << 16

// Options control recognition and aggregation. Start from DefaultOptions: the
// zero value means WarmupSteps 0, that is "exclude nothing".
type Options struct {
	// WarmupSteps is how many leading steps of each rank are warm-up and left
	// out of the statistics. -1 selects the default: nothing for tools that
	// already leave their warm-up out of what they print (tf_cnn_benchmarks,
	// Horovod, nccl-tests), else the first 10% of each rank's samples. When a
	// rank's samples carry increasing step numbers, samples with
	// step < first step + WarmupSteps are warm-up; otherwise the first
	// WarmupSteps samples are.
	WarmupSteps int
	// StragglerThreshold flags ranks more than this fraction below the
	// median rank; 0 selects DefaultStragglerThreshold.
	StragglerThreshold float64
	// BaselineIPS is the single-GPU throughput for scaling efficiency; 0 = none.
	BaselineIPS float64
	// Metrics are custom recognisers (see ParseMetric), used with Builtin().
	Metrics []Recognizer
	// RankHosts[r] names the host of rank r when lines do not say (AnalyzeFiles).
	RankHosts []string
	// QueueSize is the Collector's queue length; 0 selects DefaultQueueSize.
	QueueSize int
}

// DefaultOptions returns options with the default warm-up and threshold.
func DefaultOptions() Options {
	return Options{WarmupSteps: -1, StragglerThreshold: DefaultStragglerThreshold}
}

// normalize checks o and fills defaults in a copy.
func (o Options) normalize() (Options, error) {
	if o.WarmupSteps < -1 {
		return o, fmt.Errorf("bench: warm-up steps %d: want -1 (default) or >= 0", o.WarmupSteps)
	}
	if o.StragglerThreshold == 0 {
		o.StragglerThreshold = DefaultStragglerThreshold
	}
	if !(o.StragglerThreshold > 0 && o.StragglerThreshold < 1) {
		return o, fmt.Errorf("bench: straggler threshold %g: want a fraction in (0, 1)", o.StragglerThreshold)
	}
	if !(o.BaselineIPS >= 0) || math.IsInf(o.BaselineIPS, 0) {
		return o, fmt.Errorf("bench: baseline %g images/sec: want a finite number >= 0", o.BaselineIPS)
	}
	if o.QueueSize == 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.QueueSize < 0 {
		return o, fmt.Errorf("bench: queue size %d: want > 0", o.QueueSize)
	}
	seen := map[string]bool{}
	for _, r := range o.recognizers() {
		for _, m := range r.Metrics() {
			if seen[m.Name] {
				return o, fmt.Errorf("bench: metric %q defined twice", m.Name)
			}
			seen[m.Name] = true
		}
	}
	return o, nil
}

// recognizers returns the built-in recognisers followed by the custom ones.
func (o Options) recognizers() []Recognizer {
	return append(Builtin(), o.Metrics...)
}
