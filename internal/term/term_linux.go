package term

import (
	"os"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal (its termios can be read).
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Background reports whether f is this process's terminal and this
// process is not in its foreground process group: a job started with &
// from an interactive shell. Reading f would stop the process (SIGTTIN,
// "Stopped (tty input)"). False when f is no terminal, or not this
// process's controlling one.
func Background(f *os.File) bool {
	fd := int(f.Fd())
	sid, err := unix.IoctlGetInt(fd, unix.TIOCGSID) // ENOTTY unless our controlling terminal
	if err != nil {
		return false
	}
	if own, err := unix.Getsid(0); err != nil || sid != own {
		return false
	}
	pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pg != unix.Getpgrp()
}
