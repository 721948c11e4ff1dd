// Package environ merges process environments: lists of KEY=VALUE
// entries, as os.Environ returns and exec.Cmd.Env takes. It imports no
// gangway package.
package environ

import (
	"slices"
	"strings"
)

// Merge overlays environments in one pass: for a name set in several
// lists, the last list's value wins. Entries without "=" are dropped. The
// result has one entry per name, sorted (as strings, so the same lists
// always give the same order).
func Merge(lists ...[]string) []string {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	m := make(map[string]string, n)
	for _, l := range lists {
		for _, kv := range l {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = v
			}
		}
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}
