package launcher

import (
	"slices"
	"strconv"
	"testing"

	"gangway/launcher/cli"
	"gangway/launcher/transport"
)

func TestRoutePeers(t *testing.T) {
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "h" + strconv.Itoa(i)
		}
		return out
	}
	small := names(17)
	if got := routePeers(small, 3); len(got) != 16 || slices.Contains(got, "h3") {
		t.Fatalf("17 hosts: want every other host, got %v", got)
	}
	big := names(1024)
	for _, i := range []int{0, 1, 500, 1023} {
		got := routePeers(big, i)
		if len(got) != maxRoutePeers {
			t.Fatalf("host %d: %d peers, want %d", i, len(got), maxRoutePeers)
		}
		for _, want := range []string{"h0", big[(i+1)%1024], big[(i+1023)%1024]} {
			if want != big[i] && !slices.Contains(got, want) {
				t.Errorf("host %d: %v lacks %s", i, got, want)
			}
		}
		if slices.Contains(got, big[i]) {
			t.Errorf("host %d routes to itself", i)
		}
		seen := map[string]bool{}
		for _, p := range got {
			if seen[p] {
				t.Errorf("host %d: %s twice", i, p)
			}
			seen[p] = true
		}
		if !slices.Equal(got, routePeers(big, i)) {
			t.Errorf("host %d: not deterministic", i)
		}
	}
}

// TestRemoteHosts: the transport (the srun step) is built for the hosts
// dial will reach: those the plan uses, and every host with per-socket
// placement (planned only from the hosts' facts), where a plan of the
// slots alone would have put all ranks on the first node.
func TestRemoteHosts(t *testing.T) {
	cfg := parse(t, "-np", "2", "-H", "cn1:2,cn2:2", "prog")
	cfg.Place.Source, cfg.Transport.Kind = cli.HostsSlurm, transport.Slurm
	for _, tc := range []struct {
		name      string
		perSocket int
		want      []string
	}{{"by slot", 0, []string{"cn1"}}, {"per socket", 1, []string{"cn1", "cn2"}}} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.Place.PerSocket = tc.perSocket
			var got []string
			for _, h := range remoteHosts(c) {
				got = append(got, h.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("transport's hosts %v, want %v", got, tc.want)
			}
		})
	}
}
