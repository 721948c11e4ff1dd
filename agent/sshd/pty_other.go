//go:build !linux

package sshd

import (
	"errors"
	"os"
)

var errNoPTY = errors.New("pty not supported on this platform")

func openPTY(rows, cols uint32) (master, slave *os.File, err error) { return nil, nil, errNoPTY }

func setWinsize(f *os.File, rows, cols uint32) error { return errNoPTY }
