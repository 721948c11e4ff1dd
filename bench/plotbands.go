package bench

import (
	"fmt"
	"image/color"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// hostGroup is a run of consecutive bars on one host.
type hostGroup struct {
	Host        string
	First, Last int // bar indices
	DevPct      float64
	Grade       int
}

// maxHostTicks: with more host groups than this the bar axis is labelled
// by rank instead of by host.
const maxHostTicks = 16

// hostGroups splits bars into runs by host and grades each host's mean per
// rank against the median host's (from mr.Hosts).
func hostGroups(mr MetricReport, bars []rankBar, threshold float64) []hostGroup {
	per := make([]float64, 0, len(mr.Hosts))
	perHost := map[string]float64{}
	for _, h := range mr.Hosts {
		per = append(per, h.PerRank)
		perHost[h.Host] = h.PerRank
	}
	med := 0.0
	if len(per) > 0 {
		med = Median(per)
	}
	var gs []hostGroup
	for i, b := range bars {
		if len(gs) > 0 && gs[len(gs)-1].Host == b.Host {
			gs[len(gs)-1].Last = i
			continue
		}
		g := hostGroup{Host: b.Host, First: i, Last: i}
		if med > 0 && len(per) > 1 {
			g.DevPct = pct(perHost[b.Host], med)
		}
		g.Grade = grade(g.DevPct, threshold*100)
		gs = append(gs, g)
	}
	return gs
}

// hostBand draws each host group as a coloured band between y0 and y1.
type hostBand struct {
	groups []hostGroup
	ranks  []int // the rank of each bar
	y0, y1 float64
}

func hostBands(mr MetricReport, bars []rankBar, threshold, y0, y1 float64) hostBand {
	ranks := make([]int, len(bars))
	for i, b := range bars {
		ranks[i] = b.Rank
	}
	return hostBand{groups: hostGroups(mr, bars, threshold), ranks: ranks, y0: y0, y1: y1}
}

func (hb hostBand) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	rect := func(col color.Color, x0, y0, x1, y1 vg.Length) {
		c.FillPolygon(col, c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
	}
	// White under the bars' feet, then each host's band with a gap above.
	y0, y1 := trY(hb.y0), trY(hb.y1)
	rect(color.White, c.Min.X, y0, c.Max.X, y1)
	gap := (y1 - y0) * 0.3
	for _, g := range hb.groups {
		x0, x1 := trX(float64(g.First)-0.45), trX(float64(g.Last)+0.45)
		rect(gradeColors[g.Grade], x0+1, y0, x1-1, y1-gap)
	}
}

// Thumbnail draws the legend's swatch: the band in the normal grade.
func (hb hostBand) Thumbnail(c *draw.Canvas) {
	h := (c.Max.Y - c.Min.Y) / 3
	r := vg.Rectangle{Min: vg.Point{X: c.Min.X, Y: c.Min.Y + h}, Max: vg.Point{X: c.Max.X, Y: c.Min.Y + 2*h}}
	c.FillPolygon(gradeColors[gradeNormal], []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
}

func (hb hostBand) byHost() bool { return len(hb.groups) > 1 && len(hb.groups) <= maxHostTicks }

func (hb hostBand) axisLabel() string {
	if hb.byHost() {
		return "ranks in order, grouped by host (host's per-rank mean vs median host)"
	}
	return "rank"
}

// ticks labels the host groups at their centres, or ranks at a step that
// keeps the labels apart.
func (hb hostBand) ticks() plot.Ticker {
	return bandTicks{hb}
}

type bandTicks struct{ hb hostBand }

func (bt bandTicks) Ticks(lo, hi float64) []plot.Tick {
	if bt.hb.byHost() {
		// Alternate labels drop a line so that long host names do not run
		// into each other.
		stagger := len(bt.hb.groups) > 4
		var ts []plot.Tick
		for i, g := range bt.hb.groups {
			label := fmt.Sprintf("%s\n%+.1f%%", hostName(g.Host), g.DevPct)
			if stagger && i%2 == 1 {
				label = "\n\n" + label
			}
			ts = append(ts, plot.Tick{Value: float64(g.First+g.Last) / 2, Label: label})
		}
		return ts
	}
	n := len(bt.hb.ranks)
	step := 1
	for n/step > 16 {
		step *= 2
	}
	var ts []plot.Tick
	for i := 0; i < n; i++ {
		t := plot.Tick{Value: float64(i)}
		if i%step == 0 {
			t.Label = strconv.Itoa(bt.hb.ranks[i])
		}
		ts = append(ts, t)
	}
	return ts
}
