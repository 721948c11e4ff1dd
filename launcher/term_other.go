//go:build !linux

package launcher

import "os"

// termios approximates isatty(3) where TCGETS is not at hand: a character
// device.
func termios(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
