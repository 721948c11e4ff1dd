package nccl

import (
	"slices"
	"strconv"
	"strings"
)

// Env returns the variables that pin a host's ranks to its Choice, as
// sorted KEY=VALUE strings (a user's -x for any of them wins; the
// launcher's rank environment decides that):
//
//   - NCCL_SOCKET_IFNAME in exact form, "=enp1s0f0[,eth2]", so that
//     enp1s0f0 does not also select enp1s0f0v1;
//   - GLOO_SOCKET_IFNAME (torch.distributed Gloo), the plain names;
//   - HOROVOD_GLOO_IFACE, the first name (Horovod takes one);
//   - NCCL_IB_HCA in exact form, "=mlx5_0:1,mlx5_1:1", the ACTIVE ports,
//     and only when there are any (mlx5_1 alone would also select mlx5_10).
func Env(c Choice) []string {
	var env []string
	add := func(k, v string) { env = append(env, k+"="+v) }
	if len(c.Ifaces) > 0 {
		add("NCCL_SOCKET_IFNAME", "="+strings.Join(c.Ifaces, ","))
		add("GLOO_SOCKET_IFNAME", strings.Join(c.Ifaces, ","))
		add("HOROVOD_GLOO_IFACE", c.Ifaces[0])
	}
	if len(c.HCAs) > 0 {
		add("NCCL_IB_HCA", "="+strings.Join(c.HCAs, ","))
	}
	slices.Sort(env)
	return env
}

// CUDAVisibleDevices formats GPU indices for CUDA_VISIBLE_DEVICES, in the
// given order ("0,3,2,1"). The indices are nvidia-smi's (PCI bus order):
// set CUDA_DEVICE_ORDER=PCI_BUS_ID with it so CUDA counts the same way.
func CUDAVisibleDevices(gpus []int) string {
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = strconv.Itoa(g)
	}
	return strings.Join(s, ",")
}
