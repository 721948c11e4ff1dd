package health

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// FuzzJudgeGPUs: whatever nvidia-smi prints, the parsers do not panic
// and JudgeGPUs answers every GPU check once, within wire's bounds.
func FuzzJudgeGPUs(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.csv")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b, b, b)
		}
	}
	f.Add([]byte("0, u, b, n, m, e, 1, 2, Yes, 3\n"), []byte("u, 1, p, [N/A]\n"), []byte("b, u, 0, 0, Yes, No\n"))
	f.Fuzz(func(t *testing.T, gpus, apps, remapped []byte) {
		n, cs := JudgeGPUs(SMI{GPUs: gpus, Apps: apps, Remapped: remapped})
		h := wire.Health{GPUs: min(n, wire.MaxHealthGPUs), Checks: cs}
		if err := h.Validate(); err != nil {
			t.Fatal(err)
		}
		if len(cs) != len(gpuChecks) {
			t.Fatalf("%d checks", len(cs))
		}
		if g, err := ParseGPUs(gpus); err == nil && n != len(g) {
			t.Fatalf("count %d for %d GPUs", n, len(g))
		}
	})
}
