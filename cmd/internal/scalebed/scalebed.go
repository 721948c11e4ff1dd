// Package scalebed holds the bounds a bed of more than a thousand agents
// on one machine gives its agents and its launcher: gwbench's scale runs
// and the 1,024-agent tree test share them.
//
// Thousands of agents, their relays' logins, their ranks and the launcher
// on a few CPUs queue their logins past the agents' 5 s version timeout
// and 20 s login grace, and stall sessions past the launcher's 15 s
// keepalive bound (on a two-CPU machine whose system calls take 1 us,
// 3,761 of 8,944 logins of a level met those bounds, and about one host
// in a hundred answered no keepalive for 90 s while the ranks started).
// A real node logs in its children and answers its relay on CPUs of its
// own; a user of an overloaded cluster would set the same.
package scalebed

import (
	"time"

	"github.com/gangway-hpc/gangway/agent/sshd"
)

// Limits are the agents' login bounds: a minute for the version line,
// two for the login.
var Limits = sshd.StartupLimits{VersionTimeout: time.Minute, LoginGraceTime: 2 * time.Minute}

// SSHConfig is the launcher's ssh configuration (-F): hosts lost after
// 5 min of silence (ServerAliveInterval 10, ServerAliveCountMax 30), and
// logins within 2 min (ConnectTimeout 120, which bounds the whole login).
const SSHConfig = "Host *\n    ServerAliveInterval 10\n    ServerAliveCountMax 30\n    ConnectTimeout 120\n"
