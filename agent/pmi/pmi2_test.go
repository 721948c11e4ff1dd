package pmi

import (
	"bufio"
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParsePMI2Header(t *testing.T) {
	tests := []struct {
		h       string
		n       int
		left    bool
		wantErr bool
	}{
		{"44    ", 44, true, false},
		{"    44", 44, false, false},
		{"65536 ", 65536, true, false},
		{"65537 ", 0, false, true},
		{"     0", 0, false, true},
		{"4 4   ", 0, false, true},
		{"cmd=in", 0, false, true},
		{"-1    ", 0, false, true},
	}
	for _, tt := range tests {
		n, left, err := parsePMI2Header([]byte(tt.h))
		if (err != nil) != tt.wantErr || n != tt.n || (err == nil && left != tt.left) {
			t.Errorf("parsePMI2Header(%q) = %d, %v, %v", tt.h, n, left, err)
		}
	}
}

// TestReadPMI2Quirk reads the exact bytes MPICH 4.0.2 wrote (docs/pmi.md
// §2.3) and frames as MPICH ≥ 4.1 writes them.
func TestReadPMI2Quirk(t *testing.T) {
	tests := []struct {
		wire string
		want attrs
	}{
		{"44    cmd=fullinit;pmirank=0;threaded=FALSE;\x00\x00\x00\x00\x00\x00",
			attrs{{"cmd", "fullinit"}, {"pmirank", "0"}, {"threaded", "FALSE"}}},
		{"50    cmd=info-getjobattr;key=PMI_process_mapping;d;\x00\x00\x00\x00",
			attrs{{"cmd", "info-getjobattr"}, {"key", "PMI_process_mapping"}}},
		{"49    cmd=info-getnodeattr;key=shmname;wait=TRUE;tnodea",
			attrs{{"cmd", "info-getnodeattr"}, {"key", "shmname"}, {"wait", "TRUE"}}},
		// Garbage that starts with ';' must not swallow the last pair.
		{"26    cmd=kvs-fence;key=x;;ab=c;",
			attrs{{"cmd", "kvs-fence"}, {"key", "x"}, {"ab", "c"}}},
		// Exact-length, right-aligned (MPICH ≥ 4.1), with escapes.
		{"    38cmd=kvs-put;key=k;value=addr;;of;;1;;;",
			attrs{{"cmd", "kvs-put"}, {"key", "k"}, {"value", "addr;of;1;"}}},
	}
	for _, tt := range tests {
		r := bufio.NewReader(strings.NewReader(tt.wire))
		p, quirk, err := readPMI2(r)
		if err != nil {
			t.Fatalf("%q: %v", tt.wire, err)
		}
		if r.Buffered() != 0 {
			t.Errorf("%q: %d bytes left unread", tt.wire, r.Buffered())
		}
		if got := parsePMI2(p, quirk); !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %q, want %q", tt.wire, got, tt.want)
		}
	}
}

func TestPMI2EscapeRoundTrip(t *testing.T) {
	for _, v := range []string{"addr;of;1", ";", ";;", "a;", ";a", "", "x=y;z=w;", "no semicolon"} {
		frame := encodePMI2("kvs-get-response", attrs{{"found", "TRUE"}, {"value", v}, {"rc", "0"}})
		p, quirk, err := readPMI2(bufio.NewReader(bytes.NewReader(frame)))
		if err != nil || quirk {
			t.Fatalf("%q: %v quirk=%v", frame, err, quirk)
		}
		want := attrs{{"cmd", "kvs-get-response"}, {"found", "TRUE"}, {"value", v}, {"rc", "0"}}
		if got := parsePMI2(p, false); !slices.Equal(got, want) {
			t.Errorf("%q: got %q", frame, got)
		}
	}
	if got := string(encodePMI2("x", attrs{{"value", "a;b"}})); got != "    17cmd=x;value=a;;b;" {
		t.Errorf("encode = %q", got)
	}
}

// pmi2Init upgrades a connection to PMI-2 the way MPICH's client does and
// sends fullinit in 4.0.2's quirky framing.
func pmi2Init(c *client, rank string) {
	c.t.Helper()
	c.call("cmd=init pmi_version=2 pmi_subversion=0", "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0")
	p := "cmd=fullinit;pmirank=" + rank + ";threaded=FALSE;"
	c.sendRaw([]byte(padLeft(len(p)+6) + p + "\x00\x00\x00\x00\x00\x00"))
}

// padLeft is MPICH 4.0.2's header: left-aligned %d in 6 spaces.
func padLeft(n int) string {
	s := []byte("      ")
	copy(s, strconv.Itoa(n))
	return string(s)
}

func TestPMI2Session(t *testing.T) {
	log := newEventLog()
	job := Job{KVSName: "kvs_2", JobID: "job2", Size: 2, Mapping: "(vector,(0,1,2))", AppNum: 0}
	s := newTestServer(t, job, []int{0, 1}, nil, log.events())
	r0, r1 := fdClient(t, s, 0), fdClient(t, s, 1)

	pmi2Init(r0, "0")
	r0.expectFrame("cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=0;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;")
	// Rank 1 speaks framing from its first byte (no PMI-1 init line), as
	// MPICH >= 4.1 can, and runs threaded.
	r1.send2("cmd=fullinit;pmirank=1;threaded=TRUE;thrid=0x7f01;")
	r1.expectFrame("cmd=fullinit-response;thrid=0x7f01;pmi-version=2;pmi-subversion=0;rank=1;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;")
	if !s.Initialized(0) || !s.Initialized(1) {
		t.Fatal("fullinit did not mark the ranks initialized")
	}

	r0.sendRaw([]byte("50    cmd=info-getjobattr;key=PMI_process_mapping;d;\x00\x00\x00\x00"))
	r0.expectFrame("cmd=info-getjobattr-response;found=TRUE;value=(vector,(0,1,2));rc=0;")
	r0.send2("cmd=info-getjobattr;key=universeSize;") // unknown, as from Hydra
	r0.expectFrame("cmd=info-getjobattr-response;found=FALSE;rc=0;")
	r0.send2("cmd=info-getjobattr;key=PMI_hwloc_xmlfile;")
	r0.expectFrame("cmd=info-getjobattr-response;found=FALSE;rc=0;")
	r0.send2("cmd=job-getid;")
	r0.expectFrame("cmd=job-getid-response;jobid=job2;rc=0;")

	// getnodeattr wait=TRUE is held until the key is put; meanwhile the
	// server keeps answering the other rank, the waiting rank's next
	// request waits for the answer (one request at a time per rank), and
	// thrid is echoed.
	r1.sendRaw([]byte("49    cmd=info-getnodeattr;key=shmname;wait=TRUE;tnodea"))
	r1.quiet(50 * time.Millisecond)
	r1.send2("cmd=kvs-get;thrid=0x7f02;jobid=job2;srcid=-1;key=nope;")
	r1.quiet(50 * time.Millisecond)
	r0.send2("cmd=info-getnodeattr;key=shmname;wait=FALSE;")
	r0.expectFrame("cmd=info-getnodeattr-response;found=FALSE;rc=0;")
	r0.send2("cmd=info-putnodeattr;key=shmname;value=/dev/shm/x;y;")
	r0.expectFrame("cmd=info-putnodeattr-response;rc=0;")
	r1.expectFrame("cmd=info-getnodeattr-response;found=TRUE;value=/dev/shm/x;rc=0;")
	r1.expectFrame("cmd=kvs-get-response;thrid=0x7f02;found=FALSE;rc=0;")

	// kvs-put / kvs-fence / kvs-get with ';' escaping.
	r0.send2("cmd=kvs-put;key=card-0;value=addr;;of;;0;")
	r0.expectFrame("cmd=kvs-put-response;rc=0;")
	r1.send2("cmd=kvs-put;key=card-1;value=addr;;of;;1;")
	r1.expectFrame("cmd=kvs-put-response;rc=0;")
	r0.send2("cmd=kvs-fence;")
	r0.quiet(50 * time.Millisecond)
	r1.send2("cmd=kvs-fence;thrid=0x7f03;")
	r0.expectFrame("cmd=kvs-fence-response;rc=0;")
	r1.expectFrame("cmd=kvs-fence-response;thrid=0x7f03;rc=0;")
	r0.send2("cmd=kvs-get;jobid=job2;srcid=1;key=card-1;")
	r0.expectFrame("cmd=kvs-get-response;found=TRUE;value=addr;;of;;1;rc=0;")
	r1.send2("cmd=kvs-get;jobid=job2;srcid=0;key=card-0;")
	r1.expectFrame("cmd=kvs-get-response;found=TRUE;value=addr;;of;;0;rc=0;")

	// Errors.
	r0.send2("cmd=kvs-put;key=k;")
	r0.expectFrame("cmd=kvs-put-response;rc=1;errmsg=missing key or value;")
	r0.send2("cmd=bogus;")
	r0.expectFrame(`cmd=bogus-response;rc=1;errmsg=unknown command "bogus";`)

	// Abort (rank 1) and finalize (rank 0).
	r1.send2("cmd=abort;isworld=TRUE;msg=oops;; bad;")
	log.wait(t, "abort", func(a, _ []string) bool { return len(a) == 1 })
	if log.aborts[0] != "1:1:oops; bad" {
		t.Errorf("abort %q", log.aborts[0])
	}
	r0.send2("cmd=finalize;")
	r0.expectFrame("cmd=finalize-response;rc=0;")
	r0.nc.Close()
	r1.nc.Close()
	log.wait(t, "disconnects", func(_, d []string) bool { return len(d) == 2 })
	slices.Sort(log.disconnects)
	if want := []string{"0:true", "1:false"}; !slices.Equal(log.disconnects, want) {
		t.Errorf("disconnects %q, want %q", log.disconnects, want)
	}
}

// TestPMI2FullinitRank: fullinit must name the connection's own rank.
func TestPMI2FullinitRank(t *testing.T) {
	s := newTestServer(t, Job{Size: 1, Mapping: "(vector,(0,1,1))"}, []int{0}, nil, Events{})
	c := fdClient(t, s, 0)
	c.send2("cmd=fullinit;pmirank=5;threaded=FALSE;")
	c.expectFrame("cmd=fullinit-response;rc=1;errmsg=pmirank \"5\": connection of rank 0 claims rank 5;")
	if s.Initialized(0) {
		t.Error("a refused fullinit marked rank 0 initialized")
	}
	c.send2("cmd=fullinit;pmirank=0;threaded=FALSE;")
	c.expectFrame("cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=0;size=1;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;")
	c.send2("cmd=job-getid;")
	c.expectFrame("cmd=job-getid-response;jobid=kvs_0;rc=0;")
}

// TestPMI2UniverseSize: a universe size given (-usize) is found; none is
// found=FALSE (TestPMI2Session).
func TestPMI2UniverseSize(t *testing.T) {
	s := newTestServer(t, Job{Size: 1, Mapping: "(vector,(0,1,1))", UniverseSize: 16}, []int{0}, nil, Events{})
	c := fdClient(t, s, 0)
	c.send2("cmd=fullinit;pmirank=0;threaded=FALSE;")
	c.expectFrame("cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=0;size=1;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;")
	c.send2("cmd=info-getjobattr;key=universeSize;")
	c.expectFrame("cmd=info-getjobattr-response;found=TRUE;value=16;rc=0;")
}
