//go:build !linux

package osproc

import (
	"errors"
	"syscall"
)

// SetSignalDisposition is Linux-only.
func SetSignalDisposition(sig syscall.Signal, ignore bool) error {
	return errors.New("setting a signal's disposition is Linux-only")
}
