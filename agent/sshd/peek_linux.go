package sshd

import (
	"net"

	"golang.org/x/sys/unix"
)

// sentAnything reports whether bytes from the client wait unread on c:
// a client that has spoken, though the agent has not read it yet (its
// goroutine may not have run: the agent runs on one CPU).
func sentAnything(c net.Conn) bool {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	var buf [1]byte
	sent := false
	// Control, not Read: Read would wait for the read lock of a
	// goroutine blocked reading c. A peek that does not wait reads
	// nothing.
	_ = rc.Control(func(fd uintptr) {
		n, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		sent = err == nil && n > 0
	})
	return sent
}
