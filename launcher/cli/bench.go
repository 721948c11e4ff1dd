package cli

import "github.com/gangway-hpc/gangway/bench"

// Options turns the throughput flags into bench options.
func (cfg Bench) Options() (bench.Options, error) {
	opts := bench.DefaultOptions()
	opts.WarmupSteps = cfg.WarmupSteps
	opts.StragglerThreshold = cfg.Straggler
	opts.BaselineIPS = cfg.BaselineIPS
	scope, err := bench.ParseScope(cfg.MetricScope)
	if err != nil {
		return opts, err
	}
	for _, m := range cfg.Metrics {
		r, err := bench.ParseMetric(m, scope)
		if err != nil {
			return opts, err
		}
		opts.Metrics = append(opts.Metrics, r)
	}
	return opts, nil
}

// Check reports a bad --metric (or one named like a built-in) before any
// host is dialled; the collector it builds is thrown away.
func (cfg Bench) Check() error {
	opts, err := cfg.Options()
	if err != nil {
		return err
	}
	opts.QueueSize = 1
	_, err = bench.NewCollector(opts)
	return err
}
