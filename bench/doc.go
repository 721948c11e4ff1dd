// Package bench turns the lines that ranks print into one honest throughput
// figure with statistics: per-rank means with 95% Student-t confidence
// intervals, job totals, per-host subtotals, the slowest rank and host,
// stragglers and scaling efficiency.
//
// # Formats
//
// Builtin recognises the formats of docs/throughput.md: tf_cnn_benchmarks step
// and total lines, Horovod's synthetic benchmark, NVIDIA DLLogger and
// nccl-tests, plus a generic "Total images/sec = X". ParseMetric adds a
// user-defined metric (the launcher's --metric NAME=REGEX). Each metric has
// a Scope: per-rank figures are summed over ranks, global figures are
// reported as printed and never summed. Lines may carry an mpirun
// --tag-output, horovodrun or gangway tag; StripTag removes it.
//
// # Live collection
//
// The launcher feeds every whole output line to a Collector. Observe copies
// the line into a bounded queue and never blocks; lines that do not fit are
// counted as dropped and the report says so. Run, on a goroutine the caller
// owns, parses the queue:
//
//	c, err := bench.NewCollector(opts) // opts from bench.DefaultOptions()
//	done := make(chan error, 1)
//	go func() { done <- c.Run(ctx) }()
//	c.Observe(rank, host, time.Now(), line) // from the output path, per line
//	c.ObserveLines(rank, host, now, frame)  // or a chunk of whole lines at once
//	c.Close()                              // after all output is drained
//	err = <-done
//	rep := c.Report(meta)
//	rep.WriteJSON(path); bench.WriteSummary(os.Stderr, rep); bench.WritePlot(png, rep)
//
// # Saved logs
//
// AnalyzeFiles runs the same analysis over log files. Saved lines have no
// arrival time: series then use the time a line prints itself (DLLogger) or
// else the line's number in its file, and MetricReport.TimeAxis says which.
// Untagged lines cannot be told apart by rank: one rank's are rank 0's,
// several ranks' end-of-run figures are summed (with a note), and anything
// else is an error wrapping ErrUntaggedRanks.
//
// bench is a leaf package: it does not log and imports no other gangway
// package, only the standard library and gonum.
package bench
