package transport

import (
	"strconv"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
)

// BenchmarkLinkFencesCheck is the launcher's transport's check of one
// PMI barrier's Fences across 10,000 hosts through a tree of width 32:
// each of the 32 first-level relays' Fences decoded for its hosts, every
// host checked to be behind that relay, the frame passed to the engine
// (and taken from its queue here); the hosts as a JSON list and as
// spans (Hello.FenceSpans).
func BenchmarkLinkFencesCheck(b *testing.B) {
	const hosts, width = 10000, 32
	tr := &Tree{index: map[nodeKey]int{}, width: width, log: zap.NewNop(), nodes: make([]*node, hosts), top: make([]atomic.Pointer[link], hosts), roots: map[int]*link{}}
	links := make([]*link, hosts)
	subtrees := make([][]int, width)
	for i := range hosts {
		h := hostfile.Host{Name: "h" + strconv.Itoa(i)}
		tr.hosts = append(tr.hosts, h)
		tr.index[treeKey(h)] = i
		tr.nodes[i] = &node{t: tr, i: i, h: h, up: make(chan struct{})}
		var parent *link
		top := i
		if p := TreeParent(i, width); p >= 0 {
			parent = links[p]
			for TreeParent(top, width) >= 0 {
				top = TreeParent(top, width)
			}
		}
		links[i] = newLink(tr.nodes[i], parent)
		tr.nodes[i].setUp(links[i])
		subtrees[top] = append(subtrees[top], i)
	}
	for _, spans := range []bool{false, true} {
		b.Run(map[bool]string{false: "hosts", true: "spans"}[spans], func(b *testing.B) {
			var msgs []wire.Msg
			for r := range width {
				f := wire.Fences{Seq: 1, Hosts: subtrees[r]}
				if spans {
					f.Compact()
				}
				e, err := wire.Encode(wire.KindFences, f)
				if err != nil {
					b.Fatal(err)
				}
				msgs = append(msgs, wire.Msg{Kind: wire.KindFences, Payload: e.Payload()})
			}
			b.ReportAllocs()
			for b.Loop() {
				for r, m := range msgs {
					if err := links[r].deliver(m); err != nil {
						b.Fatal(err)
					}
					if _, ok, err := links[r].in.poll(); !ok || err != nil {
						b.Fatalf("relay %d's fences not passed on: %v %v", r, ok, err)
					}
				}
			}
		})
	}
}
