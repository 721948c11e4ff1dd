package engine

import (
	"errors"
	"io"
	"testing"

	"github.com/gangway-hpc/gangway/hostfile"
)

// TestSendFailed: a send to a host whose agent said nothing fails naming
// the host and the step; a connection that ended (a bare EOF) reads as
// the launcher's words for a lost agent, and is still io.EOF; what the
// agent said before it closed the session wins.
func TestSendFailed(t *testing.T) {
	s := &session{host: hostfile.Host{Name: "gpu02"}}
	for _, c := range []struct {
		err  error
		want string
	}{
		{io.EOF, "host gpu02: send preflight: connection closed"},
		{errors.New("write: broken pipe"), "host gpu02: send preflight: write: broken pipe"},
	} {
		err := s.sendFailed("send preflight", c.err)
		if err.Error() != c.want || !errors.Is(err, c.err) {
			t.Errorf("sendFailed(%v) = %q (is it: %v), want %q", c.err, err, errors.Is(err, c.err), c.want)
		}
	}
	said := "start-job-timeout: no start within 10m0s"
	s.said.Store(&said)
	if err := s.sendFailed("send start", io.EOF); err.Error() != "host gpu02: "+said {
		t.Errorf("with the agent's reason: %q", err)
	}
}
