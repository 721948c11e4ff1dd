package agent_test

import (
	"errors"
	"net"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// TestAgentRefusesOtherVersion drives ServeSession with a Hello of
// another protocol version: the agent answers with an Error naming both.
func TestAgentRefusesOtherVersion(t *testing.T) {
	t.Parallel()
	a := &agent.Agent{Name: "v", Log: zaptest.NewLogger(t)}
	ours, theirs := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- a.ServeSession(t.Context(), theirs) }()
	conn := wire.NewConn(ours)
	defer conn.Close()
	go func() { _ = conn.Send(wire.KindHello, wire.Hello{Version: 99, JobID: "x"}) }()
	m, err := conn.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != wire.KindError {
		t.Fatalf("agent answered %s, want error", m.Kind)
	}
	var e wire.Error
	if err := m.Decode(&e); err != nil {
		t.Fatal(err)
	}
	want := (&wire.VersionError{Ours: wire.Version, Theirs: 99}).Error()
	if e.Msg != want {
		t.Errorf("agent's error %q, want %q", e.Msg, want)
	}
	err = <-done
	var ve *wire.VersionError
	if !errors.Is(err, agent.ErrVersion) || !errors.As(err, &ve) || ve.Theirs != 99 {
		t.Errorf("ServeSession returned %v, want ErrVersion with a VersionError", err)
	}
	t.Logf("agent: %s", e.Msg)
}
