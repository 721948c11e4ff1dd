//go:build !linux

package proc

import (
	"os"
	"syscall"
)

// AsUser calls fn: off Linux the agent serves no other users.
func AsUser(cred *syscall.Credential, fn func() error) error { return fn() }

// Enterable says why dir cannot be a working directory, or nil.
func Enterable(cred *syscall.Credential, dir string) error {
	st, err := os.Stat(dir)
	if err == nil && !st.IsDir() {
		return syscall.ENOTDIR
	}
	return err
}
