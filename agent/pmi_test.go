package agent

import (
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent/pmi"
	"github.com/gangway-hpc/gangway/agent/wire"
)

// TestPMIStalledRankIsStopped: a rank that floods lookup_name on its
// PMI_FD and reads no reply reaches the launcher one request at a time;
// once its socket is full of unread replies the write timeout drops its
// PMI connection, the agent stops the rank (it would sleep on), and its
// Exit is a failure of its own naming the reason, not a stop the launcher
// asked for. The test plays the launcher, answering every Name at once.
func TestPMIStalledRankIsStopped(t *testing.T) {
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t), PMILimits: pmi.Limits{WriteTimeout: time.Second}}
	c := serve(t, a)
	script := `yes 'cmd=lookup_name service=svc' | head -n 300000 >&3; exec sleep 600`
	c.startJob(wire.StartJob{JobID: "stall", PMI: &wire.PMIJob{KVSName: "kvs_stall", Size: 2, Mapping: "(vector,(0,2,1))"},
		Ranks: []wire.RankSpec{{Rank: 0, Argv: []string{"/bin/sh", "-c", script}}}})
	replies := make(chan wire.NameReply, 16)
	var sender sync.WaitGroup
	sender.Go(func() {
		for r := range replies {
			if err := c.conn.Send(wire.KindNameReply, r); err != nil {
				t.Errorf("send reply: %v", err)
			}
		}
	})
	defer sender.Wait()
	defer close(replies)
	var exit *wire.Exit
	names := 0
	for done := false; !done; {
		m := c.next()
		switch m.Kind {
		case wire.KindName:
			var n wire.Name
			if err := m.Decode(&n); err != nil {
				t.Fatal(err)
			}
			names++
			replies <- wire.NameReply{ID: n.ID, Status: wire.NameNotFound}
		case wire.KindExit:
			exit = &wire.Exit{}
			if err := m.Decode(exit); err != nil {
				t.Fatal(err)
			}
		case wire.KindStarted:
		case wire.KindDone:
			done = true
		default:
			t.Fatalf("got %s (%s)", m.Kind, m.Payload)
		}
	}
	if exit == nil {
		t.Fatal("no Exit before Done")
	}
	t.Logf("%d lookups reached the launcher; exit %+v", names, *exit)
	if !strings.Contains(exit.Err, "did not read its replies") || exit.Stopped ||
		exit.Signal != int(syscall.SIGTERM) || exit.Code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %+v: want a failure of its own, SIGTERM (143), naming the unread replies", *exit)
	}
	if names == 0 || names >= 300000 {
		t.Errorf("%d lookups reached the launcher, want some and not all", names)
	}
}
