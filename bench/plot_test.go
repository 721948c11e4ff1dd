package bench

import (
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var plotDir = flag.String("plotdir", "", "also write the test PNGs to this directory, to look at them")

// noisyReport simulates ranks ranks on two hosts for 60 s, rank 5 slowed by
// 20%, with seeded noise.
func noisyReport(t *testing.T, ranks int) Report {
	t.Helper()
	c, err := NewCollector(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	wait := runCollector(t, t.Context(), c)
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for r := range ranks {
		host := "node-a"
		if r >= ranks/2 {
			host = "node-b"
		}
		base := 2840.0
		if r == 5 {
			base *= 0.8
		}
		for i := range 30 {
			v := base + rng.NormFloat64()*25
			c.Observe(r, host, t0.Add(time.Duration(2*i+1)*time.Second+time.Duration(r)*time.Millisecond), tfLine(10*(i+1), v))
		}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	return c.Report(Meta{Ranks: ranks, Hosts: []string{"node-a", "node-b"}, Start: t0, End: t0.Add(time.Minute)})
}

func TestWritePlot(t *testing.T) {
	dir := *plotDir
	if dir == "" {
		dir = t.TempDir()
	}
	rich := richReport(t)
	cases := map[string]struct {
		rep  Report
		rows int
	}{
		"plot-8ranks.png":  {noisyReport(t, 8), 1},
		"plot-32ranks.png": {noisyReport(t, 32), 1},
		"plot-4ranks.png":  {clusterReport(t, 4), 1},
		"plot-16ranks.png": {clusterReport(t, 16), 1},
		"plot-64ranks.png": {clusterReport(t, 64), 1},
		"plot-mixed.png":   {rich, maxPlotRows},
	}
	for name, tc := range cases {
		path := filepath.Join(dir, name)
		if err := WritePlot(path, tc.rep); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() != 1400 || b.Dy() != 60+450*tc.rows {
			t.Errorf("%s: %v, want 1400x%d", name, b, 60+450*tc.rows)
		}
		// The straggler's line and the slowest host's bar are drawn in red.
		if n := countColor(img, colorStraggle); n < 200 {
			t.Errorf("%s: %d red pixels: straggler not highlighted", name, n)
		}
	}
	if err := WritePlot(filepath.Join(dir, "empty.png"), Report{}); err == nil {
		t.Error("empty report: want error")
	}
}

// clusterReport simulates ranks ranks, 8 to a host (fewer hosts for small
// jobs), for 60 s: host 1 runs 0.3% slow (not a straggler), the last host
// 3.5% slow, and ranks 5, 11 and 40 (where they exist) 8%, 15% and 25%
// slow: stragglers at the default 5% threshold.
func clusterReport(t *testing.T, ranks int) Report {
	t.Helper()
	perHost := min(8, max(1, ranks/2))
	nHosts := (ranks + perHost - 1) / perHost
	hosts := make([]string, nHosts)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("gpu-node-%02d", i+1)
	}
	opts := DefaultOptions()
	opts.RankHosts = make([]string, ranks)
	for r := range ranks {
		opts.RankHosts[r] = hosts[r/perHost]
	}
	c, err := NewCollector(opts)
	if err != nil {
		t.Fatal(err)
	}
	wait := runCollector(t, t.Context(), c)
	rng := rand.New(rand.NewPCG(3, 4))
	t0 := time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)
	slow := map[int]float64{5: 0.92, 11: 0.85, 40: 0.75}
	for r := range ranks {
		h := r / perHost
		base := 2840.0
		switch {
		case h == 1:
			base *= 0.997
		case h == nHosts-1 && nHosts > 2:
			base *= 0.965
		}
		if f, ok := slow[r]; ok {
			base *= f
		}
		for i := range 30 {
			v := base + rng.NormFloat64()*12
			c.Observe(r, hosts[h], t0.Add(time.Duration(2*i+1)*time.Second+time.Duration(r)*time.Millisecond), tfLine(10*(i+1), v))
		}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	return c.Report(Meta{Command: []string{"python3", "train.py", "--model", "resnet50", "--batch-size", "256"},
		Ranks: ranks, Hosts: hosts, Start: t0, End: t0.Add(time.Minute)})
}

func countColor(img image.Image, c color.RGBA) int {
	n := 0
	var pix []byte
	switch im := img.(type) {
	case *image.RGBA:
		pix = im.Pix
	case *image.NRGBA:
		pix = im.Pix
	default:
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				if color.RGBAModel.Convert(img.At(x, y)) == c {
					n++
				}
			}
		}
		return n
	}
	for i := 0; i+3 < len(pix); i += 4 {
		if pix[i] == c.R && pix[i+1] == c.G && pix[i+2] == c.B && pix[i+3] == 0xff {
			n++
		}
	}
	return n
}
