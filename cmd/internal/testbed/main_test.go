package testbed_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/cmd/internal/testbed"
	"github.com/gangway-hpc/gangway/cmd/internal/testbed/roottest"
)

// helperEnv switches the test binary into a helper mode, so that tests can
// run a TCP listener or dialer inside a namespace without python or ping.
const helperEnv = "GANGWAY_TESTBED_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "listen": // listen ADDR: greet every connection with "hi"
		ln, err := net.Listen("tcp", os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println("ready")
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(2)
			}
			fmt.Fprintln(c, "hi")
			c.Close()
		}
	case "dial": // dial ADDR TIMEOUT: exit 0 if ADDR greets us within TIMEOUT
		timeout, _ := time.ParseDuration(os.Args[2])
		c, err := net.DialTimeout("tcp", os.Args[1], timeout)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = c.SetDeadline(time.Now().Add(timeout))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || line != "hi\n" {
			fmt.Fprintf(os.Stderr, "read %q: %v\n", line, err)
			os.Exit(1)
		}
		os.Exit(0)
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// newBed builds a bed that is closed, and checked, when the test ends.
func newBed(t *testing.T, o testbed.Options) *testbed.Bed {
	t.Helper()
	roottest.RequireRoot(t)
	o.Logf = t.Logf
	b, err := testbed.New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func helperCmd(t *testing.T, b *testbed.Bed, host int, mode string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := b.Command(t.Context(), host, exe, args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	return cmd
}

// startListener runs the listen helper on host, on all addresses.
func startListener(t *testing.T, b *testbed.Bed, host, port int) *testbed.Proc {
	t.Helper()
	p, err := b.StartCmd(helperCmd(t, b, host, "listen", "0.0.0.0:"+strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "listener on host "+strconv.Itoa(host), func() bool {
		return strings.Contains(p.Output(), "ready")
	})
	return p
}

// dial runs the dial helper on host and reports whether addr greeted it.
func dial(t *testing.T, b *testbed.Bed, host int, addr string, timeout time.Duration) (bool, string) {
	t.Helper()
	out, err := helperCmd(t, b, host, "dial", addr, timeout.String()).CombinedOutput()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 1 {
		return false, strings.TrimSpace(string(out))
	}
	if err != nil {
		t.Fatalf("dial helper on host %d: %v: %s", host, err, out)
	}
	return true, strings.TrimSpace(string(out))
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ipLines runs `ip args...` and returns its output lines.
func ipLines(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// leftovers lists namespaces and root-namespace links whose names start
// with prefix and a non-digit (so "gwt1" does not see "gwt10...").
func leftovers(t *testing.T, prefix string) []string {
	t.Helper()
	re := regexp.MustCompile(`^` + prefix + `($|[^0-9])`)
	var left []string
	for _, l := range ipLines(t, "netns", "list") {
		if f := strings.Fields(l); len(f) > 0 && re.MatchString(f[0]) {
			left = append(left, "netns "+f[0])
		}
	}
	for _, l := range ipLines(t, "-o", "link", "show") {
		if f := strings.Fields(l); len(f) > 1 && re.MatchString(f[1]) {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			left = append(left, "link "+name)
		}
	}
	return left
}
