package nettest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// helperMain runs the test binary as a helper instead of the tests; the
// mode comes from helperEnv, which tests pass to ranks with -x.
func helperMain(mode string) int {
	switch mode {
	case "rendezvous":
		if err := rendezvous(); err != nil {
			fmt.Fprintln(os.Stderr, "rendezvous:", err)
			return 1
		}
		return 0
	case "pmiprobe":
		if err := pmiProbe(); err != nil {
			fmt.Fprintln(os.Stderr, "pmi probe:", err)
			return 1
		}
		return 0
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		return 2
	}
}

// rendezvousTimeout bounds the helper's wait for its peers.
const rendezvousTimeout = 60 * time.Second

// rendezvous is a torch-style TCP store in miniature: rank 0 listens on
// MASTER_ADDR:MASTER_PORT (so MASTER_ADDR must be one of its host's own
// addresses), every other rank dials it and says hello, and rank 0 answers
// once it has heard from all of them. Each rank prints
//
//	rank R host H master A:P
//
// then rank 0 "rank 0 heard from N ranks", the others "rank R reached
// master".
func rendezvous() error {
	rank, err := strconv.Atoi(os.Getenv("RANK"))
	if err != nil {
		return fmt.Errorf("RANK: %w", err)
	}
	size, err := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	if err != nil {
		return fmt.Errorf("WORLD_SIZE: %w", err)
	}
	master := net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
	fmt.Printf("rank %d host %s master %s\n", rank, os.Getenv("GANGWAY_HOST"), master)
	deadline := time.Now().Add(rendezvousTimeout)
	if rank == 0 {
		l, err := net.Listen("tcp", master)
		if err != nil {
			return err
		}
		defer l.Close()
		_ = l.(*net.TCPListener).SetDeadline(deadline)
		conns := make([]net.Conn, 0, size-1)
		for len(conns) < size-1 {
			c, err := l.Accept()
			if err != nil {
				return fmt.Errorf("heard from %d of %d ranks: %w", len(conns), size-1, err)
			}
			defer c.Close()
			_ = c.SetDeadline(deadline)
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "hello from rank ") {
				return fmt.Errorf("bad hello %q: %v", line, err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			if _, err := fmt.Fprintln(c, "welcome"); err != nil {
				return err
			}
		}
		fmt.Printf("rank 0 heard from %d ranks\n", len(conns))
		return nil
	}
	var c net.Conn
	for {
		c, err = net.DialTimeout("tcp", master, time.Second)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dial %s: %w", master, err)
		}
		time.Sleep(50 * time.Millisecond) // rank 0 may not listen yet
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := fmt.Fprintf(c, "hello from rank %d\n", rank); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "welcome\n" {
		return fmt.Errorf("answer %q: %v", line, err)
	}
	fmt.Printf("rank %d reached master\n", rank)
	return nil
}
