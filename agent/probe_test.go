package agent

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// TestProbeManyTargets: a probe with far more targets than dials in
// flight answers every target, in order.
func TestProbeManyTargets(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	var p wire.Probe
	p.Timeout = 5 * time.Second
	for i := range 10 * maxProbeDials {
		if i%3 == 0 {
			p.Targets = append(p.Targets, closed.Addr().String())
		} else {
			p.Targets = append(p.Targets, l.Addr().String())
		}
	}
	res := probe(t.Context(), p)
	if len(res.Results) != len(p.Targets) {
		t.Fatalf("%d results for %d targets", len(res.Results), len(p.Targets))
	}
	for i, r := range res.Results {
		refused := strings.Contains(r.Err, "connection refused")
		if r.Target != p.Targets[i] || refused != (i%3 == 0) || !refused && r.Err != "" {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if got := probe(t.Context(), wire.Probe{}); len(got.Results) != 0 {
		t.Errorf("no targets: %+v", got)
	}
}
