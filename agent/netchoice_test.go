package agent

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// helloFacts says hello to a fresh session and returns its facts.
func helloFacts(t *testing.T, hello wire.Hello) wire.Facts {
	t.Helper()
	c := serve(t, &Agent{Name: "n", Log: zaptest.NewLogger(t)})
	c.send(wire.KindHello, hello)
	var f wire.Facts
	c.recv(wire.KindFacts, &f)
	return f
}

// TestHelloNetChoice: asked to (Hello.Net), an agent chooses its own data
// interface from its routes to the peers it was told of, and answers
// with the choice instead of the routes; --network-interface's names are
// checked there; without Net it reports the routes, as before. Asked to
// be brief, it leaves its interfaces out of the facts.
func TestHelloNetChoice(t *testing.T) {
	t.Parallel()
	peers := []string{"127.0.0.2", "127.0.0.3"}
	base := wire.Hello{Version: wire.Version, JobID: "netchoice", Host: "n", Peers: peers}

	f := helloFacts(t, base)
	if f.Net != nil || len(f.Routes) != len(peers) {
		t.Errorf("without Net: net %+v, %d routes, want none and %d", f.Net, len(f.Routes), len(peers))
	}

	asked := base
	asked.Net = &wire.NetRequest{}
	f = helloFacts(t, asked)
	if len(f.Routes) != 0 || f.Net == nil {
		t.Fatalf("with Net: net %+v, routes %+v; want a choice and no routes", f.Net, f.Routes)
	}
	// Loopback peers are reached through lo alone, so lo it is.
	if !slices.Equal(f.Net.Ifaces, []string{"lo"}) || f.Net.Addr != "127.0.0.1" || f.Net.Err != "" || f.Net.Forced {
		t.Errorf("with Net: %+v, want lo at 127.0.0.1", f.Net)
	}
	// The choice carries lo's addresses; the facts still carry every
	// interface unless asked to be brief.
	if !slices.Contains(f.Net.Addrs, "127.0.0.1/8") || len(f.NICs) == 0 {
		t.Errorf("with Net: addrs %q, %d interfaces; want lo's addresses and every interface", f.Net.Addrs, len(f.NICs))
	}
	brief := base
	brief.Net = &wire.NetRequest{Brief: true}
	if b := helloFacts(t, brief); b.Net == nil || len(b.NICs) != 0 || !slices.Equal(b.Net.Addrs, f.Net.Addrs) || !slices.Equal(b.Net.Ifaces, f.Net.Ifaces) {
		t.Errorf("brief: net %+v, %d interfaces; want the same choice, with its addresses, and no interfaces", b.Net, len(b.NICs))
	}

	forced := base
	forced.Net = &wire.NetRequest{Force: []string{"gwnosuch0"}}
	f = helloFacts(t, forced)
	if f.Net == nil || !strings.Contains(f.Net.Err, "host n: --network-interface gwnosuch0: no usable network interface: no such interface") {
		t.Errorf("forced to a missing interface: %+v", f.Net)
	}
	forced.Net = &wire.NetRequest{Force: []string{"lo"}}
	if f = helloFacts(t, forced); f.Net == nil || !f.Net.Forced || !slices.Equal(f.Net.Ifaces, []string{"lo"}) {
		t.Errorf("forced to lo: %+v", f.Net)
	}
}

// TestHelloBrief: asked for brief facts (Hello.Brief), an agent on a
// DGX A100 (nvidia-smi's answers from the facts fixtures) sends its
// GPUs' indices and NUMA nodes and its topology's links alone; not
// asked, everything nvidia-smi said.
func TestHelloBrief(t *testing.T) {
	t.Parallel()
	query, err := os.ReadFile("facts/testdata/smi-query-dgx-a100.csv")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := os.ReadFile("facts/testdata/topo-dgx-a100.txt")
	if err != nil {
		t.Fatal(err)
	}
	facts := func(hello wire.Hello) wire.Facts {
		a := &Agent{Name: "n", Log: zaptest.NewLogger(t)}
		a.Facts.NvidiaSMI = func(_ context.Context, args ...string) ([]byte, error) {
			if slices.Contains(args, "topo") {
				return topo, nil
			}
			return query, nil
		}
		c := serve(t, a)
		c.send(wire.KindHello, hello)
		var f wire.Facts
		c.recv(wire.KindFacts, &f)
		return f
	}
	hello := wire.Hello{Version: wire.Version, JobID: "brief", Host: "n"}
	whole := facts(hello)
	if len(whole.GPUs) != 8 || whole.GPUs[0].UUID == "" || whole.GPUTopo == nil || len(whole.GPUTopo.CPUs) != 8 {
		t.Fatalf("not brief: %d GPUs, GPU 0 %+v, topology %+v", len(whole.GPUs), whole.GPUs[0], whole.GPUTopo)
	}
	hello.Brief = true
	brief := facts(hello)
	if len(brief.GPUs) != 8 || brief.GPUTopo == nil || len(brief.GPUTopo.Link) != 8 || brief.GPUTopo.CPUs != nil {
		t.Fatalf("brief: %d GPUs, topology %+v", len(brief.GPUs), brief.GPUTopo)
	}
	for i, g := range brief.GPUs {
		if g != (wire.GPU{Index: whole.GPUs[i].Index, NUMANode: whole.GPUs[i].NUMANode}) {
			t.Errorf("brief GPU %d: %+v", i, g)
		}
	}
}
