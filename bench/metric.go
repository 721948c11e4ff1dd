package bench

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrBadMetric is wrapped by every error ParseMetric returns.
var ErrBadMetric = errors.New("bad --metric")

var metricNameRE = regexp.MustCompile(`^[A-Za-z_][\w.@/-]*$`)

// custom is a user-defined recogniser built by ParseMetric.
type custom struct {
	metric *Metric
	re     *regexp.Regexp
	value  int
	step   int // -1 when the regex has no step group
}

// ParseMetric parses the launcher's --metric NAME=REGEX. REGEX (Go RE2
// syntax) must have a named group "value" and may have a named group "step";
// every match is a series point of metric NAME with the given scope. NAME
// must not be one of the built-in metric names.
func ParseMetric(spec string, scope Scope) (Recognizer, error) {
	name, expr, found := strings.Cut(spec, "=")
	if !found {
		return nil, fmt.Errorf("%w %q: want NAME=REGEX", ErrBadMetric, spec)
	}
	if !metricNameRE.MatchString(name) {
		return nil, fmt.Errorf("%w %q: name %q must match %s", ErrBadMetric, spec, name, metricNameRE)
	}
	for _, r := range Builtin() {
		for _, m := range r.Metrics() {
			if m.Name == name {
				return nil, fmt.Errorf("%w %q: %q is a built-in metric", ErrBadMetric, spec, name)
			}
		}
	}
	if scope != ScopeRank && scope != ScopeGlobal {
		return nil, fmt.Errorf("%w %q: bad scope %d", ErrBadMetric, spec, int(scope))
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrBadMetric, spec, err)
	}
	c := &custom{
		metric: &Metric{Name: name, Scope: scope, Images: true},
		re:     re,
		value:  re.SubexpIndex("value"),
		step:   re.SubexpIndex("step"),
	}
	if c.value < 0 {
		return nil, fmt.Errorf("%w %q: regex has no (?P<value>...) group", ErrBadMetric, spec)
	}
	return c, nil
}

func (c *custom) Metrics() []*Metric { return []*Metric{c.metric} }

func (c *custom) Recognize(line []byte) (Sample, bool) {
	m := c.re.FindSubmatch(line)
	if m == nil {
		return Sample{}, false
	}
	v, ok := parseNum(m[c.value])
	if !ok {
		return Sample{}, false
	}
	s := Sample{Metric: c.metric, Kind: KindStep, Step: -1, Value: v}
	if c.step >= 0 && m[c.step] != nil {
		if n, ok := parseStep(m[c.step]); ok {
			s.Step = n
		}
	}
	return s, true
}
