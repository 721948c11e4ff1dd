package wire

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// readFacts decodes the facts fixture testdata/facts-NAME.json.
func readFacts(tb testing.TB, name string) Facts {
	tb.Helper()
	raw, err := os.ReadFile("testdata/facts-" + name + ".json")
	if err != nil {
		tb.Fatal(err)
	}
	var f Facts
	if err := json.Unmarshal(raw, &f); err != nil {
		tb.Fatal(err)
	}
	return f
}

// launchHello asks for facts as a launch of several hosts does: the
// interfaces left out (the host chooses) and the GPUs brief.
var launchHello = Hello{Net: &NetRequest{Brief: true}, Brief: true}

// BenchmarkDecodeFacts is the launcher's decoding of one host's facts,
// as the engine does for every host of a launch: a loopback agent of
// the scale bench (no GPUs, four interfaces) and a DGX H100 (eight GPUs
// and their topology, ten InfiniBand and Ethernet ports, thirteen
// interfaces, the default health checks), whole and brief. The scale
// rows measure the first; the model for real nodes adds the difference.
func BenchmarkDecodeFacts(b *testing.B) {
	for _, name := range []string{"loopback-agent", "loopback-agent-brief", "dgx-h100", "dgx-h100-brief"} {
		f := readFacts(b, strings.TrimSuffix(name, "-brief"))
		if strings.HasSuffix(name, "-brief") {
			f = f.Briefed(launchHello)
		}
		m := Msg{Kind: KindFacts, Payload: mustJSON(b, f)}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(m.Payload)))
			b.ReportAllocs()
			for b.Loop() {
				var f Facts
				if err := m.Decode(&f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFactsFixtures: the benchmark's facts are of the shapes it names
// (a benchmark of the wrong shape would say nothing).
func TestFactsFixtures(t *testing.T) {
	f := readFacts(t, "dgx-h100")
	if len(f.GPUs) != 8 || f.GPUTopo == nil || len(f.HCAs) < 8 || len(f.NICs) < 10 || f.Health == nil || f.Net == nil {
		t.Errorf("DGX facts: %d GPUs, topology %v, %d HCAs, %d NICs, health %v, net %v", len(f.GPUs), f.GPUTopo != nil, len(f.HCAs), len(f.NICs), f.Health != nil, f.Net != nil)
	}
	if f := readFacts(t, "loopback-agent"); len(f.GPUs) != 0 || len(f.NICs) != 4 || f.Health == nil {
		t.Errorf("loopback agent's facts: %d GPUs, %d NICs, health %v; want none, four and the checks", len(f.GPUs), len(f.NICs), f.Health != nil)
	}
}

// TestBriefed: a launch's brief facts keep what the launcher reads (the
// GPUs' indices and NUMA nodes, the topology's links, everything else
// but the interfaces when asked), and leave the facts given unchanged.
func TestBriefed(t *testing.T) {
	f := readFacts(t, "dgx-h100")
	whole := mustJSON(t, f)

	if got, _ := json.Marshal(f.Briefed(Hello{})); string(got) != string(whole) {
		t.Error("not asked to be brief, the facts changed")
	}
	nets := f.Briefed(Hello{Net: &NetRequest{Brief: true}})
	if len(nets.NICs) != 0 || len(nets.GPUs) != 8 || nets.GPUs[3].UUID == "" || nets.Net == nil || len(nets.Net.Addrs) == 0 {
		t.Errorf("Net.Brief: %d interfaces, GPU 3 %+v, net %+v", len(nets.NICs), nets.GPUs[3], nets.Net)
	}
	b := f.Briefed(Hello{Brief: true})
	if len(b.NICs) != len(f.NICs) || len(b.HCAs) != len(f.HCAs) || b.Health == nil || b.CPUs != f.CPUs {
		t.Errorf("Brief dropped more than the GPUs' details: %d interfaces, %d HCAs, health %v", len(b.NICs), len(b.HCAs), b.Health != nil)
	}
	for i, g := range b.GPUs {
		if g != (GPU{Index: f.GPUs[i].Index, NUMANode: f.GPUs[i].NUMANode}) {
			t.Errorf("GPU %d: %+v", i, g)
		}
	}
	if b.GPUTopo == nil || len(b.GPUTopo.Link) != 8 || b.GPUTopo.CPUs != nil || b.GPUTopo.NUMA != nil {
		t.Errorf("topology %+v, want its links alone", b.GPUTopo)
	}
	if again, _ := json.Marshal(f); string(again) != string(whole) || f.GPUs[0].UUID == "" {
		t.Error("Briefed changed the facts it was given")
	}
	t.Logf("DGX facts %d bytes, brief %d", len(whole), len(mustJSON(t, f.Briefed(launchHello))))
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
