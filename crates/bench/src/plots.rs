//! Plots as SVG strings (plotters' SVG backend), inlined into report.html and written next to
//! report.md. Every plot function takes plain numbers, so the report decides what to show.

use plotters::prelude::*;

const W: u32 = 760;
const H: u32 = 400;

/// A colour-blind-safe palette (Okabe–Ito), cycled.
const PALETTE: &[RGBColor] = &[
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn finish(svg: String) -> String {
    svg
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let e = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * e {
            return m * e;
        }
    }
    10.0 * e
}

/// ECDF curves: (label, steps of (x, share)). X on a log scale when the data spans over 2 decades.
pub fn ecdf(title: &str, x_label: &str, series: &[(String, Vec<(f64, f64)>)]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let xs: Vec<f64> = series.iter().flat_map(|s| s.1.iter().map(|p| p.0)).filter(|x| *x > 0.0).collect();
        let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let xmax = xs.iter().copied().fold(0.0, f64::max);
        let (xmin, xmax) = if xs.is_empty() { (1.0, 10.0) } else { (xmin, xmax.max(xmin * 1.01)) };
        let log = xmax / xmin > 100.0;
        let mut chart_builder = ChartBuilder::on(&root);
        chart_builder.caption(title, ("sans-serif", 18)).margin(12).x_label_area_size(40).y_label_area_size(50);
        let draw = |series: &[(String, Vec<(f64, f64)>)]| -> Vec<(String, Vec<(f64, f64)>)> {
            // Draw as a step function: the ECDF holds its value until the next sample.
            series
                .iter()
                .map(|(l, pts)| {
                    let mut st = Vec::with_capacity(pts.len() * 2);
                    let mut prev = 0.0;
                    for &(x, y) in pts {
                        if x <= 0.0 && log {
                            prev = y;
                            continue;
                        }
                        st.push((x, prev));
                        st.push((x, y));
                        prev = y;
                    }
                    (l.clone(), st)
                })
                .collect()
        };
        let steps = draw(series);
        if log {
            let chart = chart_builder
                .build_cartesian_2d((xmin * 0.9..xmax * 1.1).log_scale(), 0.0..1.0)
                .map_err(|e| e.to_string())?;
            draw_ecdf_steps(chart, x_label, &steps)?;
        } else {
            let lo = if xs.is_empty() { 0.0 } else { (xmin - (xmax - xmin) * 0.05).max(0.0) };
            let chart = chart_builder
                .build_cartesian_2d(lo..xmax + (xmax - xmin) * 0.05, 0.0..1.0)
                .map_err(|e| e.to_string())?;
            draw_ecdf_steps(chart, x_label, &steps)?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(finish(svg))
}

/// Mesh, one step line per series and the legend of an ECDF chart; the x axis may be linear or log.
fn draw_ecdf_steps<'a, DB, X>(
    mut chart: ChartContext<'a, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    x_label: &str,
    steps: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("share of samples ≤ x")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (label, pts)) in steps.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())
}

/// One bar per category at the median with an IQR whisker (q1–q3).
pub struct Bar {
    pub label: String,
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
    /// Colour group (e.g. the strategy), so equal strategies share a colour.
    pub group: usize,
}

pub fn bars_iqr(title: &str, y_label: &str, bars: &[Bar]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let ymax = nice_max(bars.iter().map(|b| b.q3.max(b.median)).fold(0.0, f64::max) * 1.1);
        let n = bars.len().max(1);
        let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
        let bottom = if labels.iter().any(|l| l.len() > 10) { 90 } else { 45 };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(bottom)
            .y_label_area_size(60)
            .build_cartesian_2d((0..n).into_segmented(), 0.0..ymax)
            .map_err(|e| e.to_string())?;
        let rotate = bottom > 45;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(y_label)
            .x_labels(n)
            .x_label_style(if rotate {
                ("sans-serif", 12).into_font().transform(FontTransform::Rotate90).into_text_style(&root)
            } else {
                ("sans-serif", 12).into_text_style(&root)
            })
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                let c = color(b.group);
                let mut r = Rectangle::new([(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), b.median)], c.mix(0.75).filled());
                r.set_margin(0, 0, 8, 8);
                r
            }))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                ErrorBar::new_vertical(SegmentValue::CenterOf(i), b.q1, b.median, b.q3, BLACK.stroke_width(2), 12)
            }))
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(finish(svg))
}

/// Lines through points, one per series, plus an optional dashed reference ("ideal") line.
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    ideal: Option<(String, Vec<(f64, f64)>)>,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().copied()).chain(ideal.iter().flat_map(|s| s.1.iter().copied())).collect();
        let xmax = all.iter().map(|p| p.0).fold(1.0, f64::max);
        let ymax = nice_max(all.iter().map(|p| p.1).fold(0.0, f64::max) * 1.1);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax + 0.5, 0.0..ymax)
            .map_err(|e| e.to_string())?;
        chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw().map_err(|e| e.to_string())?;
        if let Some((label, pts)) = &ideal {
            let style = ShapeStyle { color: BLACK.mix(0.6), filled: false, stroke_width: 2 };
            chart
                .draw_series(DashedLineSeries::new(pts.iter().copied(), 8, 6, style))
                .map_err(|e| e.to_string())?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
        for (i, (label, pts)) in series.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(finish(svg))
}

/// Stacked horizontal shares (0–100 %) per row, one colour per bucket: study A's latency buckets
/// at a glance.
pub fn stacked_shares(title: &str, rows: &[(String, Vec<f64>)], bucket_labels: &[&str]) -> Result<String, String> {
    let h = (80 + rows.len() as u32 * 26).max(200);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let n = rows.len().max(1);
        let labels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(230)
            .build_cartesian_2d(0.0..128.0, (0..n).into_segmented())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("share of wake-up events (%)")
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(|e| e.to_string())?;
        // Sequential colours, good (green) to bad (red), so the eye reads the tail at once.
        const BUCKET_COLORS: [RGBColor; 5] =
            [RGBColor(26, 152, 80), RGBColor(145, 207, 96), RGBColor(254, 224, 139), RGBColor(252, 141, 89), RGBColor(215, 48, 39)];
        for (k, bl) in bucket_labels.iter().enumerate() {
            let c = BUCKET_COLORS[k % BUCKET_COLORS.len()];
            chart
                .draw_series(rows.iter().enumerate().map(|(i, (_, s))| {
                    let start: f64 = s[..k].iter().sum();
                    let mut r = Rectangle::new(
                        [(start, SegmentValue::Exact(i)), (start + s.get(k).copied().unwrap_or(0.0), SegmentValue::Exact(i + 1))],
                        c.filled(),
                    );
                    r.set_margin(3, 3, 0, 0);
                    r
                }))
                .map_err(|e| e.to_string())?
                .label(format!("{bl} µs"))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_are_svg_with_their_labels() {
        let e = ecdf("t", "x", &[("a".into(), vec![(1.0, 0.5), (1000.0, 1.0)]), ("b".into(), vec![(2.0, 1.0)])]).unwrap();
        assert!(e.starts_with("<svg") && e.contains("viewBox") && e.contains(">\na\n<") && e.contains(">\nb\n<"), "{e}");
        let b = bars_iqr("t", "y", &[Bar { label: "none".into(), median: 2.0, q1: 1.0, q3: 3.0, group: 0 }]).unwrap();
        assert!(b.contains(">\nnone\n<"));
        let l = lines("t", "x", "y", &[("s".into(), vec![(1.0, 1.0), (2.0, 2.5)])], Some(("ideal".into(), vec![(1.0, 1.0), (2.0, 2.0)]))).unwrap();
        assert!(l.contains(">\nideal\n<"));
        let s = stacked_shares("t", &[("ru-thread".into(), vec![90.0, 5.0, 3.0, 1.0, 1.0])], &["0–1", "2–3", "4–7", "8–15", "≥16"]).unwrap();
        assert!(s.contains("ru-thread"));
        // Empty input still renders (a section with no data shows an empty frame, not a panic).
        assert!(ecdf("t", "x", &[]).is_ok());
        assert!(bars_iqr("t", "y", &[]).is_ok());
    }

    #[test]
    fn nice_max_rounds_up() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(7.3), 10.0);
        assert_eq!(nice_max(180.0), 200.0);
        assert_eq!(nice_max(0.22), 0.25);
    }
}
