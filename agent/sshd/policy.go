package sshd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// PermitRootLogin values, as sshd's: the agent authenticates with keys
// and certificates only, so "yes" and "prohibit-password" allow the same.
const (
	PermitRootYes              = "yes"
	PermitRootProhibitPassword = "prohibit-password"
	PermitRootNo               = "no"
)

// ParsePermitRootLogin checks a --permit-root-login value.
func ParsePermitRootLogin(s string) (string, error) {
	switch s {
	case PermitRootYes, PermitRootProhibitPassword, PermitRootNo:
		return s, nil
	case "without-password": // sshd's old name for prohibit-password
		return PermitRootProhibitPassword, nil
	}
	return "", fmt.Errorf("permit-root-login %q: want yes, prohibit-password or no", s)
}

// loginPolicy decides which local users a client may log in as, before
// any key is looked at.
type loginPolicy struct {
	self       *account.Account // the account the agent runs as
	permitRoot string           // PermitRoot*; "" means prohibit-password
	allowUsers []string         // patterns; empty allows every user
	lookup     func(name string) (*account.Account, error)
}

// refusal is why a login is refused: why for the agent's log, banner
// (possibly empty) for the client.
type refusal struct {
	why    string
	banner string
}

// account returns the account name may log in as, or why not. Unknown
// users, users without a usable login shell, root when
// --permit-root-login is no, users outside --allow-users and, for an
// agent that does not run as root, every user but its own are refused.
// Only the last says why to the client: the others would tell a
// stranger which accounts exist.
func (p loginPolicy) account(name string) (*account.Account, *refusal) {
	if p.self.Uid != 0 && name != p.self.Name {
		return nil, &refusal{
			why: "the agent runs as " + p.self.Name + ", not as root, and can run sessions only as " + p.self.Name,
			banner: fmt.Sprintf("gangway agent: this agent runs as user %s, not as root, so it can run sessions only as %s; log in as %s (or run the agent as root to serve other users)\n",
				p.self.Name, p.self.Name, p.self.Name),
		}
	}
	a, err := p.lookup(name)
	if errors.Is(err, account.ErrUnknownUser) && p.self.Uid != 0 && name == p.self.Name {
		a, err = p.self, nil // a container's arbitrary uid without a passwd entry
	}
	switch {
	case errors.Is(err, account.ErrUnknownUser):
		return nil, &refusal{why: "unknown user"}
	case err != nil:
		return nil, &refusal{why: err.Error()}
	}
	if err := account.CheckShell(a.Shell); err != nil {
		return nil, &refusal{why: err.Error()}
	}
	if a.Uid == 0 && p.permitRoot == PermitRootNo {
		return nil, &refusal{why: "root login refused (--permit-root-login no)"}
	}
	if len(p.allowUsers) > 0 && !matchAny(p.allowUsers, name) {
		return nil, &refusal{why: "user not in --allow-users"}
	}
	return a, nil
}

// matchAny reports whether s matches one of the shell-style patterns.
func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if textx.MatchPattern(p, s) {
			return true
		}
	}
	return false
}

// SplitList splits a comma- or space-separated flag value into its
// non-empty items (--allow-users, --drop-caches-users).
func SplitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

// DefaultAcceptEnv is what stock sessions accept from env requests when
// the agent is given no other list: Debian's sshd_config AcceptEnv.
var DefaultAcceptEnv = []string{"LANG", "LC_*"}
