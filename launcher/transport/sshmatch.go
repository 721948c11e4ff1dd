package transport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gangway-hpc/gangway/internal/textx"
)

// Match blocks of the OpenSSH client configuration, as ssh(1) reads them
// (ssh_config(5), readconf.c's match_cfg_line): a Match line's criteria
// must all hold for its block to apply; each may be negated with "!".
// The library reads Match lines otherwise than ssh (only "all" and
// "host", that one against the alias), so prepareSSHConfig writes each
// Match block it can read as a Host block for a name no host has
// (matchName) and resolve decides it here, in the file's order, with the
// HostName and User obtained from the lines before it, as ssh does.
//
// Read: all, host, originalhost, user, localuser, exec. Not read
// (warned of, and the block applies to no host, as before): canonical
// and final (ssh's second pass after CanonicalizeHostname, which the
// launcher does not do), localnetwork, tagged, and any criterion newer
// than these.

// matchCriterion is one criterion of a Match line.
type matchCriterion struct {
	Not  bool   // written as !kind
	Kind string // lower-cased: all, host, originalhost, user, localuser, exec
	Arg  string // the pattern list or the command; "" for all
}

// matchLine is a Match line's criteria, all of which must hold.
type matchLine []matchCriterion

// matchName is the Host pattern prepareSSHConfig writes for the n-th
// Match block of a file: no host is called that (.invalid is reserved).
func matchName(file, n int) string {
	return fmt.Sprintf("gangway-match-%d-%d.invalid", file, n)
}

// errMatchUnread is a Match criterion the launcher does not read.
var errMatchUnread = errors.New("not read by the launcher")

// parseMatch reads a Match line's value: criteria and their arguments,
// an argument in quotes where it has spaces (exec's command), split as
// ssh's argv_split does (textx.SplitShell: quotes and backslashes, no
// expansion).
func parseMatch(val string) (matchLine, error) {
	words, err := textx.SplitShell(val)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, errors.New("no criteria")
	}
	var m matchLine
	for i := 0; i < len(words); i++ {
		w := words[i]
		c := matchCriterion{}
		if rest, ok := strings.CutPrefix(w, "!"); ok {
			c.Not, w = true, rest
		}
		c.Kind = strings.ToLower(w)
		switch c.Kind {
		case "all":
			if c.Not {
				return nil, errors.New(`"!all" matches nothing`)
			}
		case "host", "originalhost", "user", "localuser", "exec":
			if i+1 == len(words) || words[i+1] == "" {
				return nil, fmt.Errorf("%s needs an argument", c.Kind)
			}
			i++
			c.Arg = words[i]
		case "canonical", "final":
			return nil, fmt.Errorf("%q (ssh's pass after CanonicalizeHostname): %w", w, errMatchUnread)
		case "localnetwork", "tagged":
			return nil, fmt.Errorf("%q: %w", w, errMatchUnread)
		default:
			return nil, fmt.Errorf("unknown criterion %q", w)
		}
		m = append(m, c)
	}
	if len(m) > 1 {
		for _, c := range m {
			if c.Kind == "all" {
				return nil, errors.New(`"all" must stand alone`)
			}
		}
	}
	return m, nil
}

// matchFacts is what a Match line is decided on, for one host.
type matchFacts struct {
	Host     string // the HostName obtained so far (%h expanded), else the name as given
	Original string // the name as given
	User     string // the remote user: the host list's, else the User obtained so far, else the local user
	Local    string // the local user
	Port     int    // for exec's %p
	Home     string // for exec's %d
}

// holds reports whether every criterion of m holds for f; exec runs a
// command (through run) and holds when it exits 0.
func (m matchLine) holds(f matchFacts, run func(cmd string) bool) bool {
	for _, c := range m {
		var ok bool
		switch c.Kind {
		case "all":
			ok = true
		case "host":
			ok = matchPatternList(f.Host, c.Arg, true)
		case "originalhost":
			ok = matchPatternList(f.Original, c.Arg, true)
		case "user":
			ok = matchPatternList(f.User, c.Arg, false)
		case "localuser":
			ok = matchPatternList(f.Local, c.Arg, false)
		case "exec":
			cmd := expandTokens(c.Arg, map[byte]string{'h': f.Host, 'n': f.Original, 'r': f.User, 'u': f.Local, 'p': strconv.Itoa(f.Port), 'd': f.Home})
			ok = run != nil && run(cmd)
		}
		if ok == c.Not {
			return false
		}
	}
	return true
}

// matchPatternList is ssh's match_pattern_list: s matches a
// comma-separated list of patterns (* and ?) when one pattern matches
// and no negated one (!pattern) does; fold compares case-insensitively
// (host names).
func matchPatternList(s, list string, fold bool) bool {
	if fold {
		s, list = strings.ToLower(s), strings.ToLower(list)
	}
	matched := false
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		neg := strings.HasPrefix(p, "!")
		if neg {
			p = p[1:]
		}
		if !textx.MatchPattern(p, s) {
			continue
		}
		if neg {
			return false
		}
		matched = true
	}
	return matched
}

// matchExecTimeout bounds one Match exec command.
const matchExecTimeout = 10 * time.Second

// execCache runs Match exec commands as ssh does (the user's $SHELL, else
// /bin/sh, -c), each distinct command once per launch: a line whose
// command names no host (a VPN check, say) runs once for thousands of
// hosts, not once each. Hosts resolved at once (their dials) run their
// own commands at once, at most maxMatchExecs at a time (a command with
// %h over 10,000 hosts would otherwise be 10,000 shells at once); one
// command's second asker waits for the first.
type execCache struct {
	mu   sync.Mutex
	done map[string]*execResult
	slot chan struct{} // maxMatchExecs at a time
}

// maxMatchExecs bounds the Match exec commands running at once.
const maxMatchExecs = 16

type execResult struct {
	once sync.Once
	ok   bool
}

func (e *execCache) run(cmd string) bool {
	e.mu.Lock()
	if e.done == nil {
		e.done = map[string]*execResult{}
	}
	if e.slot == nil {
		e.slot = make(chan struct{}, maxMatchExecs)
	}
	r, slot := e.done[cmd], e.slot
	if r == nil {
		r = &execResult{}
		e.done[cmd] = r
	}
	e.mu.Unlock()
	r.once.Do(func() {
		slot <- struct{}{}
		defer func() { <-slot }()
		r.ok = runMatchExec(cmd)
	})
	return r.ok
}

// runMatchExec runs one Match exec command; it holds when it exits 0
// within matchExecTimeout. As ssh, it reads nothing, its output is
// dropped and its stderr is the launcher's.
func runMatchExec(cmd string) bool {
	shell := os.Getenv("SHELL")
	if shell == "" {
		shell = "/bin/sh"
	}
	ctx, cancel := context.WithTimeout(context.Background(), matchExecTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, shell, "-c", cmd)
	c.Stderr = os.Stderr
	c.WaitDelay = time.Second
	return c.Run() == nil
}
