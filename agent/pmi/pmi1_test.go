package pmi

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParsePMI1(t *testing.T) {
	tests := []struct {
		line string
		want attrs
	}{
		{"cmd=init pmi_version=1 pmi_subversion=1\n", attrs{{"cmd", "init"}, {"pmi_version", "1"}, {"pmi_subversion", "1"}}},
		{"cmd=get_maxes\n", attrs{{"cmd", "get_maxes"}}},
		{"cmd=put kvsname=kvs_0 key=k value=a b  c \n", attrs{{"cmd", "put"}, {"kvsname", "kvs_0"}, {"key", "k"}, {"value", "a b  c "}}},
		// Open MPI's space-padded base64 ending in '-'.
		{"cmd=put kvsname=k key=1-0-key0 value=AG9iMQA -\n", attrs{{"cmd", "put"}, {"kvsname", "k"}, {"key", "1-0-key0"}, {"value", "AG9iMQA -"}}},
		{"cmd=put key=k value=\n", attrs{{"cmd", "put"}, {"key", "k"}, {"value", ""}}},
		{"cmd=put key=k value=x=y=z\n", attrs{{"cmd", "put"}, {"key", "k"}, {"value", "x=y=z"}}},
		{"cmd=publish_name  service=a=b port=p", attrs{{"cmd", "publish_name"}, {"service", "a=b"}, {"port", "p"}}},
		{"endcmd\n", nil},
		{"cmd=get junk key=k\n", attrs{{"cmd", "get"}, {"key", "k"}}},
		{"=x cmd=get\r\n", attrs{{"cmd", "get"}}},
		{"", nil},
	}
	for _, tt := range tests {
		if got := parsePMI1(tt.line); !slices.Equal(got, tt.want) {
			t.Errorf("parsePMI1(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

// TestPMI1Transcript replays docs/pmi.md §1.6 (two ranks interleaved,
// PMI_FD mode) and checks every reply string.
func TestPMI1Transcript(t *testing.T) {
	log := newEventLog()
	job := Job{KVSName: "kvs_proto_0", Size: 2, Mapping: "(vector,(0,1,2))"}
	s := newTestServer(t, job, []int{0, 1}, nil, log.events())
	r0, r1 := fdClient(t, s, 0), fdClient(t, s, 1)

	for _, c := range []*client{r0, r1} {
		c.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
		c.call("cmd=get_maxes", "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024")
		c.call("cmd=get_appnum", "cmd=appnum appnum=0")
		c.call("cmd=get_my_kvsname", "cmd=my_kvsname kvsname=kvs_proto_0")
		c.call("cmd=get kvsname=kvs_proto_0 key=PMI_process_mapping", "cmd=get_result rc=0 msg=success value=(vector,(0,1,2))")
	}
	for _, r := range []int{0, 1} {
		if !s.Initialized(r) || s.Finalized(r) {
			t.Fatalf("rank %d: initialized %v finalized %v", r, s.Initialized(r), s.Finalized(r))
		}
	}

	// Debugger barrier.
	r1.send("cmd=barrier_in")
	r1.quiet(50 * time.Millisecond) // held until r0 enters
	r0.send("cmd=barrier_in")
	r1.expect("cmd=barrier_out")
	r0.expect("cmd=barrier_out")

	// Shared-memory handle bcast.
	const shm = "2F6465762F73686D2F6D706963685F736861725F746D70"
	r1.send("cmd=barrier_in")
	r0.call("cmd=put kvsname=kvs_proto_0 key=-bcast-1-0 value="+shm, "cmd=put_result rc=0 msg=success")
	r0.send("cmd=barrier_in")
	r1.expect("cmd=barrier_out")
	r0.expect("cmd=barrier_out")
	r1.call("cmd=get kvsname=kvs_proto_0 key=-bcast-1-0", "cmd=get_result rc=0 msg=success value="+shm)

	// Business cards: 430 hex chars each, as observed.
	card0 := strings.Repeat("200DB7C1D4913947", 27)[:430]
	card1 := strings.Repeat("20B37B7B3AB56EE6", 27)[:430]
	r1.call("cmd=put kvsname=kvs_proto_0 key=-allgather-shm-1-1 value="+card1, "cmd=put_result rc=0 msg=success")
	r0.call("cmd=put kvsname=kvs_proto_0 key=-allgather-shm-1-0 value="+card0, "cmd=put_result rc=0 msg=success")
	// Not visible before the barrier, and a miss never blocks.
	r0.call("cmd=get kvsname=kvs_proto_0 key=-allgather-shm-1-1", "cmd=get_result rc=-1 msg=key_-allgather-shm-1-1_not_found value=unknown")
	r0.send("cmd=barrier_in")
	r1.send("cmd=barrier_in")
	r0.expect("cmd=barrier_out")
	r1.expect("cmd=barrier_out")
	r0.call("cmd=get kvsname=kvs_proto_0 key=-allgather-shm-1-0", "cmd=get_result rc=0 msg=success value="+card0)
	r1.call("cmd=get kvsname=kvs_proto_0 key=-allgather-shm-1-1", "cmd=get_result rc=0 msg=success value="+card1)
	r0.call("cmd=get kvsname=kvs_proto_0 key=-allgather-shm-1-1", "cmd=get_result rc=0 msg=success value="+card1)

	// MPI_Finalize.
	r1.send("cmd=barrier_in")
	r0.send("cmd=barrier_in")
	r1.expect("cmd=barrier_out")
	r0.expect("cmd=barrier_out")
	r0.call("cmd=finalize", "cmd=finalize_ack")
	r0.nc.Close()
	r1.call("cmd=finalize", "cmd=finalize_ack")
	r1.nc.Close()

	log.wait(t, "both disconnects", func(_, d []string) bool { return len(d) == 2 })
	slices.Sort(log.disconnects)
	if want := []string{"0:true", "1:true"}; !slices.Equal(log.disconnects, want) {
		t.Errorf("disconnects %q, want %q", log.disconnects, want)
	}
	for _, r := range []int{0, 1} {
		if !s.Finalized(r) {
			t.Errorf("rank %d not finalized", r)
		}
	}
}

// TestPMI1InitAck: a rank that names itself with initack, as MPICH's
// client does with PMI_ID, gets the initack handshake when it names its
// own rank.
func TestPMI1InitAck(t *testing.T) {
	job := Job{KVSName: "kvs_7", Size: 4, Mapping: "(vector,(0,2,2))"}
	s := newTestServer(t, job, []int{2, 3}, newCoordinator(2).host(1), Events{})
	c := fdClient(t, s, 3)
	c.send("cmd=initack pmiid=3")
	for _, l := range []string{"cmd=initack", "cmd=set size=4", "cmd=set rank=3", "cmd=set debug=0"} {
		c.expect(l)
	}
	c.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
	if !s.Initialized(3) || s.Initialized(2) {
		t.Fatalf("initialized: 2=%v 3=%v", s.Initialized(2), s.Initialized(3))
	}
}

// TestPMI1InitAckOtherRank: a connection that claims another local rank,
// or a rank that is not local, is closed.
func TestPMI1InitAckOtherRank(t *testing.T) {
	job := Job{KVSName: "kvs_7", Size: 4, Mapping: "(vector,(0,2,2))"}
	for _, id := range []string{"3", "0"} {
		s := newTestServer(t, job, []int{2, 3}, newCoordinator(2).host(1), Events{})
		d := fdClient(t, s, 2)
		d.send("cmd=initack pmiid=" + id)
		d.eof()
		if s.Initialized(2) || s.Initialized(3) {
			t.Errorf("pmiid=%s on rank 2's connection: initialized 2=%v 3=%v", id, s.Initialized(2), s.Initialized(3))
		}
	}
}

func TestPMI1LongKeysAndSegments(t *testing.T) {
	s := newTestServer(t, Job{KVSName: "kvs_0", Size: 1}, []int{0}, nil, Events{})
	c := fdClient(t, s, 0)
	c.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")

	// A segmented value as MPICH writes it when it exceeds (vallen_max-2)/2.
	hex := strings.Repeat("0123456789ABCDEF", 60) // 960 chars
	const n = 3
	seg := len(hex) / n
	key := "-allgather-shm-1-0"
	c.call("cmd=put kvsname=kvs_0 key="+key+" value=segments=3", "cmd=put_result rc=0 msg=success")
	for i := 1; i <= n; i++ {
		c.call(fmt.Sprintf("cmd=put kvsname=kvs_0 key=%s-seg-%d/%d value=%s", key, i, n, hex[(i-1)*seg:i*seg]), "cmd=put_result rc=0 msg=success")
	}
	longKey := strings.Repeat("k", pmi1KeyMax)
	maxVal := strings.Repeat("v", pmi1ReplyMax-1-len(getResultPrefix))
	spaced := "  padded base64 AG9iMQA -  "
	c.call("cmd=put kvsname=kvs_0 key="+longKey+" value="+maxVal, "cmd=put_result rc=0 msg=success")
	c.call("cmd=put kvsname=kvs_0 key=spaced value="+spaced, "cmd=put_result rc=0 msg=success")
	c.call("cmd=put kvsname=kvs_0 key="+longKey+"x value=1", "cmd=put_result rc=-1 msg=key_too_long")
	c.call("cmd=put kvsname=kvs_0 key=big value="+maxVal+"v", "cmd=put_result rc=-1 msg=value_too_long")
	c.call("cmd=put kvsname=other key=a value=1", "cmd=put_result rc=-1 msg=unknown_kvsname")
	c.call("cmd=barrier_in", "cmd=barrier_out")

	c.call("cmd=get kvsname=kvs_0 key="+key, "cmd=get_result rc=0 msg=success value=segments=3")
	var got strings.Builder
	for i := 1; i <= n; i++ {
		c.send(fmt.Sprintf("cmd=get kvsname=kvs_0 key=%s-seg-%d/%d", key, i, n))
		l := c.line()
		v, ok := strings.CutPrefix(l, getResultPrefix)
		if !ok {
			t.Fatalf("segment %d: %q", i, l)
		}
		got.WriteString(v)
	}
	if got.String() != hex {
		t.Fatalf("segments reassemble to %q", got.String())
	}
	c.call("cmd=get kvsname=kvs_0 key="+longKey, getResultPrefix+maxVal)
	if len(getResultPrefix+maxVal)+1 != pmi1ReplyMax {
		t.Fatalf("longest reply is %d bytes", len(getResultPrefix+maxVal)+1)
	}
	c.call("cmd=get kvsname=kvs_0 key=spaced", getResultPrefix+spaced)
	c.call("cmd=get kvsname=kvs_0 key=big", "cmd=get_result rc=-1 msg=key_big_not_found value=unknown")
}

func TestPMI1MiscCommands(t *testing.T) {
	s := newTestServer(t, Job{KVSName: "kvs_9", Size: 1, AppNum: 2}, []int{0}, nil, Events{})
	c := fdClient(t, s, 0)
	for _, tt := range [][2]string{
		{"cmd=get_universe_size", "cmd=universe_size size=-1"}, // unknown, as Hydra without -usize
		{"cmd=get_appnum", "cmd=appnum appnum=2"},
		{"cmd=get kvsname=kvs_9 key=PMI_dead_processes", "cmd=get_result rc=0 msg=success value="},
		{"cmd=get kvsname=kvs_9 key=PMI_process_mapping", "cmd=get_result rc=-1 msg=key_PMI_process_mapping_not_found value=unknown"},
		// The name service with no Names given: a table of the server's
		// own, Hydra's replies (pmiserv_pmi_v1.c).
		{"cmd=lookup_name service=svc", "cmd=lookup_result rc=1 msg=service_not_found"},
		{"cmd=publish_name service=svc port=tag#0$port#5$", "cmd=publish_result info=ok rc=0 msg=success"},
		{"cmd=publish_name service=svc port=other", "cmd=publish_result info=ok rc=1 msg=key_already_present"},
		{"cmd=lookup_name service=svc", "cmd=lookup_result port=tag#0$port#5$ info=ok rc=0 msg=success"},
		{"cmd=unpublish_name service=svc", "cmd=unpublish_result info=ok rc=0 msg=success"},
		{"cmd=unpublish_name service=svc", "cmd=unpublish_result info=ok rc=1 msg=service_not_found"},
		{"cmd=lookup_name", "cmd=lookup_result rc=-1 msg=missing_service"},
		{"cmd=getbyidx kvsname=kvs_9 idx=0", "cmd=getbyidx_result rc=-1 msg=unknown_command"},
		{"cmd=init pmi_version=3 pmi_subversion=0", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1"},
	} {
		c.call(tt[0], tt[1])
	}
	c.send("mcmd=spawn")
	c.send("nprocs=1")
	c.send("execname=/bin/true")
	c.send("endcmd")
	c.expect("cmd=spawn_result rc=-1 msg=spawn_not_supported")
	c.call("cmd=get_my_kvsname", "cmd=my_kvsname kvsname=kvs_9")

	s = newTestServer(t, Job{KVSName: "kvs_u", Size: 1, UniverseSize: 8}, []int{0}, nil, Events{})
	fdClient(t, s, 0).call("cmd=get_universe_size", "cmd=universe_size size=8")
}

func TestPMI1AbortAndEOF(t *testing.T) {
	log := newEventLog()
	s := newTestServer(t, Job{KVSName: "kvs_a", Size: 3}, []int{0, 1, 2}, nil, log.events())
	r0, r1, r2 := fdClient(t, s, 0), fdClient(t, s, 1), fdClient(t, s, 2)
	for _, c := range []*client{r0, r1, r2} {
		c.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
	}
	r1.send("cmd=abort exitcode=9")
	log.wait(t, "abort", func(a, _ []string) bool { return len(a) == 1 })
	if log.aborts[0] != "1:9:" {
		t.Errorf("abort event %q, want 1:9:", log.aborts[0])
	}
	r1.quiet(50 * time.Millisecond) // abort has no reply

	// Rank 2 exits without finalize, while rank 0 waits in a barrier.
	r0.send("cmd=barrier_in")
	r2.nc.Close()
	log.wait(t, "rank 2 disconnect", func(_, d []string) bool { return slices.Contains(d, "2:false") })
	if s.Finalized(2) || !s.Initialized(2) {
		t.Errorf("rank 2: finalized %v initialized %v", s.Finalized(2), s.Initialized(2))
	}
	// Rank 0 dies inside the barrier: its wait ends with the connection
	// and the exit is reported at once.
	r0.nc.Close()
	log.wait(t, "rank 0 disconnect", func(_, d []string) bool { return slices.Contains(d, "0:false") })
}
