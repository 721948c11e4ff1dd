package nccl

import (
	"errors"
	"fmt"
	"strings"
)

// Conf is the content of one NCCL configuration file: NCCL_CONF_FILE (or
// ~/.nccl.conf when that is unset) and /etc/nccl.conf.
type Conf struct {
	Path string
	Data []byte
}

// Setting is one variable's effective value and where it came from.
type Setting struct {
	Value  string
	Source string // "env", or "path:line" for a config file
	bad    bool   // the line had a syntax problem, already reported
}

// confLine is one NAME=VALUE line of a config file.
type confLine struct {
	name, value string
	line        int
	err         error // set for a line NCCL reads differently than it looks
}

// ParseConf parses an NCCL config file the way NCCL's setEnvFile does: a
// line starting with '#' is a comment, every other line is NAME=VALUE split
// at the first '=', nothing is trimmed, and the first line setting a name
// wins. The map holds exactly what NCCL would set. The error, if any, joins
// one "line N: ..." error for each line NCCL would skip or read differently
// from how it looks: no '=', an empty name, a NUL byte, surrounding spaces
// or a carriage return (NCCL keeps them), a name or value NCCL truncates,
// or a name set twice.
func ParseConf(b []byte) (map[string]string, error) {
	lines, errs := parseConf(b)
	m := make(map[string]string, len(lines))
	for _, l := range lines {
		if _, dup := m[l.name]; !dup {
			m[l.name] = l.value
		}
		if l.err != nil {
			errs = append(errs, l.err)
		}
	}
	return m, errors.Join(errs...)
}

// maxConfField is the longest name or value NCCL reads from a line (its
// buffers are 1024 bytes with the NUL).
const maxConfField = 1023

// parseConf returns the NAME=VALUE lines NCCL sets, each with its own
// problem, and the problems of lines NCCL skips.
func parseConf(b []byte) ([]confLine, []error) {
	var out []confLine
	var skipped []error
	first := map[string]int{}
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		switch {
		case strings.IndexByte(line, 0) >= 0:
			skipped = append(skipped, fmt.Errorf("line %d: NUL byte", n))
			continue
		case !ok && strings.TrimSpace(line) != "":
			skipped = append(skipped, fmt.Errorf("line %d: no '=' in %q: NCCL ignores the line", n, line))
			continue
		case !ok:
			continue
		case name == "":
			skipped = append(skipped, fmt.Errorf("line %d: empty name: NCCL ignores the line", n))
			continue
		}
		l := confLine{name: name, value: value, line: n}
		switch {
		case len(name) > maxConfField || len(value) > maxConfField:
			l.err = fmt.Errorf("line %d: longer than %d bytes: NCCL truncates it", n, maxConfField)
			l.name, l.value = name[:min(len(name), maxConfField)], value[:min(len(value), maxConfField)]
		case strings.TrimSpace(name) != name:
			l.err = fmt.Errorf("line %d: name %q has surrounding spaces: NCCL does not trim them", n, name)
		case strings.TrimSpace(value) != value:
			l.err = fmt.Errorf("line %d: %s value %q has surrounding spaces or a carriage return: NCCL does not trim them",
				n, name, value)
		}
		if f, dup := first[l.name]; dup && l.err == nil {
			l.err = fmt.Errorf("line %d: %s set again: the value on line %d wins", n, l.name, f)
		} else if !dup {
			first[l.name] = n
		}
		out = append(out, l)
	}
	return out, skipped
}

// Effective merges the user's environment with config files the way NCCL
// does: the environment wins, then the files in the order given (pass
// NCCL_CONF_FILE's or ~/.nccl.conf, then /etc/nccl.conf), and within a file
// the first line. Syntax problems in the files are returned as Problems.
func Effective(env map[string]string, confs ...Conf) (map[string]Setting, []Problem) {
	eff := make(map[string]Setting, len(env))
	for k, v := range env {
		eff[k] = Setting{Value: v, Source: "env"}
	}
	var probs []Problem
	for _, c := range confs {
		lines, skipped := parseConf(c.Data)
		for _, err := range skipped {
			probs = append(probs, Problem{Source: c.Path, Msg: err.Error()})
		}
		for _, l := range lines {
			src := fmt.Sprintf("%s:%d", c.Path, l.line)
			if l.err != nil {
				probs = append(probs, Problem{Var: l.name, Value: l.value, Source: c.Path, Msg: l.err.Error()})
			}
			if _, set := eff[l.name]; !set {
				eff[l.name] = Setting{Value: l.value, Source: src, bad: l.err != nil}
			}
		}
	}
	return eff, probs
}

// UserEnv returns the variables the user set, from the environment and the
// config files (see Effective), as Env's user argument.
func UserEnv(env map[string]string, confs ...Conf) map[string]string {
	eff, _ := Effective(env, confs...)
	m := make(map[string]string, len(eff))
	for k, s := range eff {
		m[k] = s.Value
	}
	return m
}
