package main

import (
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
)

// A /proc/net/tcp table: a listener, an established pair, a TIME_WAIT.
const tcpTable = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:56CE 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1087 1 000000007d54ea85 100 0 0 10 0
   1: 0100007F:56CE 0100007F:B33C 01 00000000:00000000 00:00000000 00000000     0        0 2001 1 000000004e760525 20 4 30 10 -1
   2: 0100007F:B33C 0100007F:56CE 01 00000000:00000000 00:00000000 00000000     0        0 2002 1 000000004e760526 20 4 30 10 -1
   3: 0100007F:B33D 0100007F:56CE 06 00000000:00000000 03:00000308 00000000     0        0 0 3 000000004e760527
`

func TestEstablishedInodes(t *testing.T) {
	got := map[uint64]bool{}
	if err := establishedInodes(strings.NewReader(tcpTable), got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[2001] || !got[2002] {
		t.Errorf("established = %v, want 2001 and 2002", got)
	}
	if err := establishedInodes(strings.NewReader("header\n 0: short line\n"), got); err == nil {
		t.Error("a short line: no error")
	}
}

// TestTCPConnsKnownSocket: a connection this process makes to itself
// counts twice (both ends are its sockets), its listener not at all.
func TestTCPConnsKnownSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before, err := tcpConns(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, err := tcpConns(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before != 2 {
		t.Errorf("established connections %d -> %d, want 2 more", before, after)
	}
	w := watchConns(os.Getpid())
	conns, sockets, err := w.end()
	if err != nil || conns != after || sockets < 3 {
		t.Errorf("watchConns: %d connections, %d sockets, %v; want %d and at least 3", conns, sockets, err, after)
	}
}
