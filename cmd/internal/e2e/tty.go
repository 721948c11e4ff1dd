package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The controlling terminal, as an agent started from a terminal has it
// (`sudo agent` in a shell, `nohup agent &` in tmux). A test binary whose
// TestMain calls HelperMain can play two more parts:
//
//   - a terminal (PTYEnv=1): it runs os.Args[1:] as the leader of a new
//     session whose controlling terminal, and stdio, is a new pty, copies
//     what the pty prints to its own stderr, passes SIGTERM on, and exits
//     with the program's status;
//   - a rank that tries the terminal (TTYProbeEnv=1): it prints "tty
//     opened" or "tty refused: ERR" for open("/dev/tty"), "tiocsti fd N:
//     ERR" for an injection on each of its stdio fds, and "session own"
//     when it leads a session of its own.

const (
	// PTYEnv, set to 1, makes HelperMain run os.Args[1:] on a new pty.
	PTYEnv = "GANGWAY_E2E_PTY"
	// TTYProbeEnv, set to 1, makes HelperMain a rank that tries to reach
	// its controlling terminal.
	TTYProbeEnv = "GANGWAY_E2E_TTYPROBE"
)

func onPTY() int {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pty:", err)
		return 2
	}
	var unlock int32
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, int(unlock)); err != nil {
		fmt.Fprintln(os.Stderr, "unlockpt:", err)
		return 2
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ptsname:", err)
		return 2
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pty slave:", err)
		return 2
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Env = os.Environ()
	for i, kv := range cmd.Env {
		if kv == PTYEnv+"=1" {
			cmd.Env = append(cmd.Env[:i:i], cmd.Env[i+1:]...)
			break
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 2
	}
	slave.Close()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() { // ends with the process
		for range term {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}()
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(os.Stderr, master) // EIO once every holder of the slave is gone
		close(copied)
	}()
	err = cmd.Wait()
	select { // the rest of what the pty printed
	case <-copied:
	case <-time.After(time.Second):
	}
	master.Close()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return 2
	}
	return 0
}

func ttyProbe() int {
	if f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0); err == nil {
		fmt.Println("tty opened")
		f.Close()
	} else {
		fmt.Println("tty refused:", errors.Unwrap(err))
	}
	for fd := 0; fd <= 2; fd++ {
		c := byte('x')
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		fmt.Printf("tiocsti fd %d: %v\n", fd, e)
	}
	if sid, _ := unix.Getsid(0); sid == os.Getpid() {
		fmt.Println("session own")
	}
	return 0
}
