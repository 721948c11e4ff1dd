//go:build !linux

package agent

import "os"

func openPTY(rows, cols uint32) (master, slave *os.File, err error) { return nil, nil, errNoPTY }

func setWinsize(f *os.File, rows, cols uint32) error { return errNoPTY }
