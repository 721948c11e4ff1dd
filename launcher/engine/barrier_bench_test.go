package engine

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/launcher/plan"
	"github.com/gangway-hpc/gangway/launcher/transport"
)

// BenchmarkBarrierFences is the launcher's engine's work for one PMI
// barrier across 10,000 hosts of one rank each through a tree of width
// 32: 32 first-level relays' Fences, each naming its subtree's hosts
// (about 312: the relay, its 32 children and their share of the third
// level), decoded from their JSON as the engine decodes them, turned from
// the tree's indices into the job's and merged, to the release; the hosts as a JSON list (Fences.Hosts, a relay not
// told Hello.FenceSpans) and as spans. The barrier model for 10,000 real
// nodes (BENCHMARKS.md) takes the launcher's share from it.
func BenchmarkBarrierFences(b *testing.B) {
	const hosts, width = 10000, 32
	names := make([]string, hosts)
	ranks := make([]plan.Rank, hosts)
	for i := range hosts {
		names[i] = "h" + strconv.Itoa(i)
		ranks[i] = rk(i, i, 0, 1, i)
	}
	// Each first-level relay's subtree, numbered in launch order as the
	// tree numbers it.
	subtrees := make([][]int, width)
	for i := range hosts {
		top := i
		for transport.TreeParent(top, width) >= 0 {
			top = transport.TreeParent(top, width)
		}
		subtrees[top] = append(subtrees[top], i)
	}
	for _, spans := range []bool{false, true} {
		b.Run(map[bool]string{false: "hosts", true: "spans"}[spans], func(b *testing.B) {
			st := newState(names, ranks, testOptions)
			j := &job{log: zap.NewNop(), events: make(chan any, 8), quit: make(chan struct{})}
			for i := range hosts {
				j.setTreeIndex(i, i)
			}
			s := &session{idx: 0}
			var msgs []wire.Msg
			named := 0
			for r := range width {
				f := wire.Fences{Seq: 1, Hosts: slices.Clone(subtrees[r])}
				named += len(f.Hosts)
				if spans {
					f.Compact()
				}
				p, err := json.Marshal(f)
				if err != nil {
					b.Fatal(err)
				}
				msgs = append(msgs, wire.Msg{Kind: wire.KindFences, Payload: p})
			}
			if named != hosts {
				b.Fatalf("the subtrees name %d hosts, want %d", named, hosts)
			}
			b.ReportAllocs()
			for b.Loop() {
				var acts []action
				for r, m := range msgs {
					var ev evFences
					ev.host = r
					if err := m.Decode(&ev.f); err != nil {
						b.Fatal(err)
					}
					ev.f.Seq = st.barrier.seq // the messages were encoded for barrier 1
					if !j.jobHosts(s, ev.f.Hosts, "a fence") {
						b.Fatal("hosts not of the job")
					}
					spans, ok := j.jobSpans(s, ev.f.Spans)
					if !ok {
						b.Fatal("spans not of the job")
					}
					ev.f.Spans = spans
					acts = st.apply(ev)
				}
				if len(acts) != 1 {
					b.Fatalf("the last relay's fences gave %v, want the release", acts)
				}
			}
		})
	}
}
