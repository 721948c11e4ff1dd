package pmi

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// heldNames is a Names whose answers wait until the test lets each call
// through by name (let), as answers from the launcher do; it records the
// calls it got.
type heldNames struct {
	mu    sync.Mutex
	calls []string
	gates map[string]chan struct{} // closed: that call goes through
	free  bool                     // every call goes through at once
	table *localNames
}

func newHeldNames() *heldNames {
	return &heldNames{gates: map[string]chan struct{}{}, table: newLocalNames(nil)}
}

// gate is call's gate; h.mu is held.
func (h *heldNames) gate(call string) chan struct{} {
	g, ok := h.gates[call]
	if !ok {
		g = make(chan struct{})
		h.gates[call] = g
	}
	return g
}

func (h *heldNames) wait(ctx context.Context, call string) error {
	h.mu.Lock()
	h.calls = append(h.calls, call)
	g, free := h.gate(call), h.free
	h.mu.Unlock()
	if free {
		return nil
	}
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// let lets the call named call through, once.
func (h *heldNames) let(call string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.gate(call))
}

// letAll lets every call through from now on.
func (h *heldNames) letAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.free = true
	for _, g := range h.gates {
		select {
		case <-g:
		default:
			close(g)
		}
	}
}

func (h *heldNames) Publish(ctx context.Context, service, port string) error {
	if err := h.wait(ctx, "publish "+service+" "+port); err != nil {
		return err
	}
	return h.table.Publish(ctx, service, port)
}

func (h *heldNames) Unpublish(ctx context.Context, service string) error {
	if err := h.wait(ctx, "unpublish "+service); err != nil {
		return err
	}
	return h.table.Unpublish(ctx, service)
}

func (h *heldNames) Lookup(ctx context.Context, service string) (string, error) {
	if err := h.wait(ctx, "lookup "+service); err != nil {
		return "", err
	}
	return h.table.Lookup(ctx, service)
}

// TestNamesDoNotBlock: while a rank's name-service call waits for its
// answer, other ranks' PMI traffic is answered (gets never block); a
// threaded PMI-2 rank's next request waits for it (one request at a time
// per rank), and the answer then arrives in Hydra's words.
func TestNamesDoNotBlock(t *testing.T) {
	names := newHeldNames()
	s := newTestServer(t, Job{KVSName: "kvs_n", Size: 3, Mapping: "(vector,(0,1,3))"}, []int{0, 1, 2}, nil, Events{Names: names})
	r0, r1, r2 := fdClient(t, s, 0), fdClient(t, s, 1), fdClient(t, s, 2)
	r0.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
	r1.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
	pmi2Init(r2, "2")
	r2.frame()

	r0.send("cmd=publish_name service=svc port=p0")
	r2.send2("cmd=name-lookup;thrid=0x1;name=svc;infokeycount=0;")
	r0.quiet(50 * time.Millisecond)
	r1.call("cmd=get kvsname=kvs_n key=nope", "cmd=get_result rc=-1 msg=key_nope_not_found value=unknown")
	r1.call("cmd=put kvsname=kvs_n key=k value=v", "cmd=put_result rc=0 msg=success")
	r2.send2("cmd=kvs-get;thrid=0x2;jobid=kvs_n;srcid=-1;key=nope;")
	r2.quiet(50 * time.Millisecond)

	// Let the publish through first, then the lookup.
	for deadline := time.Now().Add(replyTimeout); ; time.Sleep(5 * time.Millisecond) {
		names.mu.Lock()
		n := len(names.calls)
		names.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls %q, want the publish and the lookup", names.calls)
		}
	}
	names.let("publish svc p0")
	r0.expect("cmd=publish_result info=ok rc=0 msg=success")
	names.let("lookup svc")
	r2.expectFrame("cmd=name-lookup-response;thrid=0x1;port=p0;found=TRUE;rc=0;")
	r2.expectFrame("cmd=kvs-get-response;thrid=0x2;found=FALSE;rc=0;")
	names.letAll()

	// Hydra's PMI-2 words for the other answers (pmiserv_pmi_v2.c).
	for _, tc := range [][2]string{
		{"cmd=name-publish;name=svc;port=p2;infokeycount=0;", "cmd=name-publish-response;rc=1;errmsg=duplicate_service_svc;"},
		{"cmd=name-lookup;name=svc;infokeycount=0;", "cmd=name-lookup-response;port=p0;found=TRUE;rc=0;"},
		{"cmd=name-unpublish;name=svc;infokeycount=0;", "cmd=name-unpublish-response;rc=0;"},
		{"cmd=name-unpublish;name=svc;infokeycount=0;", "cmd=name-unpublish-response;rc=1;errmsg=service_svc_not_found;"},
		{"cmd=name-lookup;name=svc;infokeycount=0;", "cmd=name-lookup-response;found=FALSE;rc=1;"},
		{"cmd=name-publish;name=svc;port=p2;infokeycount=0;", "cmd=name-publish-response;rc=0;"},
		{"cmd=name-lookup;infokeycount=0;", "cmd=name-lookup-response;rc=1;errmsg=missing name;"},
		{"cmd=spawn;ncmds=1;preputcount=0;subcmd=/bin/true;maxprocs=1;argc=0;infokeycount=0;", "cmd=spawn-response;rc=1;errmsg=spawn_not_supported;"},
	} {
		r2.send2(tc[0])
		r2.expectFrame(tc[1])
	}
	r0.call("cmd=lookup_name service=svc", "cmd=lookup_result port=p2 info=ok rc=0 msg=success")
}

// refusingNames refuses every call, as the launcher does a publish into a
// full table.
type refusingNames struct{}

var errRefused = errors.New("name table full")

func (refusingNames) Publish(context.Context, string, string) error { return errRefused }
func (refusingNames) Unpublish(context.Context, string) error       { return errRefused }
func (refusingNames) Lookup(context.Context, string) (string, error) {
	return "", errRefused
}

// TestNamesRefused: a refusal is an error reply, not a closed connection.
func TestNamesRefused(t *testing.T) {
	s := newTestServer(t, Job{KVSName: "kvs_r", Size: 2, Mapping: "(vector,(0,1,2))"}, []int{0, 1}, nil, Events{Names: refusingNames{}})
	r0, r1 := fdClient(t, s, 0), fdClient(t, s, 1)
	r0.call("cmd=publish_name service=svc port=p", "cmd=publish_result rc=-1 msg=name_table_full")
	r0.call("cmd=unpublish_name service=svc", "cmd=unpublish_result rc=-1 msg=name_table_full")
	r0.call("cmd=lookup_name service=svc", "cmd=lookup_result rc=-1 msg=name_table_full")
	pmi2Init(r1, "1")
	r1.frame()
	r1.send2("cmd=name-publish;name=svc;port=p;infokeycount=0;")
	r1.expectFrame("cmd=name-publish-response;rc=1;errmsg=name table full;")
	r1.send2("cmd=name-lookup;name=svc;infokeycount=0;")
	r1.expectFrame("cmd=name-lookup-response;rc=1;errmsg=name table full;")
	r0.call("cmd=get_my_kvsname", "cmd=my_kvsname kvsname=kvs_r")
}
