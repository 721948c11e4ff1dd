package launcher

import (
	"os"

	"golang.org/x/sys/unix"
)

// termios reports whether f answers TCGETS, as isatty(3) asks.
func termios(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
