package bench

import (
	"flag"
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
		if b := img.Bounds(); b.Dx() != 1400 || b.Dy() != 450*tc.rows {
			t.Errorf("%s: %v, want 1400x%d", name, b, 450*tc.rows)
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
