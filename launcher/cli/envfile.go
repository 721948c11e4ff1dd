package cli

import (
	"fmt"
	"strings"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// EnvLine is one variable of an env file, with the line it came from.
type EnvLine struct {
	Key, Value string
	Line       int
}

// ParseEnvFile reads an env file (--env-file, DeepSpeed's .deepspeed_env)
// the way docker's --env-file and torchrun users write them, strictly:
//
//   - one KEY=VALUE per line; the line's leading and trailing blanks
//     (and a CR of CRLF files) are dropped, nothing else;
//   - empty lines and lines whose first non-blank character is # are
//     comments; a # after a value is part of the value (as docker);
//   - a leading "export" and blanks (a shell file that bash can also source) is
//     dropped;
//   - KEY is a portable name (letters, digits, underscores, not starting
//     with a digit), with no blanks around the =;
//   - a VALUE wholly inside one pair of matching ' or " loses the pair;
//     nothing else is unquoted, escaped or expanded ($HOME stays $HOME);
//   - a value cannot hold a NUL byte (no environment can).
//
// A line without = (docker's "take it from my environment") is an error
// that says to use -x NAME. name is the file's name for error messages:
// FILE:LINE: why.
func ParseEnvFile(name string, data []byte) ([]EnvLine, error) {
	var out []EnvLine
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			line = strings.TrimLeft(rest, " \t")
		}
		k, v, ok := strings.Cut(line, "=")
		switch {
		case !ok && wire.ValidEnvName(line):
			return nil, fmt.Errorf("%w: %s:%d: %s has no value (want KEY=VALUE; -x %s forwards the launcher's)", ErrUsage, name, n, line, line)
		case !ok || !wire.ValidEnvName(k):
			return nil, fmt.Errorf("%w: %s:%d: want KEY=VALUE, got %q", ErrUsage, name, n, textx.Clip(line))
		case strings.IndexByte(v, 0) >= 0:
			return nil, fmt.Errorf("%w: %s:%d: %s: the value holds a NUL byte", ErrUsage, name, n, k)
		}
		out = append(out, EnvLine{Key: k, Value: unquote(v), Line: n})
	}
	return out, nil
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
}
