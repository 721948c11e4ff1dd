package bench

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// maxPlotRows bounds how many metrics one PNG shows (one row each).
const maxPlotRows = 3

// maxLegendRanks: above this many ranks only stragglers and the slowest rank
// get their own colour and legend entry; the others are drawn in grey.
const maxLegendRanks = 12

var (
	// Tableau 10 without its red (kept for stragglers) and grey (kept for
	// "other ranks"), plus navy.
	rankColors = []color.RGBA{
		{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0x94, 0x67, 0xbd, 0xff},
		{0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
		{0x39, 0x3b, 0x79, 0xff},
	}
	colorOther    = color.RGBA{0xbb, 0xbb, 0xbb, 0xff}
	colorBar      = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	colorSlowBar  = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	colorStraggle = color.RGBA{0xd6, 0x27, 0x28, 0xff}
)

// WritePlot writes a PNG of rep to path (atomically). Each metric with a
// series (at most three; per-rank metrics first) gets a row: throughput over
// time with one line per rank, stragglers thick red, the median rank dashed,
// and beside it the per-host totals as bars, the slowest host red when
// stragglers were found. Global metrics get the series of the ranks that
// printed them and a dashed line at the reported value. Metrics with only an
// end-of-run figure are left out; with none left WritePlot fails.
func WritePlot(path string, rep Report) error {
	var metrics []MetricReport
	for _, mr := range rep.Metrics {
		if hasSeries(mr) {
			metrics = append(metrics, mr)
		}
	}
	if len(metrics) == 0 {
		return fmt.Errorf("plot %s: %w", path, errNothingToPlot)
	}
	rows := min(len(metrics), maxPlotRows)
	const w, rowH = 14 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, rowH*vg.Length(rows)), vgimg.UseDPI(100))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: 1, PadTop: 8, PadBottom: 8, PadLeft: 8, PadRight: 8, PadY: 24}
	for i := range rows {
		if err := plotRow(tiles.At(dc, 0, i), metrics[i]); err != nil {
			return fmt.Errorf("plot %s: %s: %w", path, metrics[i].Name, err)
		}
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return writeAtomic(path, buf.Bytes())
}

var errNothingToPlot = errors.New("no metric has a series over time: nothing to plot")

// hasSeries reports whether mr has a point after warm-up to draw.
func hasSeries(mr MetricReport) bool {
	for _, rr := range mr.Ranks {
		for _, p := range rr.Series {
			if !p.Warmup {
				return true
			}
		}
	}
	return false
}

// plotRow draws one metric: series (55%), legend strip, host bars.
func plotRow(c draw.Canvas, mr MetricReport) error {
	width := c.Max.X - c.Min.X
	legendW := 2.3 * vg.Inch
	seriesW := width * 0.55
	if mr.Scope == "global" {
		seriesW = width - legendW
	}
	series, legend, err := seriesPlot(mr)
	if err != nil {
		return err
	}
	series.Draw(draw.Crop(c, 0, seriesW-width, 0, 0))
	legend.Top, legend.Left = true, true
	legend.Draw(draw.Crop(c, seriesW+8, seriesW+legendW-width, 0, -24))
	if mr.Scope == "global" {
		return nil
	}
	bc := draw.Crop(c, seriesW+legendW+8, 0, 0, 0)
	bars, err := hostPlot(mr, bc.Max.X-bc.Min.X)
	if err != nil {
		return err
	}
	bars.Draw(bc)
	return nil
}

// newPlot returns a plot with sans-serif text, which reads better small.
func newPlot() *plot.Plot {
	p := plot.New()
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		f.Variant = "Sans"
	}
	p.Title.TextStyle.Font.Size = 14
	p.X.Tick.Label.Font.Size, p.Y.Tick.Label.Font.Size = 11, 11
	p.X.Tick.Marker, p.Y.Tick.Marker = plainTicks{}, plainTicks{}
	return p
}

func axisLabel(axis string) string {
	if axis == AxisLine {
		return "line number in log (lines carried no time)"
	}
	return "time since start (s)"
}

// seriesPlot draws every rank's post-warm-up series and returns the legend
// separately so it can sit outside the data area.
func seriesPlot(mr MetricReport) (*plot.Plot, plot.Legend, error) {
	p := newPlot()
	legend := plot.NewLegend()
	legend.TextStyle.Font.Size = 11
	legend.TextStyle.Font.Variant = "Sans"
	if mr.Scope == "global" {
		p.Title.Text = fmt.Sprintf("%s (global, %s): %s", mr.Name, mr.Coverage, valueCI(mr.Value, mr.CI95, mr.Unit))
		p.Y.Label.Text = unitOr(mr.Unit) + " (job-wide)"
	} else {
		p.Title.Text = fmt.Sprintf("%s per rank, warm-up excluded (%s)", mr.Name, mr.Coverage)
		p.Y.Label.Text = unitOr(mr.Unit) + " per rank"
	}
	p.X.Label.Text = axisLabel(mr.TimeAxis)
	p.Add(plotter.NewGrid())
	slow := map[int]bool{}
	for _, s := range mr.Stragglers {
		slow[s.Rank] = true
	}
	many := len(mr.Ranks) > maxLegendRanks
	otherShown := false
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for i, rr := range mr.Ranks {
		xys := make(plotter.XYs, 0, len(rr.Series))
		for _, pt := range rr.Series {
			if !pt.Warmup {
				xys = append(xys, plotter.XY{X: pt.T, Y: pt.Value})
				xmin, xmax, ymax = math.Min(xmin, pt.T), math.Max(xmax, pt.T), math.Max(ymax, pt.Value)
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, legend, err
		}
		name := fmt.Sprintf("rank %d (%s)", rr.Rank, hostName(rr.Host))
		col := color.Color(rankColors[i%len(rankColors)])
		l.Width, pts.Radius = 1.5, 1.5
		if i >= len(rankColors) {
			l.Dashes = []vg.Length{6, 3}
		}
		if slow[rr.Rank] {
			name += " straggler"
			col, l.Width, l.Dashes = colorStraggle, 3, nil
		}
		isSlowest := mr.SlowestRank != nil && mr.SlowestRank.Rank == rr.Rank
		if many && !slow[rr.Rank] && !isSlowest {
			col, l.Dashes = colorOther, nil
		}
		l.Color, pts.Color, pts.Shape = col, col, draw.CircleGlyph{}
		p.Add(l, pts)
		switch {
		case !many || slow[rr.Rank] || isSlowest:
			legend.Add(name, l, pts)
		case !otherShown:
			legend.Add("other ranks", l)
			otherShown = true
		}
	}
	ref, refName := mr.MedianRank, "median rank"
	if mr.Scope == "global" {
		ref, refName = mr.Value, "reported value"
	}
	if (mr.Scope == "global" || mr.RanksReporting > 1) && xmax >= xmin {
		med, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: ref}, {X: xmax, Y: ref}})
		if err != nil {
			return nil, legend, err
		}
		med.Color, med.Width, med.Dashes = color.Black, 1, []vg.Length{4, 4}
		p.Add(med)
		legend.Add(fmt.Sprintf("%s %s", refName, num1(ref)), med)
		ymax = math.Max(ymax, ref)
	}
	p.Y.Min, p.Y.Max = 0, math.Max(ymax*1.08, 1)
	return p, legend, nil
}

// hostPlot draws per-host totals as bars with their values on top; width is
// the width of the canvas it will be drawn on.
func hostPlot(mr MetricReport, width vg.Length) (*plot.Plot, error) {
	p := newPlot()
	p.Title.Text = fmt.Sprintf("total per host\njob total %s", valueCI(mr.Value, mr.CI95, mr.Unit))
	p.Y.Label.Text = unitOr(mr.Unit) + " per host"
	p.X.Label.Text = "host (ranks reporting)"
	n := len(mr.Hosts)
	normal, slow := make(plotter.Values, n), make(plotter.Values, n)
	names := make([]string, n)
	labels := plotter.XYLabels{XYs: make(plotter.XYs, n), Labels: make([]string, n)}
	ymax := 0.0
	for i, h := range mr.Hosts {
		names[i] = fmt.Sprintf("%s (%d)", hostName(h.Host), len(h.Ranks))
		if len(mr.Stragglers) > 0 && mr.SlowestHost != nil && mr.SlowestHost.Host == h.Host {
			slow[i] = h.Total
		} else {
			normal[i] = h.Total
		}
		labels.XYs[i] = plotter.XY{X: float64(i), Y: h.Total}
		labels.Labels[i] = num1(h.Total)
		ymax = math.Max(ymax, h.Total)
	}
	// Each host gets a slot 1 unit wide; bars fill 60% of a slot of the
	// data area (about 70% of the canvas).
	barW := min(60, width*0.7*0.6/vg.Length(n))
	for _, b := range []struct {
		v   plotter.Values
		col color.Color
	}{{normal, colorBar}, {slow, colorSlowBar}} {
		bc, err := plotter.NewBarChart(b.v, barW)
		if err != nil {
			return nil, err
		}
		bc.Color, bc.LineStyle.Width = b.col, 0
		p.Add(bc)
	}
	lab, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].XAlign = draw.XCenter
		lab.TextStyle[i].Font.Size = 11
		lab.TextStyle[i].Font.Variant = "Sans"
	}
	lab.Offset = vg.Point{Y: 4}
	p.Add(lab)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(n)-0.5
	p.Y.Min, p.Y.Max = 0, math.Max(ymax*1.15, 1)
	if len(mr.Stragglers) > 0 && mr.SlowestHost != nil {
		// In the title: a wide axis label would narrow the data area.
		p.Title.Text += fmt.Sprintf("\nred: slowest host, %+.2f%% per rank vs median", mr.SlowestHost.DeviationPct)
	}
	return p, nil
}

// plainTicks are gonum's default ticks labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			v, _ := strconv.ParseFloat(strconv.FormatFloat(ts[i].Value, 'g', 6, 64), 64)
			ts[i].Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return ts
}
