package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// dgxHosts are n hosts' brief facts as a launch gets them from a job of
// DGX H100s: the fixture's with each host's own name, port and address.
func dgxHosts(tb testing.TB, n int) []Msg { return hostsLike(tb, "dgx-h100", n) }

// hostsLike are n hosts' brief facts like the fixture name's, each with
// its own name, port and (where it chose its network) address.
func hostsLike(tb testing.TB, name string, n int) []Msg {
	tb.Helper()
	base := readFacts(tb, name).Briefed(launchHello)
	ms := make([]Msg, n)
	for i := range ms {
		f := base
		f.Name = fmt.Sprintf("%s-%04d", name, i)
		f.Hostname = f.Name
		f.FreePort = 40000 + i
		if f.Net != nil {
			net := *f.Net
			net.Addr = fmt.Sprintf("10.30.%d.%d", i/250, i%250+1)
			net.Addrs = []string{net.Addr + "/16"}
			f.Net = &net
		}
		ms[i] = Msg{Kind: KindFacts, Payload: mustJSON(tb, f)}
	}
	return ms
}

// plainFacts is the facts as Msg.Decode gives them.
func plainFacts(tb testing.TB, m Msg) Facts {
	tb.Helper()
	var f Facts
	if err := m.Decode(&f); err != nil {
		tb.Fatal(err)
	}
	return f
}

// TestFactsDecoder: each host's facts are what Msg.Decode gives, and the
// parts that are the same bytes are one value, shared: the first host's.
func TestFactsDecoder(t *testing.T) {
	var d FactsDecoder
	ms := dgxHosts(t, 4)
	loop := Msg{Kind: KindFacts, Payload: mustJSON(t, readFacts(t, "loopback-agent"))}
	sick := readFacts(t, "dgx-h100").Briefed(launchHello)
	h := *sick.Health
	h.Checks = append([]Check{{Name: CheckGPUBusy, Status: CheckFail, Detail: "GPU 3 runs pid 4242"}}, h.Checks[1:]...)
	sick.Health = &h
	sickMsg := Msg{Kind: KindFacts, Payload: mustJSON(t, sick)}
	var got []Facts
	for _, m := range append(ms, loop, sickMsg, ms[0]) {
		var f Facts
		if err := d.Decode(m, &f); err != nil {
			t.Fatal(err)
		}
		if want := plainFacts(t, m); !reflect.DeepEqual(f, want) {
			t.Fatalf("decoded %s:\n%+v\nwant %+v", f.Name, f, want)
		}
		got = append(got, f)
	}
	first, last := got[0], got[len(got)-1]
	for _, f := range []Facts{got[1], got[2], got[3], last} {
		if f.Health != first.Health || f.GPUTopo != first.GPUTopo || &f.HCAs[0] != &first.HCAs[0] || &f.GPUs[0] != &first.GPUs[0] {
			t.Errorf("%s: its parts alike are not the first host's (health %v, topology %v, ports %v, GPUs %v)", f.Name,
				f.Health == first.Health, f.GPUTopo == first.GPUTopo, &f.HCAs[0] == &first.HCAs[0], &f.GPUs[0] == &first.GPUs[0])
		}
		if f.Net == first.Net {
			t.Errorf("%s: shares the first host's network choice", f.Name)
		}
	}
	if s := got[5]; s.Health == first.Health || s.Health.Checks[0].Status != CheckFail || &s.HCAs[0] != &first.HCAs[0] {
		t.Errorf("the sick host's health %+v; want its own, beside the others' ports", s.Health)
	}
	if l := got[4]; l.Health == first.Health || l.GPUs != nil || l.GPUTopo != nil {
		t.Errorf("the loopback agent: %+v", l)
	}
}

// TestFactsDecoderErrors: what Msg.Decode refuses, Decode refuses, and a
// part refused is not kept (the next host's same bytes are refused too).
func TestFactsDecoderErrors(t *testing.T) {
	var d FactsDecoder
	for _, tc := range []struct {
		name string
		m    Msg
		want string
	}{
		{"not facts", Msg{Kind: KindHello, Payload: []byte(`{}`)}, "not facts"},
		{"not JSON", Msg{Kind: KindFacts, Payload: []byte(`{"name":`)}, "decode facts"},
		{"a number for ports", Msg{Kind: KindFacts, Payload: []byte(`{"hcas":5}`)}, "hcas"},
		{"a GPU of the wrong type", Msg{Kind: KindFacts, Payload: []byte(`{"gpus":[{"index":"0"}]}`)}, "gpus"},
		{"a topology of the wrong type", Msg{Kind: KindFacts, Payload: []byte(`{"gpu_topo":{"link":[1]}}`)}, "gpu_topo"},
		{"health of the wrong type", Msg{Kind: KindFacts, Payload: []byte(`{"health":{"checks":{}}}`)}, "health"},
		{"health of the wrong type, again", Msg{Kind: KindFacts, Payload: []byte(`{"health":{"checks":{}}}`)}, "health"},
		{"a name of the wrong type", Msg{Kind: KindFacts, Payload: []byte(`{"name":1,"hcas":[]}`)}, "decode facts"},
	} {
		var f Facts
		err := d.Decode(tc.m, &f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
		if tc.m.Kind == KindFacts && tc.m.Decode(&Facts{}) == nil {
			t.Errorf("%s: Msg.Decode takes it", tc.name)
		}
	}
	if len(d.health) != 0 || len(d.hcas) != 0 || len(d.gpus) != 0 || len(d.topo) != 0 {
		t.Errorf("kept parts that did not decode: %d health, %d ports, %d GPUs, %d topologies", len(d.health), len(d.hcas), len(d.gpus), len(d.topo))
	}
	// Absent and null parts are none, as in Msg.Decode.
	for _, p := range []string{`{}`, `{"health":null,"gpus":null,"hcas":[],"gpu_topo":null}`} {
		m := Msg{Kind: KindFacts, Payload: []byte(p)}
		var f Facts
		if err := d.Decode(m, &f); err != nil || !reflect.DeepEqual(f, plainFacts(t, m)) {
			t.Errorf("%s: %+v, %v; want %+v", p, f, err, plainFacts(t, m))
		}
	}
}

// TestFactsDecoderBound: hosts whose parts all differ are decoded right
// and the decoder keeps at most internMax of each.
func TestFactsDecoderBound(t *testing.T) {
	var d FactsDecoder
	base := readFacts(t, "dgx-h100").Briefed(launchHello)
	for i := range 3 * internMax {
		f := base
		h := *f.Health
		h.Checks = []Check{{Name: "tmpdir", Status: CheckOK, Detail: fmt.Sprintf("TMPDIR /tmp has %d GiB free", i)}}
		f.Health = &h
		m := Msg{Kind: KindFacts, Payload: mustJSON(t, f)}
		var got Facts
		if err := d.Decode(m, &got); err != nil || !reflect.DeepEqual(got, plainFacts(t, m)) {
			t.Fatalf("host %d: %+v, %v", i, got.Health, err)
		}
	}
	if len(d.health) != internMax || len(d.hcas) != 1 {
		t.Errorf("kept %d healths and %d port lists; want %d and 1", len(d.health), len(d.hcas), internMax)
	}
}

// TestFactsDecoderConcurrent: the engine decodes hosts' facts from many
// goroutines at once (go test -race checks the locking).
func TestFactsDecoderConcurrent(t *testing.T) {
	var d FactsDecoder
	ms := dgxHosts(t, 64)
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			var f Facts
			if err := d.Decode(m, &f); err != nil {
				t.Error(err)
			} else if want := plainFacts(t, m); !reflect.DeepEqual(f, want) {
				t.Errorf("%s decoded differently", want.Name)
			}
		})
	}
	wg.Wait()
}

// BenchmarkDecodeFactsShared is BenchmarkDecodeFacts through a
// FactsDecoder, as the launcher decodes a job's hosts: many of the same
// shape, each with its own name, port and address.
func BenchmarkDecodeFactsShared(b *testing.B) {
	eachShape(b, 1024, func(b *testing.B, ms []Msg, decode func(*FactsDecoder, Msg, *Facts) error) {
		var d FactsDecoder
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			m := ms[i%len(ms)]
			i++
			var f Facts
			if err := decode(&d, m, &f); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFactsHeld reports the heap a launch holds per host for its
// hosts' decoded facts (until the attempt is planned): 4,096 hosts of
// each fixture's shape, decoded whole each or through a FactsDecoder.
func BenchmarkFactsHeld(b *testing.B) {
	eachShape(b, 4096, func(b *testing.B, ms []Msg, decode func(*FactsDecoder, Msg, *Facts) error) {
		var held int64
		for b.Loop() {
			var d FactsDecoder
			out := make([]Facts, len(ms))
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i, m := range ms {
				if err := decode(&d, m, &out[i]); err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			held = (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(len(ms))
			runtime.KeepAlive(out)
		}
		b.ReportMetric(float64(held), "B-held/host")
	})
}

// eachShape runs bench for n hosts like each fixture, their facts decoded
// whole each ("plain", Msg.Decode) and through a FactsDecoder ("shared").
func eachShape(b *testing.B, n int, bench func(b *testing.B, ms []Msg, decode func(*FactsDecoder, Msg, *Facts) error)) {
	hows := []struct {
		name   string
		decode func(*FactsDecoder, Msg, *Facts) error
	}{
		{"plain", func(_ *FactsDecoder, m Msg, f *Facts) error { return m.Decode(f) }},
		{"shared", func(d *FactsDecoder, m Msg, f *Facts) error { return d.Decode(m, f) }},
	}
	for _, name := range []string{"loopback-agent", "dgx-h100"} {
		ms := hostsLike(b, name, n)
		for _, how := range hows {
			b.Run(name+"-brief/"+how.name, func(b *testing.B) { bench(b, ms, how.decode) })
		}
	}
}

// FuzzFactsDecoder: on any bytes Decode does not panic, and on any JSON
// whose objects repeat no key it gives what Msg.Decode gives, or fails
// where it fails, also from parts it decoded before (one decoder for the
// whole run, each input decoded twice). Repeated keys are left out:
// JSON leaves their meaning open (RFC 8259: names SHOULD be unique), and
// Go merges a repeated object into the first where Decode takes the
// last whole.
func FuzzFactsDecoder(f *testing.F) {
	f.Add(mustJSON(f, readFacts(f, "dgx-h100")))
	f.Add(mustJSON(f, readFacts(f, "dgx-h100").Briefed(launchHello)))
	f.Add(mustJSON(f, readFacts(f, "loopback-agent")))
	f.Add([]byte(`{"hcas":null,"gpus":[],"health":{"gpus":-1,"checks":null},"gpu_topo":{}}`))
	f.Add([]byte(`{"HCAS":[{"name":"mlx5_0"}],"Health":{"gpus":1}}`))
	f.Add([]byte(`{"gpus":[{"index":"0"}]}`))
	f.Add([]byte(`[]`))
	var d FactsDecoder
	f.Fuzz(func(t *testing.T, in []byte) {
		m := Msg{Kind: KindFacts, Payload: in}
		var want Facts
		werr := m.Decode(&want)
		for range 2 {
			var got Facts
			err := d.Decode(m, &got)
			if !json.Valid(in) || repeatsKey(in) {
				continue
			}
			if (err == nil) != (werr == nil) {
				t.Fatalf("Decode: %v; Msg.Decode: %v", err, werr)
			}
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("Decode: %+v\nMsg.Decode: %+v", got, want)
			}
		}
	})
}

// repeatsKey reports whether an object in the JSON in repeats a key, as
// encoding/json matches keys to fields (without regard to case).
func repeatsKey(in []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(in))
	type frame struct {
		obj  bool
		keys []string
		key  bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if k, ok := tok.(string); ok && top != nil && top.obj && top.key {
			for _, seen := range top.keys {
				if strings.EqualFold(seen, k) {
					return true
				}
			}
			top.keys = append(top.keys, k)
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the object around it (if any) takes a key next.
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].key = true
		}
	}
}
