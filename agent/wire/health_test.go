package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestHealthValidate(t *testing.T) {
	ok := Check{Name: CheckGPUECC, Status: CheckOK}
	for _, tc := range []struct {
		name string
		h    *Health
		want string // "" valid
	}{
		{"nil", nil, ""},
		{"empty", &Health{GPUs: -1}, ""},
		{"checks", &Health{GPUs: 8, Checks: []Check{ok, {Name: CheckSite, Status: CheckFail, Output: "disk\n"}, {Name: "future-check2", Status: CheckNotChecked}}}, ""},
		{"gpus below -1", &Health{GPUs: -2}, "-2 GPUs"},
		{"too many gpus", &Health{GPUs: MaxHealthGPUs + 1}, "GPUs"},
		{"upper-case name", &Health{Checks: []Check{{Name: "GPU", Status: CheckOK}}}, `bad check name "GPU"`},
		{"empty name", &Health{Checks: []Check{{Status: CheckOK}}}, "bad check name"},
		{"double dash", &Health{Checks: []Check{{Name: "a--b", Status: CheckOK}}}, "bad check name"},
		{"trailing dash", &Health{Checks: []Check{{Name: "a-", Status: CheckOK}}}, "bad check name"},
		{"long name", &Health{Checks: []Check{{Name: strings.Repeat("a", MaxCheckName+1), Status: CheckOK}}}, "bad check name"},
		{"twice", &Health{Checks: []Check{ok, ok}}, "gpu-ecc twice"},
		{"unknown status", &Health{Checks: []Check{{Name: "x", Status: "healthy"}}}, `unknown status "healthy"`},
		{"empty status", &Health{Checks: []Check{{Name: "x"}}}, "unknown status"},
		{"long output", &Health{Checks: []Check{{Name: "x", Status: CheckFail, Output: strings.Repeat("o", MaxCheckOutput+1)}}}, "bytes of detail"},
		{"long detail", &Health{Checks: []Check{{Name: "x", Status: CheckFail, Detail: strings.Repeat("d", MaxCheckDetail+1)}}}, "bytes of detail"},
		{"too many", &Health{Checks: make([]Check, MaxChecks+1)}, "checks (at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.h.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestHealthRequestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *HealthRequest
		want string
	}{
		{"nil", nil, ""},
		{"zero", &HealthRequest{}, ""},
		{"full", &HealthRequest{TmpDir: "/scratch", MinTmpFree: 1 << 30, Command: "/etc/nhc", Timeout: time.Minute}, ""},
		{"relative tmp", &HealthRequest{TmpDir: "tmp"}, "not an absolute path"},
		{"long tmp", &HealthRequest{TmpDir: "/" + strings.Repeat("t", MaxHealthTmpDir)}, "bytes"},
		{"negative", &HealthRequest{MinTmpFree: -1}, "negative"},
		{"long command", &HealthRequest{Command: strings.Repeat("c", MaxHealthCmd+1), Timeout: time.Second}, "check command of"},
		{"no timeout", &HealthRequest{Command: "true"}, "without a timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// FuzzDecodeHealth: the health fields of a facts or hello payload decode
// without panic; what Validate accepts is within every bound, and
// encodes and decodes back to itself.
func FuzzDecodeHealth(f *testing.F) {
	for _, v := range []any{
		Facts{Version: Version, Name: "h", Health: &Health{GPUs: 8, Checks: []Check{
			{Name: CheckGPUBusy, Status: CheckFail, Detail: "GPU 0 held by pid 465 python3"},
			{Name: CheckSite, Status: CheckFail, Output: "bad\n"}, {Name: CheckTmpDir, Status: CheckOK}}}},
		Facts{Version: Version, Health: &Health{GPUs: -1, Checks: []Check{{Name: CheckGPUECC, Status: CheckNotChecked, Detail: "no nvidia-smi"}}}},
		Hello{Version: Version, Health: &HealthRequest{TmpDir: "/tmp", MinTmpFree: 1 << 30, Command: "exit 1", Timeout: time.Minute}},
	} {
		b, _ := json.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte(`{"health":{"gpus":-7,"checks":[{"name":"X","status":"?"}]}}`))
	f.Add([]byte(`{"health":{"checks":null}}`))
	f.Add([]byte(`{"health":{"tmp_dir":"rel","min_tmp_free":-1,"timeout":-5}}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		var fa Facts
		if json.Unmarshal(payload, &fa) == nil && fa.Health.Validate() == nil && fa.Health != nil {
			h := fa.Health
			if len(h.Checks) > MaxChecks || h.GPUs < -1 || h.GPUs > MaxHealthGPUs {
				t.Fatalf("accepted %+v", h)
			}
			for _, c := range h.Checks {
				if !checkName(c.Name) || len(c.Output) > MaxCheckOutput || len(c.Detail) > MaxCheckDetail {
					t.Fatalf("accepted check %+v", c)
				}
			}
			b, err := json.Marshal(h)
			if err != nil {
				t.Fatal(err)
			}
			var back Health
			if err := json.Unmarshal(b, &back); err != nil || back.Validate() != nil {
				t.Fatalf("round trip of %s: %v", b, err)
			}
			if len(back.Checks) == 0 && len(h.Checks) == 0 {
				back.Checks = h.Checks
			}
			if !reflect.DeepEqual(&back, h) {
				t.Fatalf("round trip: %+v, want %+v", back, *h)
			}
		}
		var he Hello
		if json.Unmarshal(payload, &he) == nil && he.Health.Validate() == nil && he.Health != nil {
			r := he.Health
			if r.MinTmpFree < 0 || len(r.Command) > MaxHealthCmd || r.Command != "" && r.Timeout <= 0 {
				t.Fatalf("accepted request %+v", r)
			}
		}
	})
}
