//go:build !linux

package proc

import "os/exec"

// CloseOnExecInherited does nothing off Linux.
func CloseOnExecInherited() {}

// DefaultSignalsForChildren does nothing off Linux.
func DefaultSignalsForChildren() {}

// StartClean starts cmd.
func StartClean(cmd *exec.Cmd) error { return cmd.Start() }
