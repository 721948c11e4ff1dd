package engine

import (
	"errors"
	"testing"

	"gangway/hostfile"
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
