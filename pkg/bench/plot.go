package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strconv"
)

// WritePlot writes a PNG of the run's lag over time: lag in seconds (red,
// left scale) and in records or WAL bytes (blue, right scale, relative to
// the largest), with a vertical line (grey) where the producer stopped and
// at every restart (orange). Scales are printed with a small built-in
// digit font: the left axis top in seconds, the bottom axis end in
// seconds, the right axis top in units.
func WritePlot(path string, res *Result) error {
	const W, H, L, R, T, B = 900, 420, 60, 80, 20, 40
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	if len(res.Timeline) == 0 {
		return writePNG(path, img)
	}
	tMax := res.Timeline[len(res.Timeline)-1].At.Seconds()
	sMax, uMax := 0.0, 0.0
	for _, s := range res.Timeline {
		sMax = math.Max(sMax, s.LagSeconds)
		uMax = math.Max(uMax, float64(s.LagUnits))
	}
	sMax = niceCeil(sMax)
	uMax = niceCeil(uMax)
	tMax = niceCeil(tMax)
	pw, ph := W-L-R, H-T-B
	x := func(t float64) int { return L + int(t/tMax*float64(pw)) }
	ys := func(v float64) int { return T + ph - int(v/sMax*float64(ph)) }
	yu := func(v float64) int { return T + ph - int(v/uMax*float64(ph)) }
	grid := color.RGBA{0xe0, 0xe0, 0xe0, 0xff}
	black := color.RGBA{0, 0, 0, 0xff}
	for i := 0; i <= 10; i++ {
		line(img, L, T+ph*i/10, L+pw, T+ph*i/10, grid)
		line(img, L+pw*i/10, T, L+pw*i/10, T+ph, grid)
	}
	line(img, L, T, L, T+ph, black)
	line(img, L, T+ph, L+pw, T+ph, black)
	line(img, L+pw, T, L+pw, T+ph, black)
	if res.Seconds > 0 {
		line(img, x(res.Seconds), T, x(res.Seconds), T+ph, color.RGBA{0x80, 0x80, 0x80, 0xff})
	}
	for _, r := range res.Restarts {
		line(img, x(r.AtSeconds), T, x(r.AtSeconds), T+ph, color.RGBA{0xff, 0x99, 0, 0xff})
	}
	blue := color.RGBA{0x20, 0x40, 0xd0, 0xff}
	red := color.RGBA{0xd0, 0x20, 0x20, 0xff}
	for i := 1; i < len(res.Timeline); i++ {
		a, b := res.Timeline[i-1], res.Timeline[i]
		line(img, x(a.At.Seconds()), yu(float64(a.LagUnits)), x(b.At.Seconds()), yu(float64(b.LagUnits)), blue)
	}
	for i := 1; i < len(res.Timeline); i++ {
		a, b := res.Timeline[i-1], res.Timeline[i]
		line(img, x(a.At.Seconds()), ys(a.LagSeconds), x(b.At.Seconds()), ys(b.LagSeconds), red)
	}
	// Scale labels.
	text(img, 4, T, fmtNum(sMax), red)
	text(img, 4, T+ph-10, "0", red)
	text(img, L+pw+6, T, fmtNum(uMax), blue)
	text(img, L+pw+6, T+ph-10, "0", blue)
	text(img, L, T+ph+8, "0", black)
	text(img, L+pw-30, T+ph+8, fmtNum(tMax), black)
	return writePNG(path, img)
}

func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("write plot: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

// niceCeil rounds v up to a round multiple of a power of ten (1 for v <= 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64) string {
	if v >= 1 && v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// line draws a line with Bresenham's algorithm, two pixels thick.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		img.Set(x0, y0, c)
		img.Set(x0, y0+1, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// glyphs is a 3x5 font for digits and '.', one row per 3 bits.
var glyphs = map[rune][5]uint8{
	'0': {7, 5, 5, 5, 7}, '1': {2, 6, 2, 2, 7}, '2': {7, 1, 7, 4, 7}, '3': {7, 1, 7, 1, 7},
	'4': {5, 5, 7, 1, 1}, '5': {7, 4, 7, 1, 7}, '6': {7, 4, 7, 5, 7}, '7': {7, 1, 1, 1, 1},
	'8': {7, 5, 7, 5, 7}, '9': {7, 5, 7, 1, 7}, '.': {0, 0, 0, 0, 2}, 'e': {0, 7, 7, 4, 7},
	'+': {0, 2, 7, 2, 0}, '-': {0, 0, 7, 0, 0},
}

// text draws s at (x, y) with the digit font scaled 2x.
func text(img *image.RGBA, x, y int, s string, c color.Color) {
	for _, r := range s {
		g, ok := glyphs[r]
		if !ok {
			x += 8
			continue
		}
		for row := 0; row < 5; row++ {
			for col := 0; col < 3; col++ {
				if g[row]&(4>>col) != 0 {
					for dy := 0; dy < 2; dy++ {
						for dx := 0; dx < 2; dx++ {
							img.Set(x+col*2+dx, y+row*2+dy, c)
						}
					}
				}
			}
		}
		x += 8
	}
}
