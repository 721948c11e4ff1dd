package sshd

import (
	"github.com/gangway-hpc/gangway/agent/account"
)

// SetSelf makes s serve as if the agent ran as a (its login policy,
// its own authorized_keys), so that tests try another agent's policy.
func (s *Server) SetSelf(a *account.Account) { s.self = a }
