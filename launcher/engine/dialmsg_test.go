package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/launcher/transport"
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
			"ready 5/6; waiting up to 1m0s (--start-timeout) for d:22122: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)"},
		{"same reason shared", 4, map[int]error{1: refused("b"), 0: refused("a")},
			"ready 4/6; waiting up to 1m0s (--start-timeout) for a:22122, b:22122: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)"},
		{"different reasons", 4, map[int]error{0: refused("a"), 2: errors.New("agent closed the session: EOF")},
			"ready 4/6; waiting up to 1m0s (--start-timeout) for a:22122: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port); c: agent closed the session: EOF"},
		{"many hosts one reason", 0, map[int]error{0: refused("a"), 1: refused("b"), 2: refused("c"), 3: refused("d"), 4: refused("e")},
			"ready 0/6; waiting up to 1m0s (--start-timeout) for a:22122, b:22122, c:22122, 2 more: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)"},
		{"many reasons", 0, map[int]error{0: errors.New("x1"), 1: errors.New("x2"), 2: errors.New("x3"), 3: errors.New("x4"), 4: errors.New("x4")},
			"ready 0/6; waiting up to 1m0s (--start-timeout) for a: x1; b: x2; c: x3; 2 more hosts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := waitingLine(hosts, tc.ready, tc.errs, "waiting up to 1m0s (--start-timeout)"); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestUnreachableGrace drives the grace's decisions through note: it runs
// only while every host not ready last failed with ErrUnreachable and
// all the others are ready, and ends the wait (expire) once it has run
// out; the status line says which wait is on.
func TestUnreachableGrace(t *testing.T) {
	hosts := []hostfile.Host{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	refused := transport.Unreachable(errors.New("c:22122: connection refused"))
	type step struct {
		host int
		err  error
	}
	for _, tc := range []struct {
		name  string
		steps []step
		grace time.Duration
		runs  bool // the grace runs after the steps, and so expires
	}{
		{"dead host once the others are ready", []step{{0, nil}, {2, refused}, {1, nil}}, time.Millisecond, true},
		{"two dead hosts", []step{{0, nil}, {1, refused}, {2, refused}}, time.Millisecond, true},
		{"others not ready yet", []step{{0, nil}, {2, refused}}, time.Millisecond, false},
		{"no host ready: all may be starting", []step{{0, refused}, {1, refused}, {2, refused}}, time.Millisecond, false},
		{"another reason", []step{{0, nil}, {1, nil}, {2, errors.New("c: agent closed the session: EOF")}}, time.Millisecond, false},
		{"the host came up", []step{{0, nil}, {1, nil}, {2, refused}, {2, nil}}, time.Hour, false},
		{"the reason changed", []step{{0, nil}, {1, nil}, {2, refused}, {2, errors.New("c: ssh handshake: EOF")}}, time.Hour, false},
		{"grace off", []step{{0, nil}, {1, nil}, {2, refused}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expired := make(chan error, 1)
			w := &waiting{hosts: hosts, lastErr: map[int]error{}, wait: dialWait{timeout: time.Minute, grace: tc.grace},
				expire: func(cause error) { expired <- cause }}
			defer w.stop()
			for _, s := range tc.steps {
				w.note(s.host, s.err)
			}
			w.mu.Lock()
			runs := w.inGrace()
			line := waitingLine(hosts, w.ready, w.lastErr, w.waitText())
			w.mu.Unlock()
			if runs != tc.runs {
				t.Fatalf("grace running: %v, want %v", runs, tc.runs)
			}
			if !tc.runs {
				if strings.Contains(line, "--unreachable-grace") {
					t.Errorf("status line %q names the grace", line)
				}
				select {
				case cause := <-expired:
					t.Fatalf("expired (%v), want no expiry", cause)
				case <-time.After(20 * time.Millisecond):
				}
				return
			}
			want := fmt.Sprintf("every other host is ready, waiting %v more (--unreachable-grace) for ", tc.grace)
			if !strings.Contains(line, want) {
				t.Errorf("status line %q lacks %q", line, want)
			}
			select {
			case cause := <-expired:
				var ge errUnreachableGrace
				if !errors.As(cause, &ge) || ge.grace != tc.grace {
					t.Errorf("cause %v, want errUnreachableGrace{%v}", cause, tc.grace)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the grace never expired")
			}
		})
	}
}

// TestHostErrors: hosts that could not be reached are a line each, but
// more than four that failed the same way (the same port and reason)
// share one line naming every one, in node-list form, at the place of
// the first; the errors stay reachable through errors.Is and As.
func TestHostErrors(t *testing.T) {
	refused := func(h string) *hostError {
		return &hostError{Host: h, Err: errors.New(h + ":22122: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)")}
	}
	var es hostErrors
	for i := range 6 {
		es = append(es, refused(fmt.Sprintf("gpu%04d", 101+i)))
	}
	es = append(es[:1], append(hostErrors{{Host: "gpu0007", Err: transport.Permanent(errors.New("host key mismatch"))}}, es[1:]...)...)
	es = append(es, refused("gpu0200"), &hostError{Host: "gpu0300", Err: errors.New("gpu0300:2222: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)")})
	want := strings.Join([]string{
		"7 hosts (gpu[0101-0106,0200]), port 22122: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)",
		"host gpu0007: host key mismatch",
		"host gpu0300: gpu0300:2222: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)",
	}, "\n")
	if got := es.Error(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// Four the same way stay a line each, as a small launch's do.
	if got, want := es[:4].Error(), strings.Join([]string{es[0].Error(), es[1].Error(), es[2].Error(), es[3].Error()}, "\n"); got != want {
		t.Errorf("four hosts: got\n%s\nwant\n%s", got, want)
	}
	err := fmt.Errorf("cannot reach every host: %w", es)
	var he *hostError
	if !errors.Is(err, transport.ErrPermanent) || !errors.As(err, &he) || he.Host != "gpu0101" {
		t.Errorf("errors.Is/As through the hosts' errors: %v, %v", errors.Is(err, transport.ErrPermanent), he)
	}
}
