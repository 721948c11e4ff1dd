package nccl

import (
	"reflect"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	two := Choice{Host: "a", Ifaces: []string{"enp1s0f0", "eth2"}, Addr: "198.18.0.1", HCAs: []string{"mlx5_0:1", "mlx5_1:1"}}
	for _, tc := range []struct {
		name string
		c    Choice
		want []string
	}{
		{"one NIC, no HCA", Choice{Host: "a", Ifaces: []string{"enp1s0f0"}, Addr: "198.18.0.1"}, []string{
			"GLOO_SOCKET_IFNAME=enp1s0f0",
			"HOROVOD_GLOO_IFACE=enp1s0f0",
			"NCCL_SOCKET_IFNAME==enp1s0f0",
		}},
		{"two NICs and HCAs", two, []string{
			"GLOO_SOCKET_IFNAME=enp1s0f0,eth2",
			"HOROVOD_GLOO_IFACE=enp1s0f0",
			"NCCL_IB_HCA==mlx5_0:1,mlx5_1:1",
			"NCCL_SOCKET_IFNAME==enp1s0f0,eth2",
		}},
		{"no choice", Choice{Host: "a"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Env(tc.c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestEnvListsSelectOnlyTheChoice parses Env's values with parseList: the
// exact forms select the chosen names and not their longer relatives.
func TestEnvListsSelectOnlyTheChoice(t *testing.T) {
	c := Choice{Ifaces: []string{"enp1s0f0"}, HCAs: []string{"mlx5_1:1"}}
	env := map[string]string{}
	for _, kv := range Env(c) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	ifs, err := parseList(env["NCCL_SOCKET_IFNAME"])
	if err != nil || !ifs.Match("enp1s0f0", -1) || ifs.Match("enp1s0f0v1", -1) {
		t.Errorf("NCCL_SOCKET_IFNAME %q: %v", env["NCCL_SOCKET_IFNAME"], err)
	}
	hca, err := parseList(env["NCCL_IB_HCA"])
	if err != nil || !hca.Match("mlx5_1", 1) || hca.Match("mlx5_10", 1) || hca.Match("mlx5_1", 2) {
		t.Errorf("NCCL_IB_HCA %q: %v", env["NCCL_IB_HCA"], err)
	}
}

func TestCUDAVisibleDevices(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{{nil, ""}, {[]int{3}, "3"}, {[]int{0, 3, 2, 1}, "0,3,2,1"}, {[]int{10, 12}, "10,12"}} {
		if got := CUDAVisibleDevices(tc.in); got != tc.want {
			t.Errorf("CUDAVisibleDevices(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
