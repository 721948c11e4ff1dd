package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// control is the agent's end of a supervisor's control socket. The agent
// writes one byte per signal to deliver (SIGKILL: kill everything below
// the supervisor); the supervisor writes one report line once it has
// started the program, "pid N", or could not, "err MESSAGE". Its EOF is,
// for the supervisor, the agent's death.
type control struct {
	f     *os.File
	known chan struct{} // closed once the report is in, or the supervisor is gone
	pid   int           // the program's pid, from the report
	err   error         // why the supervisor could not start the program
}

// newControl makes a control socket: the agent's end, non-blocking so
// that writes can have a deadline, and the supervisor's (its ExtraFiles).
func newControl() (*control, *os.File, error) {
	// Close-on-exec before any other fork can copy them: a copy of the
	// supervisor's end in another child would hide the supervisor's EOF.
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, err
	}
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, err
	}
	c := &control{f: os.NewFile(uintptr(fds[0]), "supervisor control"), known: make(chan struct{})}
	return c, os.NewFile(uintptr(fds[1]), "supervisor control"), nil
}

// readReport reads the supervisor's report line; it returns at the line,
// at EOF (the supervisor is gone) or when the socket is closed.
func (c *control) readReport() {
	defer close(c.known)
	line, err := bufio.NewReaderSize(c.f, 4096).ReadString('\n')
	if err != nil {
		return
	}
	line = strings.TrimSuffix(line, "\n")
	if v, ok := strings.CutPrefix(line, "pid "); ok {
		c.pid, _ = strconv.Atoi(v)
	} else if v, ok := strings.CutPrefix(line, "err "); ok {
		c.err = errors.New(v)
	}
}

// signal asks the supervisor to deliver sig. A supervisor reads its
// socket at once; the deadline only bounds one stopped by someone else.
func (c *control) signal(sig syscall.Signal) error {
	_ = c.f.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := c.f.Write([]byte{byte(sig)})
	return err
}

// report is the supervisor's side of readReport.
func report(f *os.File, pid int, err error) {
	msg := fmt.Sprintf("pid %d\n", pid)
	if err != nil {
		msg = "err " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
	}
	if _, werr := f.WriteString(msg); werr != nil && err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", supervisorArgv0, err)
	}
}

// close closes the agent's end; a nil control is fine.
func (c *control) close() {
	if c != nil {
		c.f.Close()
	}
}
