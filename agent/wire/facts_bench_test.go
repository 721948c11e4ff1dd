package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// BenchmarkDecodeFacts is the launcher's decoding of one host's facts,
// as the engine does for every host of a launch: a loopback agent of
// the scale bench (no GPUs, four interfaces) and a DGX H100 (eight GPUs
// and their topology, ten InfiniBand and Ethernet ports, thirteen
// interfaces, the default health checks), whole and brief. The scale
// rows measure the first; the model for real nodes adds the difference.
func BenchmarkDecodeFacts(b *testing.B) {
	for _, name := range []string{"loopback-agent", "dgx-h100", "dgx-h100-brief"} {
		raw, err := os.ReadFile("testdata/facts-" + strings.TrimSuffix(name, "-brief") + ".json")
		if err != nil {
			b.Fatal(err)
		}
		if strings.HasSuffix(name, "-brief") {
			// As a host asked for brief facts sends them
			// (NetRequest.Brief): no interfaces.
			var f Facts
			if err := json.Unmarshal(raw, &f); err != nil {
				b.Fatal(err)
			}
			f.NICs = nil
			raw, _ = json.Marshal(f)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil {
			b.Fatal(err)
		}
		m := Msg{Kind: KindFacts, Payload: compact.Bytes()}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(compact.Len()))
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

// TestFactsFixtures: the benchmark's facts decode, and the DGX's are a
// DGX's (a benchmark of the wrong shape would say nothing).
func TestFactsFixtures(t *testing.T) {
	raw, err := os.ReadFile("testdata/facts-dgx-h100.json")
	if err != nil {
		t.Fatal(err)
	}
	var f Facts
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.GPUs) != 8 || f.GPUTopo == nil || len(f.HCAs) < 8 || len(f.NICs) < 10 || f.Health == nil || f.Net == nil {
		t.Errorf("DGX facts: %d GPUs, topology %v, %d HCAs, %d NICs, health %v, net %v", len(f.GPUs), f.GPUTopo != nil, len(f.HCAs), len(f.NICs), f.Health != nil, f.Net != nil)
	}
	raw, err = os.ReadFile("testdata/facts-loopback-agent.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
}
