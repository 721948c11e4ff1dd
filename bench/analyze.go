package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// maxLine bounds one log line in AnalyzeFiles.
const maxLine = 16 << 20

// AnalyzeFiles runs the same analysis as a Collector over saved logs (the
// launcher's --analyze). Lines may carry mpirun --tag-output, horovodrun or
// gangway "[R] " tags. Untagged lines cannot be told apart by rank:
// resolveUntagged gives them to rank 0 when they look like one rank's,
// sums their end-of-run figures when several ranks printed one (with a
// note), and otherwise fails with ErrUntaggedRanks. Hosts come from
// opts.RankHosts. Saved logs carry no arrival times: series use the time a
// line prints itself (DLLogger), and otherwise the line's number in its
// file, and the report's time_axis says which. The returned Meta has Ranks,
// Start and End filled where the logs tell; the caller may set the rest.
func AnalyzeFiles(ctx context.Context, paths []string, opts Options) (Report, error) {
	o, err := opts.normalize()
	if err != nil {
		return Report{}, err
	}
	if len(paths) == 0 {
		return Report{}, errors.New("bench: analyze: no log files")
	}
	acc := newAccum(o)
	acc.untagged = true
	for i, p := range paths {
		if err := context.Cause(ctx); err != nil {
			return Report{}, fmt.Errorf("analyze %s: %w", p, err)
		}
		acc.src = i
		if err := analyzeFile(ctx, acc, p); err != nil {
			return Report{}, err
		}
	}
	ranks, err := acc.resolveUntagged(paths)
	if err != nil {
		return Report{}, err
	}
	meta := Meta{Ranks: max(len(o.RankHosts), acc.maxRank+1, ranks), Start: acc.first, End: acc.last}
	return acc.report(o, meta, LineStats{Observed: acc.lines}), nil
}

func analyzeFile(ctx context.Context, acc *accum, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	defer f.Close()
	// A pipe (`--analyze <(tail -f log)`) may wait for its writer for
	// ever: the end of ctx closes it, which ends a Read in progress.
	defer context.AfterFunc(ctx, func() { f.Close() })()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	n := 0
	for sc.Scan() {
		n++
		if n%4096 == 0 {
			if err := context.Cause(ctx); err != nil {
				return fmt.Errorf("analyze %s:%d: %w", path, n, err)
			}
		}
		acc.add(-1, "", time.Time{}, n, sc.Bytes())
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("analyze %s:%d: %w", path, n, err)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("analyze %s:%d: %w", path, n+1, err)
	}
	return nil
}
