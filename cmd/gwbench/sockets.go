package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// socketInodes lists the inodes of pid's sockets (/proc/PID/fd links
// "socket:[N]").
func socketInodes(pid int) (map[uint64]bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, err
	}
	out := map[uint64]bool{}
	for _, n := range names {
		l, err := os.Readlink(dir + "/" + n)
		if err != nil {
			continue // closed meanwhile
		}
		if v, ok := strings.CutPrefix(l, "socket:["); ok {
			if ino, err := strconv.ParseUint(strings.TrimSuffix(v, "]"), 10, 64); err == nil {
				out[ino] = true
			}
		}
	}
	return out, nil
}

// tcpEstablished is the TCP state ESTABLISHED in /proc/net/tcp's "st".
const tcpEstablished = "01"

// establishedInodes adds the inodes of the ESTABLISHED sockets of one
// /proc/net/tcp or tcp6 table to into.
func establishedInodes(r io.Reader, into map[uint64]bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 1<<20)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			return fmt.Errorf("tcp table: %d fields in %q", len(f), sc.Text())
		}
		if f[3] != tcpEstablished {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return fmt.Errorf("tcp table: inode %q: %w", f[9], err)
		}
		into[ino] = true
	}
	return sc.Err()
}

// tcpConns counts pid's established TCP connections: its socket inodes
// that the TCP tables of its network namespace list as ESTABLISHED.
func tcpConns(pid int) (int, error) {
	mine, err := socketInodes(pid)
	if err != nil {
		return 0, err
	}
	est := map[uint64]bool{}
	for _, t := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, t))
		if err != nil {
			return 0, err
		}
		err = establishedInodes(f, est)
		f.Close()
		if err != nil {
			return 0, err
		}
	}
	n := 0
	for ino := range mine {
		if est[ino] {
			n++
		}
	}
	return n, nil
}

// connWatch samples a process's sockets every 100 ms and, only when its
// socket count has reached a new high, the TCP tables (reading them
// costs milliseconds at 20,000 connections): once the count holds for a
// sample, and at most once a second while it climbs. peak is the most
// established TCP connections seen at once.
type connWatch struct {
	stop    chan struct{}
	done    sync.WaitGroup
	peak    int // established TCP connections
	sockets int // socket descriptors
	err     error
}

func watchConns(pid int) *connWatch {
	w := &connWatch{stop: make(chan struct{})}
	w.done.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		checked, high, prev := -1, 0, -1 // socket count at the last table read; highest seen; last sample's
		var last time.Time
		for {
			steady := false
			if s, err := socketInodes(pid); err == nil {
				high = max(high, len(s))
				w.sockets = high
				steady, prev = len(s) == prev && len(s) == high, len(s)
			}
			if high > checked && (steady || time.Since(last) >= time.Second) {
				if n, err := tcpConns(pid); err == nil {
					w.peak = max(w.peak, n)
					checked, last = high, time.Now()
				} else if w.err == nil && !os.IsNotExist(err) {
					w.err = err
				}
			}
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	})
	return w
}

// end stops the sampling and returns the peaks of established
// connections and of socket descriptors.
func (w *connWatch) end() (conns, sockets int, err error) {
	close(w.stop)
	w.done.Wait()
	return w.peak, w.sockets, w.err
}
