package launcher

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"gangway/hostfile"
	"gangway/launcher/plan"
)

func TestWaitingLine(t *testing.T) {
	hosts := []hostfile.Host{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}, {Name: "e"}, {Name: "f"}}
	refused := func(h string) error {
		return errors.New(h + ":22122: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)")
	}
	for _, tc := range []struct {
		name  string
		ready int
		errs  map[int]error
		want  string
	}{
		{"nothing failed yet", 0, nil, ""},
		{"one refused", 5, map[int]error{3: refused("d")},
			"ready 5/6; waiting for d:22122: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)"},
		{"same reason shared", 4, map[int]error{1: refused("b"), 0: refused("a")},
			"ready 4/6; waiting for a:22122, b:22122: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)"},
		{"different reasons", 4, map[int]error{0: refused("a"), 2: errors.New("agent closed the session: EOF")},
			"ready 4/6; waiting for a:22122: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port); c: agent closed the session: EOF"},
		{"many hosts one reason", 0, map[int]error{0: refused("a"), 1: refused("b"), 2: refused("c"), 3: refused("d"), 4: refused("e")},
			"ready 0/6; waiting for a:22122, b:22122, c:22122, 2 more: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)"},
		{"many reasons", 0, map[int]error{0: errors.New("x1"), 1: errors.New("x2"), 2: errors.New("x3"), 3: errors.New("x4"), 4: errors.New("x4")},
			"ready 0/6; waiting for a: x1; b: x2; c: x3; 2 more hosts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := waitingLine(hosts, tc.ready, tc.errs); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestClassifyRealErrors dials a port nobody listens on and a name that
// never resolves, and checks what the user reads and whether it is retried.
func TestClassifyRealErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var d net.Dialer
	_, err = d.DialContext(t.Context(), "tcp", addr)
	got := classify(addr, err)
	if !strings.HasPrefix(got.Error(), addr+": connection refused (is the agent running, and on this port?") || errors.Is(got, ErrPermanent) {
		t.Errorf("refused: %v (permanent %v)", got, errors.Is(got, ErrPermanent))
	}
	_, err = d.DialContext(t.Context(), "tcp", "gw-no-such.invalid:22122")
	got = classify("gw-no-such.invalid:22122", err)
	if got.Error() != `gw-no-such.invalid:22122: no such host ("gw-no-such.invalid" does not resolve)` || !errors.Is(got, ErrPermanent) {
		t.Errorf("no such host: %v (permanent %v)", got, errors.Is(got, ErrPermanent))
	}
	got = classify("h:1", context.DeadlineExceeded)
	if !strings.HasPrefix(got.Error(), "h:1: no answer") || errors.Is(got, ErrPermanent) {
		t.Errorf("timeout: %v", got)
	}
}

func TestSSHExecError(t *testing.T) {
	for _, tc := range []struct {
		msg, agentPath string
		permanent      bool
		want           string
	}{
		{"bash: line 1: /opt/gw/agent: No such file or directory", "/opt/gw/agent", true, "no agent binary at --agent-path /opt/gw/agent on the host"},
		{"sh: 1: /opt/gw/agent: not found", "/opt/gw/agent", true, "no agent binary at --agent-path /opt/gw/agent"},
		{"ssh: Could not resolve hostname nope: Name or service not known", "agent", true, "no such host (ssh said: ssh: Could not resolve hostname nope: Name or service not known)"},
		{"Host key verification failed.", "agent", true, "host key refused"},
		{"root@h: Permission denied (publickey).", "agent", true, "authentication refused"},
		{"ssh: connect to host h port 22: Connection refused", "agent", false, "ssh: ssh: connect to host h port 22: Connection refused"},
	} {
		err := sshExecError(tc.msg, tc.agentPath)
		if errors.Is(err, ErrPermanent) != tc.permanent || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (permanent %v), want %q permanent %v", tc.msg, err, errors.Is(err, ErrPermanent), tc.want, tc.permanent)
		}
	}
}

func TestPlacementSummary(t *testing.T) {
	ranks := []plan.Rank{{Rank: 0, Host: 0}, {Rank: 1, Host: 1}, {Rank: 2, Host: 0}, {Rank: 3, Host: 1}, {Rank: 4, Host: 0}}
	if got, want := placementSummary([]string{"a", "b", "c"}, ranks), "a: 0,2,4; b: 1,3"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
