package cli

import (
	"reflect"
	"testing"

	"github.com/gangway-hpc/gangway/hostfile"
)

// TestMergeHosts: a repeat (same name, user and port) adds its slots to
// the first occurrence, in a or later in b; caps add unless one
// occurrence has none; order is of first appearance.
func TestMergeHosts(t *testing.T) {
	h := func(name, user string, port, slots, max int) hostfile.Host {
		return hostfile.Host{Name: name, User: user, Port: port, Slots: slots, MaxSlots: max}
	}
	for _, c := range []struct {
		name string
		a, b []hostfile.Host
		want []hostfile.Host
	}{
		{"empty", nil, nil, nil},
		{"into nothing", nil, []hostfile.Host{h("a", "", 0, 2, 0), h("b", "", 0, 1, 0)}, []hostfile.Host{h("a", "", 0, 2, 0), h("b", "", 0, 1, 0)}},
		{"repeat across", []hostfile.Host{h("a", "", 0, 2, 0)}, []hostfile.Host{h("b", "", 0, 1, 0), h("a", "", 0, 3, 0)}, []hostfile.Host{h("a", "", 0, 5, 0), h("b", "", 0, 1, 0)}},
		{"repeat within b", nil, []hostfile.Host{h("a", "", 0, 1, 0), h("b", "", 0, 1, 0), h("a", "", 0, 1, 0)}, []hostfile.Host{h("a", "", 0, 2, 0), h("b", "", 0, 1, 0)}},
		{"user and port tell apart", []hostfile.Host{h("a", "", 0, 1, 0)}, []hostfile.Host{h("a", "u", 0, 1, 0), h("a", "", 2222, 1, 0)}, []hostfile.Host{h("a", "", 0, 1, 0), h("a", "u", 0, 1, 0), h("a", "", 2222, 1, 0)}},
		{"caps add", []hostfile.Host{h("a", "", 0, 1, 2)}, []hostfile.Host{h("a", "", 0, 1, 3)}, []hostfile.Host{h("a", "", 0, 2, 5)}},
		{"one uncapped lifts", []hostfile.Host{h("a", "", 0, 1, 2)}, []hostfile.Host{h("a", "", 0, 1, 0)}, []hostfile.Host{h("a", "", 0, 2, 0)}},
		{"caps capped", []hostfile.Host{h("a", "", 0, 1, hostfile.MaxSlotCount)}, []hostfile.Host{h("a", "", 0, 1, 5)}, []hostfile.Host{h("a", "", 0, 2, hostfile.MaxSlotCount)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := mergeHosts(c.a, c.b); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}
