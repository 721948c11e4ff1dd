package agent

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// TestNamesGoToTheLauncher: a rank's PMI publish_name and lookup_name
// reach the launcher as Name requests, and its NameReply answers the rank
// in Hydra's words. The rank is a shell speaking PMI-1 on its PMI_FD (3);
// the test plays the launcher, whose job has one more rank elsewhere.
func TestNamesGoToTheLauncher(t *testing.T) {
	a := &Agent{Name: "h0", Version: "test", Log: zaptest.NewLogger(t)}
	c := serve(t, a)
	script := `ask() { printf '%s\n' "$1" >&3; IFS= read -r reply <&3; echo "$reply"; }
ask 'cmd=publish_name service=svc port=tag#0$'
ask 'cmd=publish_name service=svc port=again'
ask 'cmd=lookup_name service=elsewhere'
ask 'cmd=lookup_name service=nosuch'
ask 'cmd=unpublish_name service=nosuch'
ask 'cmd=finalize'`
	c.startJob(wire.StartJob{JobID: "names", PMI: &wire.PMIJob{KVSName: "kvs_names", Size: 2, Mapping: "(vector,(0,2,1))"},
		Ranks: []wire.RankSpec{{Rank: 0, Argv: []string{"/bin/sh", "-c", script}}}})
	// The launcher's table: "elsewhere" was published on another host.
	table := map[string]string{"elsewhere": "port-on-h1"}
	var names []wire.Name
	var out strings.Builder
	// Replies go from a goroutine of their own, as the launcher's loop
	// sends them apart from its readers: net.Pipe does not buffer, and
	// the agent may be sending (Started, output) while a reply waits.
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
	for done := false; !done; {
		m, err := c.conn.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch m.Kind {
		case wire.KindOutput:
			_, _, data, err := m.Output()
			if err != nil {
				t.Fatal(err)
			}
			out.Write(data)
		case wire.KindName:
			var n wire.Name
			if err := m.Decode(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
			r := wire.NameReply{ID: n.ID, Status: wire.NameOK}
			port, ok := table[n.Service]
			switch {
			case n.Op == wire.NamePublish && ok:
				r.Status = wire.NameExists
			case n.Op == wire.NamePublish:
				table[n.Service] = n.Port
			case !ok:
				r.Status = wire.NameNotFound
			default:
				r.Port = port
			}
			replies <- r
		case wire.KindExit:
			var x wire.Exit
			if err := m.Decode(&x); err != nil || x.Code != 0 {
				t.Fatalf("rank exit %+v %v\noutput:\n%s", x, err, out.String())
			}
		case wire.KindDone:
			done = true
		}
	}
	want := []string{
		"cmd=publish_result info=ok rc=0 msg=success",
		"cmd=publish_result info=ok rc=1 msg=key_already_present",
		"cmd=lookup_result port=port-on-h1 info=ok rc=0 msg=success",
		"cmd=lookup_result rc=1 msg=service_not_found",
		"cmd=unpublish_result info=ok rc=1 msg=service_not_found",
		"cmd=finalize_ack",
	}
	if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); !slices.Equal(got, want) {
		t.Errorf("the rank got %q\nwant %q", got, want)
	}
	var ops []string
	ids := map[uint64]bool{}
	for _, n := range names {
		ops = append(ops, n.Op+" "+n.Service+" "+n.Port)
		ids[n.ID] = true
	}
	wantOps := []string{"publish svc tag#0$", "publish svc again", "lookup elsewhere ", "lookup nosuch ", "unpublish nosuch "}
	if !slices.Equal(ops, wantOps) || len(ids) != len(names) {
		t.Errorf("requests %q (ids %v), want %q with distinct ids", ops, ids, wantOps)
	}
}
