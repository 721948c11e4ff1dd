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

// maxOwnColour: jobs with at most this many ranks draw every rank in its own
// colour; larger ones draw the ranks in grey and give colours only to the
// stragglers (and the slowest rank).
const maxOwnColour = 8

// maxLegendStragglers bounds the stragglers named in the legend; the rest
// are counted in one entry.
const maxLegendStragglers = 10

// Plot geometry at 100 dpi: 1400 px wide, 60 px of caption, 450 px a row.
const (
	plotW    = 14 * vg.Inch
	captionH = 0.6 * vg.Inch
	rowH     = 4.5 * vg.Inch
)

var (
	// Tableau 10 without its grey, red first: the colours a rank's line
	// takes, one per rank in small jobs, one per straggler in large ones.
	rankColors = []color.RGBA{
		{0xd6, 0x27, 0x28, 0xff}, {0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
		{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0xbc, 0xbd, 0x22, 0xff},
		{0x17, 0xbe, 0xcf, 0xff},
	}
	colorOther = color.RGBA{0xc8, 0xc8, 0xc8, 0xff}
	// gradeColors colour the bars by grade: blue-grey, yellow, orange, red.
	gradeColors = [4]color.RGBA{
		{0x6b, 0x8e, 0xb8, 0xff}, {0xf2, 0xc1, 0x4e, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	}
	colorStraggle  = gradeColors[gradeStraggler]
	colorThreshold = color.RGBA{0xd6, 0x27, 0x28, 0xff}
)

// WritePlot writes a PNG of rep to path (atomically). A caption names the
// command, hosts, ranks, date and total. Each metric with a series (at most
// three; per-rank metrics first) gets a row: on the left each rank's mean
// as a bar in rank order, coloured by how far below the median it is, with
// the median and the straggler threshold as lines and a band under each
// host's ranks coloured the same way for the host; in the middle the series
// over time, stragglers each in their own colour; on the right the legend.
// Global metrics get the series of the ranks that printed them and a dashed
// line at the reported value. Metrics with only an end-of-run figure are
// left out; with none left WritePlot fails.
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
	threshold := rep.Options.StragglerThreshold
	if threshold <= 0 {
		threshold = DefaultStragglerThreshold
	}
	rows := min(len(metrics), maxPlotRows)
	img := vgimg.NewWith(vgimg.UseWH(plotW, captionH+rowH*vg.Length(rows)), vgimg.UseDPI(100))
	dc := draw.New(img)
	drawCaption(draw.Crop(dc, 0, 0, rowH*vg.Length(rows), 0), caption(rep, metrics[0]))
	body := draw.Crop(dc, 0, 0, 0, -captionH)
	tiles := draw.Tiles{Rows: rows, Cols: 1, PadTop: 4, PadBottom: 8, PadLeft: 8, PadRight: 8, PadY: 24}
	for i := range rows {
		if err := plotRow(tiles.At(body, 0, i), metrics[i], threshold); err != nil {
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

func drawCaption(c draw.Canvas, text string) {
	c.FillPolygon(color.RGBA{0xf4, 0xf4, 0xf4, 0xff}, []vg.Point{c.Min, {X: c.Max.X, Y: c.Min.Y}, c.Max, {X: c.Min.X, Y: c.Max.Y}})
	sty := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 13), Handler: plot.DefaultTextHandler,
		XAlign: draw.XLeft, YAlign: draw.YCenter}
	sty.Font.Variant = "Sans"
	c.FillText(sty, vg.Point{X: c.Min.X + 10, Y: (c.Min.Y + c.Max.Y) / 2}, text)
}

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

// plotRow draws one metric: rank bars (left), series (middle) and the legend
// in a column of its own on the right, below the titles' height, so it can
// collide with neither.
func plotRow(c draw.Canvas, mr MetricReport, threshold float64) error {
	width := c.Max.X - c.Min.X
	legendW := 2.8 * vg.Inch
	barsW := (width - legendW) * 0.47
	if mr.Scope == "global" {
		barsW = 0
	}
	legend := newLegend()
	if barsW > 0 {
		bars, err := barsPlot(mr, threshold, barsW, &legend)
		if err != nil {
			return err
		}
		bars.Draw(draw.Crop(c, 0, barsW-width, 0, 0))
	}
	series, err := seriesPlot(mr, &legend)
	if err != nil {
		return err
	}
	series.Draw(draw.Crop(c, barsW+12, -legendW, 0, 0))
	legend.Draw(draw.Crop(c, width-legendW+10, 0, 0, -40))
	return nil
}

func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.TextStyle.Font.Size = 10.5
	l.TextStyle.Font.Variant = "Sans"
	l.Top, l.Left = true, true
	l.ThumbnailWidth = vg.Points(18)
	return l
}

// newPlot returns a plot with sans-serif text, which reads better small.
func newPlot() *plot.Plot {
	p := plot.New()
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		f.Variant = "Sans"
	}
	p.Title.TextStyle.Font.Size = 13
	p.X.Tick.Label.Font.Size, p.Y.Tick.Label.Font.Size = 10.5, 10.5
	p.X.Tick.Marker, p.Y.Tick.Marker = plainTicks{}, plainTicks{}
	return p
}

func axisLabel(axis string) string {
	if axis == AxisLine {
		return "line number in log (lines carried no time)"
	}
	return "time since start (s)"
}

// seriesPlot draws every rank's post-warm-up series and adds its entries to
// legend.
func seriesPlot(mr MetricReport, legend *plot.Legend) (*plot.Plot, error) {
	p := newPlot()
	if mr.Scope == "global" {
		p.Title.Text = fmt.Sprintf("%s (global, %s): %s", mr.Name, mr.Coverage, valueCI(mr.Value, mr.CI95, mr.Unit))
		p.Y.Label.Text = unitOr(mr.Unit) + " (job-wide)"
	} else {
		p.Title.Text = fmt.Sprintf("%s per rank, warm-up excluded", mr.Name)
		p.Y.Label.Text = unitOr(mr.Unit) + " per rank"
	}
	p.X.Label.Text = axisLabel(mr.TimeAxis)
	p.Add(plotter.NewGrid())
	few := len(mr.Ranks) <= maxOwnColour
	lines, ys, xmin, xmax, err := rankLines(mr, few)
	if err != nil {
		return nil, err
	}
	addRankLines(p, legend, lines, few)
	if more := len(mr.Stragglers) - maxLegendStragglers; more > 0 && !few {
		legend.Add(fmt.Sprintf("(+%d more stragglers)", more))
	}
	ref, refName := mr.MedianRank, "median rank"
	if mr.Scope == "global" {
		ref, refName = mr.Value, "reported value"
	}
	if (mr.Scope == "global" || mr.RanksReporting > 1) && xmax >= xmin {
		med, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: ref}, {X: xmax, Y: ref}})
		if err != nil {
			return nil, err
		}
		med.Color, med.Width, med.Dashes = color.Black, 1, []vg.Length{4, 4}
		p.Add(med)
		if mr.Scope == "global" {
			legend.Add(fmt.Sprintf("%s %s", refName, num1(ref)), med)
		}
		ys = append(ys, ref)
	}
	p.Y.Min, p.Y.Max = fitRange(ys...)
	return p, nil
}

// rankLine is one rank's series as drawn: in front when coloured.
type rankLine struct {
	l     *plotter.Line
	pts   *plotter.Scatter
	name  string
	front bool
}

// rankLines makes each rank's line of its post-warm-up points, styled
// by what the rank is (a straggler, the slowest, one of few), and returns
// every value drawn and the x range.
func rankLines(mr MetricReport, few bool) (lines []rankLine, ys []float64, xmin, xmax float64, err error) {
	slow := map[int]int{} // rank -> index among stragglers
	dev := map[int]float64{}
	for i, s := range mr.Stragglers {
		slow[s.Rank], dev[s.Rank] = i, s.DeviationPct
	}
	xmin, xmax = math.Inf(1), math.Inf(-1)
	for i, rr := range mr.Ranks {
		xys := make(plotter.XYs, 0, len(rr.Series))
		for _, pt := range rr.Series {
			if !pt.Warmup {
				xys = append(xys, plotter.XY{X: pt.T, Y: pt.Value})
				xmin, xmax = math.Min(xmin, pt.T), math.Max(xmax, pt.T)
				ys = append(ys, pt.Value)
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, nil, 0, 0, err
		}
		name := fmt.Sprintf("rank %d %s", rr.Rank, hostName(rr.Host))
		col, front := colorOther, false
		l.Width, pts.Radius = 1, 1
		k, isSlow := slow[rr.Rank]
		isSlowest := mr.SlowestRank != nil && mr.SlowestRank.Rank == rr.Rank && len(mr.Ranks) > 1
		switch {
		case few:
			col, l.Width, pts.Radius, front = rankColors[(i+1)%len(rankColors)], 1.5, 1.5, true
			if isSlow {
				col = rankColors[k%len(rankColors)]
			}
		case isSlow:
			col, front = rankColors[k%len(rankColors)], true
			if k >= len(rankColors) {
				l.Dashes = []vg.Length{6, 3}
			}
		case isSlowest:
			col, front = color.RGBA{0x33, 0x33, 0x33, 0xff}, true
			name += " slowest"
		}
		if isSlow {
			name += fmt.Sprintf(" %+.1f%%", dev[rr.Rank])
			l.Width, pts.Radius = 2.5, 2
		}
		l.Color, pts.Color, pts.Shape = col, col, draw.CircleGlyph{}
		lines = append(lines, rankLine{l, pts, name, front})
	}
	return lines, ys, xmin, xmax, nil
}

// addRankLines draws the grey ranks first, so the coloured ones are on
// top, and names the coloured ones in the legend.
func addRankLines(p *plot.Plot, legend *plot.Legend, lines []rankLine, few bool) {
	otherShown, named := false, 0
	for _, front := range []bool{false, true} {
		for _, ln := range lines {
			if ln.front != front {
				continue
			}
			p.Add(ln.l, ln.pts)
			switch {
			case !front && !otherShown:
				legend.Add("other ranks", ln.l)
				otherShown = true
			case front && named < maxLegendStragglers:
				if named == 0 && !few {
					legend.Add("slow ranks, vs median:")
				}
				legend.Add(ln.name, ln.l, ln.pts)
				named++
			}
		}
	}
}

// barsPlot draws each rank's mean as a bar in rank order, coloured by grade,
// with the median and the straggler threshold as lines and a band per host
// at the bottom coloured by the host's grade; it adds its entries to legend.
func barsPlot(mr MetricReport, threshold float64, width vg.Length, legend *plot.Legend) (*plot.Plot, error) {
	p := newPlot()
	p.Title.Text = fmt.Sprintf("mean per rank (%d of %d ranks)", mr.RanksReporting, mr.RanksTotal)
	p.Y.Label.Text = unitOr(mr.Unit) + " per rank"
	bars := rankBars(mr, threshold)
	n := len(bars)
	if n == 0 {
		return p, nil
	}
	byGrade := [4]plotter.Values{}
	for g := range byGrade {
		byGrade[g] = make(plotter.Values, n)
	}
	vals := []float64{}
	var labels plotter.XYLabels
	for i, b := range bars {
		byGrade[b.Grade][i] = b.Mean
		vals = append(vals, b.Mean)
		if b.Straggler {
			labels.XYs = append(labels.XYs, plotter.XY{X: float64(i), Y: b.Mean})
			labels.Labels = append(labels.Labels, strconv.Itoa(b.Rank))
		}
	}
	thr := mr.MedianRank * (1 - threshold)
	if mr.MedianRank > 0 {
		vals = append(vals, mr.MedianRank, thr)
	}
	lo, hi := fitRange(vals...)
	band := (hi - lo) * 0.05
	p.Add(plotter.NewGrid())
	// Bars fill 75% of their slot of the data area (the panel less about
	// an inch of y axis).
	barW := max(1, min(40, (width-vg.Inch)*0.75/vg.Length(n)))
	names := gradeLabels(threshold * 100)
	for g, v := range byGrade {
		bc, err := plotter.NewBarChart(v, barW)
		if err != nil {
			return nil, err
		}
		bc.Color, bc.LineStyle.Width = gradeColors[g], 0
		p.Add(bc)
		legend.Add(names[g], bc)
	}
	hb := hostBands(mr, bars, threshold, lo-band, lo)
	if len(hb.groups) > 1 {
		p.Add(hb)
	}
	if mr.MedianRank > 0 {
		if err := addBarReferences(p, legend, mr.MedianRank, thr, threshold, n); err != nil {
			return nil, err
		}
	}
	if len(labels.Labels) > 0 && len(labels.Labels) <= 16 {
		if err := addStragglerLabels(p, labels); err != nil {
			return nil, err
		}
	}
	if len(hb.groups) > 1 {
		legend.Add("band: host vs median host", hb)
	}
	p.X.Tick.Marker = hb.ticks()
	p.X.Label.Text = hb.axisLabel()
	// After the Adds: a bar chart's data range reaches down to 0.
	p.Y.Min, p.Y.Max = lo-band, hi
	p.X.Min, p.X.Max = -0.6, float64(n)-0.4
	return p, nil
}

// addBarReferences draws the median rank's mean and the straggler
// threshold across n bars, with their legend entries.
func addBarReferences(p *plot.Plot, legend *plot.Legend, median, thr, threshold float64, n int) error {
	for _, ref := range []struct {
		y    float64
		col  color.Color
		dash []vg.Length
		name string
	}{
		{median, color.Black, []vg.Length{4, 4}, "median rank " + num1(median)},
		{thr, colorThreshold, nil, fmt.Sprintf("straggler threshold -%s%%", pctText(threshold*100))},
	} {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.6, Y: ref.y}, {X: float64(n) - 0.4, Y: ref.y}})
		if err != nil {
			return err
		}
		l.Color, l.Width, l.Dashes = ref.col, 1.2, ref.dash
		p.Add(l)
		legend.Add(ref.name, l)
	}
	return nil
}

// addStragglerLabels writes each straggler's rank above its bar.
func addStragglerLabels(p *plot.Plot, labels plotter.XYLabels) error {
	lab, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].XAlign = draw.XCenter
		lab.TextStyle[i].Font.Size = 9
		lab.TextStyle[i].Font.Variant = "Sans"
	}
	lab.Offset = vg.Point{Y: 3}
	p.Add(lab)
	return nil
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
