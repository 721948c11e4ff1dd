package bench

import (
	"bytes"
	"time"
)

// point is one recognised sample as stored before aggregation.
type point struct {
	at    time.Time // zero when neither the caller nor the line gave a time
	line  int       // line number within its source (1-based)
	src   int       // index of its source (AnalyzeFiles: the file)
	step  int
	value float64
}

type rankAcc struct {
	host   string
	points []point // series, in arrival order
	finals []point // the tool's end-of-run figures
}

type metricAcc struct {
	m     *Metric
	ranks map[int]*rankAcc
	// summed is set when untagged lines held several ranks' end-of-run
	// figures (resolveUntagged): the total is their sum, and ranks is
	// empty.
	summed *untaggedSum
	notes  []string // caveats resolveUntagged found
}

// accum holds everything recognised so far. It is not safe for concurrent
// use; Collector guards it with a mutex.
type accum struct {
	recs        []Recognizer
	builtinOnly bool // no custom recognisers: mayMatchBuiltin may skip lines
	rankHosts   []string
	metrics     map[string]*metricAcc
	order       []string // metric names in first-seen order
	maxRank     int      // highest rank seen on any line, -1 for none
	lines       int64    // lines examined
	first, last time.Time
	// untagged keeps untagged lines apart (rank untaggedRank) for
	// resolveUntagged instead of giving them to rank 0 (AnalyzeFiles).
	untagged bool
	src      int // the source being read, copied into points
}

func newAccum(o Options) *accum {
	return &accum{
		recs:        o.recognizers(),
		builtinOnly: len(o.Metrics) == 0,
		rankHosts:   o.RankHosts,
		metrics:     map[string]*metricAcc{},
		maxRank:     -1,
	}
}

// trimEOL drops a trailing "\n" or "\r\n" (and a lone "\r").
func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// add examines one line. rank < 0 means "take it from the tag, else 0"
// (else untaggedRank when a.untagged). at is
// the time the line was seen, zero when unknown; lineNo numbers the line in
// its source.
func (a *accum) add(rank int, host string, at time.Time, lineNo int, line []byte) {
	a.lines++
	line = trimEOL(line)
	tagRank, rest, tagged := StripTag(line)
	if rank < 0 {
		rank = 0
		switch {
		case tagged:
			rank = tagRank
		case a.untagged:
			rank = untaggedRank
		}
	}
	a.maxRank = max(a.maxRank, rank, 0)
	if a.builtinOnly && !mayMatchBuiltin(rest) {
		return
	}
	if host == "" && rank >= 0 && rank < len(a.rankHosts) {
		host = a.rankHosts[rank]
	}
	for _, r := range a.recs {
		s, ok := r.Recognize(rest)
		if !ok {
			continue
		}
		p := point{at: at, line: lineNo, src: a.src, step: s.Step, value: s.Value}
		if p.at.IsZero() {
			p.at = s.Time
		}
		a.record(rank, host, s, p)
	}
}

func (a *accum) record(rank int, host string, s Sample, p point) {
	ma := a.metrics[s.Metric.Name]
	if ma == nil {
		ma = &metricAcc{m: s.Metric, ranks: map[int]*rankAcc{}}
		a.metrics[s.Metric.Name] = ma
		a.order = append(a.order, s.Metric.Name)
	}
	ra := ma.ranks[rank]
	if ra == nil {
		ra = &rankAcc{host: host}
		ma.ranks[rank] = ra
	}
	if s.Kind == KindFinal {
		ra.finals = append(ra.finals, p)
	} else {
		ra.points = append(ra.points, p)
	}
	if !p.at.IsZero() {
		if a.first.IsZero() || p.at.Before(a.first) {
			a.first = p.at
		}
		if p.at.After(a.last) {
			a.last = p.at
		}
	}
}
