package bench

import (
	"bytes"
	"regexp"
	"time"
)

// dllogger recognises NVIDIA DLLogger's StdOutBackend lines:
//
//	DLL <datetime> - <step> <name> : <value> [<unit>] ...
//
// It takes train_throughput, train.total_ips or total_ips, all of which are
// global figures (global batch / step time). A "()" step, a "Summary:" step
// and train_throughput are the run's final figure; "(0, i)" and
// "Epoch: e Iteration: i" steps are series points with step i.
type dllogger struct{}

var dllLineRE = regexp.MustCompile(`^DLL (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) - (.*)$`)

// dllNames are the metric names taken, most authoritative first.
var dllNames = [][]byte{[]byte("train_throughput"), []byte("train.total_ips"), []byte("total_ips")}

func (dllogger) Metrics() []*Metric { return []*Metric{MetricDLLogger} }

func (dllogger) Recognize(line []byte) (Sample, bool) {
	if !bytes.HasPrefix(line, []byte("DLL ")) || !bytes.Contains(line, []byte(" : ")) {
		return Sample{}, false
	}
	m := dllLineRE.FindSubmatch(line)
	if m == nil {
		return Sample{}, false
	}
	rest := m[2]
	for i, name := range dllNames {
		v, ok := dllValue(rest, name)
		if !ok {
			continue
		}
		s := Sample{Metric: MetricDLLogger, Kind: KindStep, Step: -1, Value: v}
		if ts, err := time.Parse("2006-01-02 15:04:05.999999999", string(m[1])); err == nil {
			s.Time = ts
		}
		s.Kind, s.Step = dllStep(rest)
		if i == 0 {
			s.Kind = KindFinal
		}
		return s, true
	}
	return Sample{}, false
}

// dllValue finds "name : value" in rest, with name starting a field, and
// parses value as a finite NUM.
func dllValue(rest, name []byte) (float64, bool) {
	for off := 0; off < len(rest); {
		i := bytes.Index(rest[off:], name)
		if i < 0 {
			return 0, false
		}
		i += off
		off = i + len(name)
		if i > 0 && rest[i-1] != ' ' {
			continue
		}
		after := rest[off:]
		if !bytes.HasPrefix(after, []byte(" : ")) {
			continue
		}
		tok := after[3:]
		if j := bytes.IndexByte(tok, ' '); j >= 0 {
			tok = tok[:j]
		}
		return parseNum(tok)
	}
	return 0, false
}

// dllStep decodes the step field that starts rest.
func dllStep(rest []byte) (Kind, int) {
	switch {
	case bytes.HasPrefix(rest, []byte("() ")), bytes.HasPrefix(rest, []byte("Summary:")):
		return KindFinal, -1
	case bytes.HasPrefix(rest, []byte("(")):
		end := bytes.IndexByte(rest, ')')
		if end < 0 {
			return KindStep, -1
		}
		parts := bytes.Split(rest[1:end], []byte(","))
		if n, ok := parseStep(bytes.TrimSpace(parts[len(parts)-1])); ok {
			return KindStep, n
		}
	case bytes.HasPrefix(rest, []byte("Epoch: ")):
		f := bytes.Fields(rest)
		if len(f) >= 4 && string(f[2]) == "Iteration:" {
			if n, ok := parseStep(f[3]); ok {
				return KindStep, n
			}
		}
	}
	return KindStep, -1
}
