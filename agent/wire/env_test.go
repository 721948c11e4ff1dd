package wire

import "testing"

func TestValidEnvName(t *testing.T) {
	for _, ok := range []string{"A", "_", "PATH", "NCCL_IB_HCA", "x1", "_9"} {
		if !ValidEnvName(ok) {
			t.Errorf("%q rejected", ok)
		}
	}
	for _, bad := range []string{"", "1A", "A-B", "A=B", "A B", "É"} {
		if ValidEnvName(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}
