package pmi

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

func TestLimitsDefaults(t *testing.T) {
	for _, tc := range []struct {
		in, want Limits
	}{
		{Limits{}, Limits{DefaultKeys, DefaultBytes, DefaultWriteTimeout}},
		{Limits{Keys: -1, Bytes: -1, WriteTimeout: -1}, Limits{DefaultKeys, DefaultBytes, DefaultWriteTimeout}},
		{Limits{Keys: 3, Bytes: 4, WriteTimeout: time.Second}, Limits{3, 4, time.Second}},
	} {
		if got := tc.in.withDefaults(); got != tc.want {
			t.Errorf("%+v.withDefaults() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// TestBudget: what a change of entries costs, and which changes a budget
// takes.
func TestBudget(t *testing.T) {
	m := map[string]string{"a": "xyz"}
	for _, tc := range []struct {
		name     string
		key, val string
		want     usage
	}{
		{"new key", "b", "12", usage{1, 3 + EntryOverhead}},
		{"longer value", "a", "xyzw", usage{0, 1}},
		{"shorter value", "a", "x", usage{0, -2}},
		{"same value", "a", "xyz", usage{}},
	} {
		if got := setCost(m, tc.key, tc.val); got != tc.want {
			t.Errorf("%s: setCost = %+v, want %+v", tc.name, got, tc.want)
		}
	}

	lim := Limits{Keys: 2, Bytes: 2*EntryOverhead + 10}
	for _, tc := range []struct {
		name string
		used usage
		d    usage
		ok   bool
	}{
		{"fits", usage{}, usage{1, EntryOverhead + 5}, true},
		{"fills both exactly", usage{1, EntryOverhead + 5}, usage{1, EntryOverhead + 5}, true},
		{"one key too many", usage{2, 2 * EntryOverhead}, usage{1, EntryOverhead}, false},
		{"one byte too many", usage{1, EntryOverhead + 5}, usage{1, EntryOverhead + 6}, false},
		{"a longer value past the bytes", usage{2, 2*EntryOverhead + 10}, usage{0, 1}, false},
		{"freeing always fits", usage{2, 2*EntryOverhead + 10}, usage{-1, -EntryOverhead}, true},
		{"a shorter value always fits", usage{2, 2*EntryOverhead + 10}, usage{0, -3}, true},
	} {
		b := budget{lim: lim, used: tc.used}
		err := b.take(tc.d)
		if (err == nil) != tc.ok {
			t.Errorf("%s: take(%+v) at %+v: %v, want ok=%v", tc.name, tc.d, tc.used, err, tc.ok)
		}
		switch {
		case err != nil && !errors.Is(err, ErrLimit):
			t.Errorf("%s: %v is not ErrLimit", tc.name, err)
		case err != nil && b.used != tc.used:
			t.Errorf("%s: a refused take changed the usage to %+v", tc.name, b.used)
		case err == nil && b.used != tc.used.plus(tc.d):
			t.Errorf("%s: usage %+v, want %+v", tc.name, b.used, tc.used.plus(tc.d))
		}
	}
}

// TestMergeCost: a barrier's result costs what it adds to the visible
// keys; the job-wide answer wins over this host's puts.
func TestMergeCost(t *testing.T) {
	data := map[string]string{"old": "12345"}
	for _, tc := range []struct {
		name      string
		puts, all map[string]string
		want      usage
	}{
		{"nothing", nil, nil, usage{}},
		{"local puts echoed in all", map[string]string{"a": "1"}, map[string]string{"a": "1", "b": "22"},
			entryCost("a", "1").plus(entryCost("b", "22"))},
		{"all wins over puts", map[string]string{"a": "1111"}, map[string]string{"a": "1"}, entryCost("a", "1")},
		{"a put all lacks", map[string]string{"a": "1"}, map[string]string{}, entryCost("a", "1")},
		{"overwrite a visible key", nil, map[string]string{"old": "1"}, usage{0, -4}},
	} {
		if got := mergeCost(data, tc.puts, tc.all); got != tc.want {
			t.Errorf("%s: mergeCost = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestKVSBounds: puts, node attributes and barrier results share the
// job's budget; a refusal changes nothing; a barrier gives its puts'
// share back whether it succeeds or fails.
func TestKVSBounds(t *testing.T) {
	job := Job{Size: 1, Limits: Limits{Keys: 4, Bytes: 4*EntryOverhead + 40}.withDefaults()}
	k := newKVS(job, 1, localFencer{})
	val := strings.Repeat("v", 9) // with key "kN": 11 bytes + overhead
	steps := []struct {
		name string
		do   func() error
		ok   bool
	}{
		{"put k1", func() error { return k.put("k1", val) }, true},
		{"put k2", func() error { return k.put("k2", val) }, true},
		{"put k3", func() error { return k.put("k3", val) }, true},
		{"put k4: past the bytes", func() error { return k.put("k4", val) }, false},
		{"overwrite k1 shorter", func() error { return k.put("k1", "v") }, true},
		{"put k4 now fits", func() error { return k.put("k4", "") }, true},
		{"put k5: past the keys", func() error { return k.put("k5", "") }, false},
		{"node attribute: past the keys", func() error { return k.putNodeAttr("n", "") }, false},
	}
	for _, st := range steps {
		if err := st.do(); (err == nil) != st.ok || (err != nil && !errors.Is(err, ErrLimit)) {
			t.Fatalf("%s: %v, want ok=%v", st.name, err, st.ok)
		}
	}
	// The barrier moves the puts into the visible keys at the same cost.
	var released error = errors.New("not released")
	e, puts, last, err := k.enter(0, func(_ int, err error) { released = err })
	if err != nil || !last {
		t.Fatalf("enter: last=%v %v", last, err)
	}
	before := k.budget.used
	k.complete(e, puts, puts, nil)
	if released != nil || k.budget.used != before || len(k.data) != 4 {
		t.Fatalf("barrier: %v, usage %+v -> %+v, %d keys visible", released, before, k.budget.used, len(k.data))
	}
	// A job-wide answer larger than the budget fails the barrier, shows
	// nothing and keeps the usage.
	e, puts, _, _ = k.enter(0, func(_ int, err error) { released = err })
	k.complete(e, puts, map[string]string{"remote": strings.Repeat("r", 100)}, nil)
	if !errors.Is(released, ErrLimit) || k.budget.used != before {
		t.Fatalf("oversized barrier: %v, usage %+v, want ErrLimit and %+v", released, k.budget.used, before)
	}
	if _, ok := k.get("remote"); ok {
		t.Fatal("a refused barrier result became visible")
	}
	// The server's own name table shares the budget.
	names := newLocalNames(k)
	if err := names.Publish(t.Context(), "svc", "port"); !errors.Is(err, ErrLimit) {
		t.Fatalf("publish into a full budget: %v", err)
	}
	// A closed server lets go of everything; a barrier answered after
	// that (the launcher's late FenceDone) fails.
	e, puts, _, _ = k.enter(0, func(_ int, err error) { released = err })
	k.drop()
	k.complete(e, puts, map[string]string{"late": "x"}, nil)
	if !errors.Is(released, ErrClosed) || k.budget.used != (usage{}) {
		t.Fatalf("barrier after drop: %v, usage %+v", released, k.budget.used)
	}
	if _, ok := k.get("k1"); ok {
		t.Fatal("a key survived drop")
	}
}

// TestPMIRefusals: what a rank sees at each bound, in either protocol,
// and that the connection then keeps serving.
func TestPMIRefusals(t *testing.T) {
	lim := Limits{Keys: 2, Bytes: 1 << 20}
	s := newTestServer(t, Job{KVSName: "kvs_b", Size: 2, Limits: lim}, []int{0, 1}, nil, Events{})
	r0, r1 := fdClient(t, s, 0), fdClient(t, s, 1)
	r0.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
	r0.call("cmd=put kvsname=kvs_b key=a value=1", "cmd=put_result rc=0 msg=success")
	pmi2Init(r1, "1")
	r1.frame()
	r1.send2("cmd=info-putnodeattr;key=n;value=" + strings.Repeat("x", pmi2ValMax+1) + ";")
	r1.expectFrame("cmd=info-putnodeattr-response;rc=1;errmsg=key or value too long;")
	r1.send2("cmd=info-putnodeattr;key=n;value=x;")
	r1.expectFrame("cmd=info-putnodeattr-response;rc=0;")
	r1.send2("cmd=kvs-put;key=b;value=2;")
	r1.expectFrame("cmd=kvs-put-response;rc=1;errmsg=pmi: limit reached: the job's PMI key-value space on this host holds at most 2 keys;")
	r0.call("cmd=put kvsname=kvs_b key=c value=3",
		"cmd=put_result rc=-1 msg=pmi:_limit_reached:_the_job's_PMI_key-value_space_on_this_host_holds_at_most_2_keys")
	r0.call("cmd=publish_name service=svc port=p", "cmd=publish_result rc=-1 msg=pmi:_limit_reached:_the_job's_PMI_key-value_space_on_this_host_holds_at_most_2_keys")
	r0.call("cmd=put kvsname=kvs_b key=a value=4", "cmd=put_result rc=0 msg=success") // an overwrite
	r0.call("cmd=get_my_kvsname", "cmd=my_kvsname kvsname=kvs_b")
}

// TestWriteTimeoutOnlyWhileFull: the write timeout counts only the time
// a rank leaves its socket full, not the agent's own delay before a
// write: with a timeout shorter than any such delay (1 ns), a rank that
// reads its replies gets every one, PMI-1 and PMI-2, a barrier's
// release written from the completing host's goroutine too, and nobody
// is failed. (With the deadline set before the write, a reply into an
// empty socket failed once the agent waited longer than the timeout.)
func TestWriteTimeoutOnlyWhileFull(t *testing.T) {
	failed := make(chan error, 4)
	ev := Events{Fail: func(rank int, err error) { failed <- fmt.Errorf("rank %d: %w", rank, err) }}
	coord := newCoordinator(2)
	job := Job{KVSName: "kvs_w", Size: 2, Mapping: wire.ProcessMapping([]int{0, 1}), Limits: Limits{WriteTimeout: time.Nanosecond}}
	a := newTestServer(t, job, []int{0}, coord.asyncHost(0), ev)
	b := newTestServer(t, job, []int{1}, coord.asyncHost(1), ev)
	r0, r1 := fdClient(t, a, 0), fdClient(t, b, 1)
	r0.call("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
	r0.call("cmd=get_my_kvsname", "cmd=my_kvsname kvsname=kvs_w")
	r0.call("cmd=put kvsname=kvs_w key=a value=1", "cmd=put_result rc=0 msg=success")
	pmi2Init(r1, "1")
	r1.expectFrame("cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=1;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;")
	r1.send2("cmd=kvs-put;key=b;value=2;")
	r1.expectFrame("cmd=kvs-put-response;rc=0;")
	r0.send("cmd=barrier_in")
	r1.send2("cmd=kvs-fence;")
	r1.expectFrame("cmd=kvs-fence-response;rc=0;")
	r0.expect("cmd=barrier_out")
	r0.call("cmd=get kvsname=kvs_w key=b", "cmd=get_result rc=0 msg=success value=2")
	select {
	case err := <-failed:
		t.Errorf("failed a rank that read its replies: %v", err)
	default:
	}
}
