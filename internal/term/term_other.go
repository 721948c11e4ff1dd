//go:build !linux

package term

import "os"

// IsTerminal reports whether f is a character device, which outside Linux
// is taken for a terminal.
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Background is false outside Linux: job control is not looked at.
func Background(f *os.File) bool { return false }
