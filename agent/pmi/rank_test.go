package pmi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The test binary doubles as a rank: with rankModeEnv set it speaks PMI
// on PMI_FD as that mode says, prints one line of results and exits.
const (
	rankModeEnv = "GANGWAY_PMI_TEST_RANK"
	rankNEnv    = "GANGWAY_PMI_TEST_N" // requests a flood sends
	// rankTimeLimit bounds every mode, whatever the server does.
	rankTimeLimit = 2 * time.Minute
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(rankModeEnv); mode != "" {
		os.Exit(runRank(mode))
	}
	os.Exit(m.Run())
}

// rankConn is a rank's end of its PMI socket.
type rankConn struct {
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func dialPMI() (*rankConn, error) {
	fd, err := strconv.Atoi(os.Getenv("PMI_FD"))
	if err != nil {
		return nil, fmt.Errorf("PMI_FD %q: %w", os.Getenv("PMI_FD"), err)
	}
	nc, err := net.FileConn(os.NewFile(uintptr(fd), "pmi"))
	if err != nil {
		return nil, fmt.Errorf("PMI_FD %d: %w", fd, err)
	}
	deadline := time.Now().Add(rankTimeLimit)
	nc.SetDeadline(deadline)
	return &rankConn{nc: nc, br: bufio.NewReaderSize(nc, 1<<16), bw: bufio.NewWriterSize(nc, 1<<16)}, nil
}

// call sends one PMI-1 line and reads the reply line.
func (c *rankConn) call(line string) (string, error) {
	if _, err := c.bw.WriteString(line + "\n"); err != nil {
		return "", err
	}
	if err := c.bw.Flush(); err != nil {
		return "", err
	}
	s, err := c.br.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

// frame reads one PMI-2 reply payload.
func (c *rankConn) frame() (string, error) {
	var h [pmi2HeaderLen]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(h[:])))
	if err != nil {
		return "", fmt.Errorf("header %q", h)
	}
	p := make([]byte, n)
	_, err = io.ReadFull(c.br, p)
	return string(p), err
}

func (c *rankConn) send2(payload string) error {
	_, err := fmt.Fprintf(c.bw, "%6d%s", len(payload), payload)
	return err
}

// runRank runs mode and returns the exit code.
func runRank(mode string) int {
	c, err := dialPMI()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	n, _ := strconv.Atoi(os.Getenv(rankNEnv))
	switch mode {
	case "honest":
		err = honestRank(c)
	case "puts":
		// Distinct keys with values near the PMI-1 maximum.
		v := strings.Repeat("v", 900)
		err = floodPMI1(c, n, func(i int) string { return fmt.Sprintf("cmd=put kvsname=kvs_a key=k%d value=%s", i, v) })
	case "padded":
		// One-byte values on lines of a kilobyte: what the server keeps
		// must not be the line.
		pad := strings.Repeat("p", 950)
		err = floodPMI1(c, n, func(i int) string { return fmt.Sprintf("cmd=put kvsname=kvs_a key=k%d pad=%s value=v", i, pad) })
	case "big":
		err = bigValues(c, n)
	case "lookups":
		err = lookupFlood(c, n)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Println(mode+":", err)
		return 1
	}
	return 0
}

// honestRank does what an MPICH rank does through PMI-1: init, a business
// card put, a barrier, every peer's card, a barrier, finalize.
func honestRank(c *rankConn) error {
	rank, size := os.Getenv("PMI_RANK"), os.Getenv("PMI_SIZE")
	nsize, _ := strconv.Atoi(size)
	steps := [][2]string{
		{"cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"},
		{"cmd=get_maxes", "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024"},
		{"cmd=put kvsname=kvs_h key=card-" + rank + " value=card-of-" + rank, "cmd=put_result rc=0 msg=success"},
		{"cmd=barrier_in", "cmd=barrier_out"},
	}
	for r := range nsize {
		steps = append(steps, [2]string{fmt.Sprintf("cmd=get kvsname=kvs_h key=card-%d", r), fmt.Sprintf("%scard-of-%d", getResultPrefix, r)})
	}
	steps = append(steps, [2]string{"cmd=barrier_in", "cmd=barrier_out"}, [2]string{"cmd=finalize", "cmd=finalize_ack"})
	for _, st := range steps {
		got, err := c.call(st[0])
		if err != nil || got != st[1] {
			return fmt.Errorf("%s: got %q %v, want %q", st[0], got, err, st[1])
		}
	}
	fmt.Println("honest rank", rank, "ok")
	return nil
}

// floodPMI1 sends n PMI-1 requests as fast as the socket takes them, one
// goroutine writing and this one reading the replies, and prints how many
// were refused.
func floodPMI1(c *rankConn, n int, req func(i int) string) error {
	if got, err := c.call("cmd=init pmi_version=1 pmi_subversion=1"); err != nil || !strings.Contains(got, "rc=0") {
		return fmt.Errorf("init: %q %v", got, err)
	}
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		for i := range n {
			if _, werr = c.bw.WriteString(req(i) + "\n"); werr != nil {
				return
			}
		}
		werr = c.bw.Flush()
	})
	ok, refused, first := 0, 0, ""
	for range n {
		line, err := c.br.ReadString('\n')
		if err != nil {
			c.nc.Close()
			wg.Wait()
			return fmt.Errorf("after %d replies: %w (writer: %v)", ok+refused, err, werr)
		}
		if strings.Contains(line, " rc=0 ") {
			ok++
			continue
		}
		if refused++; first == "" {
			first = strings.TrimSuffix(line, "\n")
		}
	}
	wg.Wait()
	fmt.Printf("sent %d: %d accepted, %d refused, the first with %q\n", n, ok, refused, first)
	return werr
}

// bigValues sends PMI-2 values beyond PMI2_MAX_VALLEN, then n puts of the
// longest value allowed, reading every reply.
func bigValues(c *rankConn, n int) error {
	if got, err := c.call("cmd=init pmi_version=2 pmi_subversion=0"); err != nil || !strings.Contains(got, "rc=0") {
		return fmt.Errorf("init: %q %v", got, err)
	}
	huge := strings.Repeat("h", 60000)
	maxv := strings.Repeat("m", pmi2ValMax)
	reqs := []string{"cmd=fullinit;pmirank=" + os.Getenv("PMI_RANK") + ";threaded=FALSE;",
		"cmd=kvs-put;key=huge;value=" + huge + ";", "cmd=info-putnodeattr;key=huge;value=" + huge + ";"}
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		for _, r := range reqs {
			if werr = c.send2(r); werr != nil {
				return
			}
		}
		for i := range n {
			cmd := "kvs-put"
			if i%2 == 1 {
				cmd = "info-putnodeattr"
			}
			if werr = c.send2(fmt.Sprintf("cmd=%s;key=k%d;value=%s;", cmd, i, maxv)); werr != nil {
				return
			}
		}
		werr = c.bw.Flush()
	})
	var replies []string
	ok, refused := 0, 0
	for i := range len(reqs) + n {
		p, err := c.frame()
		if err != nil {
			c.nc.Close()
			wg.Wait()
			return fmt.Errorf("after %d replies: %w (writer: %v)", i, err, werr)
		}
		switch {
		case i < len(reqs):
			replies = append(replies, p)
		case strings.Contains(p, "rc=0;"):
			ok++
		default:
			if refused++; refused == 1 {
				replies = append(replies, p)
			}
		}
	}
	wg.Wait()
	fmt.Printf("%d puts of %d bytes: %d accepted, %d refused; replies %q\n", n, pmi2ValMax, ok, refused, replies[1:])
	return werr
}

// lookupFlood writes n lookup_name requests and reads no reply. It ends
// when the server drops the connection (a write fails), after n, or at
// the time limit, and reports which.
func lookupFlood(c *rankConn, n int) error {
	if got, err := c.call("cmd=init pmi_version=1 pmi_subversion=1"); err != nil || !strings.Contains(got, "rc=0") {
		return fmt.Errorf("init: %q %v", got, err)
	}
	for i := range n {
		if _, err := fmt.Fprintf(c.bw, "cmd=lookup_name service=s%d\n", i); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return fmt.Errorf("still writing at the time limit after %d lookups", i)
			}
			fmt.Printf("dropped after %d lookups: %v\n", i, err)
			return nil
		}
	}
	return fmt.Errorf("all %d lookups were taken", n)
}
