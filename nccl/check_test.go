package nccl

import (
	"fmt"
	"strings"
	"testing"
)

func checkHosts() []HostNet {
	return []HostNet{
		{Host: "a", NICs: []NIC{lo, enp1A, down(ib0)}, HCAs: []HCA{
			{Name: "mlx5_0", Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand"},
			{Name: "mlx5_1", Port: 1, State: "DOWN", LinkLayer: "InfiniBand"}}},
		{Host: "b", NICs: []NIC{lo, eth2B}},
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // Problem.Error() of each problem, in order
	}{
		{name: "clean", env: map[string]string{
			"PATH": "/bin", "NCCL_SOCKET_IFNAME": "^docker,lo", "NCCL_IB_HCA": "=mlx5_0:1",
			"NCCL_IB_GID_INDEX": "0x3", "NCCL_P2P_LEVEL": "NVL", "NCCL_NET_GDR_LEVEL": "3",
			"NCCL_DEBUG": "info", "NCCL_SOCKET_FAMILY": "AF_INET6", "NCCL_IB_ADDR_RANGE": "10.0.0.0/16",
			"NCCL_IB_DISABLE": "0", "NCCL_BUFFSIZE": "4194304"}},
		{name: "interface missing on one host", env: map[string]string{"NCCL_SOCKET_IFNAME": "=enp1s0f0"}, want: []string{
			`host b: NCCL_SOCKET_IFNAME="=enp1s0f0": selects no up interface with an address (up: lo, eth2)`}},
		{name: "down interface", env: map[string]string{"NCCL_SOCKET_IFNAME": "ib"}, want: []string{
			`host a: NCCL_SOCKET_IFNAME="ib": selects no up interface with an address (up: lo, enp1s0f0)`,
			`host b: NCCL_SOCKET_IFNAME="ib": selects no up interface with an address (up: lo, eth2)`}},
		{name: "one character", env: map[string]string{"NCCL_SOCKET_IFNAME": "e"}, want: []string{
			`NCCL_SOCKET_IFNAME="e": ignored by NCCL: the value must be longer than one character`}},
		{name: "=^", env: map[string]string{"NCCL_SOCKET_IFNAME": "=^docker"}, want: []string{
			`NCCL_SOCKET_IFNAME="=^docker": "=^" makes "^" part of the name; write "^=" to exclude exact names`,
			`host a: NCCL_SOCKET_IFNAME="=^docker": selects no up interface with an address (up: lo, enp1s0f0)`,
			`host b: NCCL_SOCKET_IFNAME="=^docker": selects no up interface with an address (up: lo, eth2)`}},
		{name: "list syntax", env: map[string]string{"NCCL_IB_HCA": "mlx5_0:x"}, want: []string{
			`NCCL_IB_HCA="mlx5_0:x": bad NCCL list "mlx5_0:x": "mlx5_0:x": bad port "x"`}},
		{name: "HCA port down", env: map[string]string{"NCCL_IB_HCA": "mlx5_1"}, want: []string{
			`host a: NCCL_IB_HCA="mlx5_1": selects no ACTIVE HCA port (active: mlx5_0:1)`}},
		{name: "levels", env: map[string]string{"NCCL_P2P_LEVEL": "nvl", "NCCL_NET_GDR_LEVEL": "FOO"}, want: []string{
			`NCCL_NET_GDR_LEVEL="FOO": unknown level; want one of LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS or 0-5`,
			`NCCL_P2P_LEVEL="nvl": level names are case-sensitive: write NVL`}},
		{name: "old integer levels", env: map[string]string{"NCCL_P2P_LEVEL": "9", "NCCL_NET_GDR_LEVEL": "2x"}, want: []string{
			`NCCL_NET_GDR_LEVEL="2x": not a level name or integer`,
			`NCCL_P2P_LEVEL="9": old integer level above 5: NCCL treats it as SYS`}},
		{name: "integers", env: map[string]string{"NCCL_IB_GID_INDEX": "three", "NCCL_IB_TIMEOUT": "1_0", "NCCL_IB_DISABLE": "-1"}, want: []string{
			`NCCL_IB_GID_INDEX="three": not an integer: NCCL ignores it and uses the default`,
			`NCCL_IB_TIMEOUT="1_0": not an integer: NCCL ignores it and uses the default`}},
		{name: "debug, family, range", env: map[string]string{"NCCL_DEBUG": "VERBOSE", "NCCL_SOCKET_FAMILY": "AF_INET4", "NCCL_IB_ADDR_RANGE": "10.0.0.0/33"}, want: []string{
			`NCCL_DEBUG="VERBOSE": unknown level; want one of VERSION, WARN, INFO, ABORT, TRACE`,
			`NCCL_IB_ADDR_RANGE="10.0.0.0/33": not a CIDR such as 10.0.0.0/16: netip.ParsePrefix("10.0.0.0/33"): prefix length out of range`,
			`NCCL_SOCKET_FAMILY="AF_INET4": want AF_INET or AF_INET6`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probs := Check(tc.env, checkHosts())
			var got []string
			for _, p := range probs {
				got = append(got, p.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestProblemFields(t *testing.T) {
	probs := Check(map[string]string{"NCCL_SOCKET_IFNAME": "=eth2"}, checkHosts())
	want := Problem{Var: "NCCL_SOCKET_IFNAME", Value: "=eth2", Host: "a",
		Msg: "selects no up interface with an address (up: lo, enp1s0f0)"}
	if len(probs) != 1 || probs[0] != want {
		t.Errorf("got %+v, want %+v", probs, want)
	}
	var err error = probs[0]
	if s := fmt.Sprint(err); !strings.HasPrefix(s, "host a: ") {
		t.Errorf("as error: %s", s)
	}
}
