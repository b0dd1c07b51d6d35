//! The validation plot: measured mean and φ-percentile over the model's curves, against the mean
//! inter-arrival period (study B's Figures 8–10 layout), as SVG.

use std::path::Path;

use plotters::prelude::*;
use rtslice_model::predict_bandwidth;

use super::validate::{scenario, ValidationReport};
use super::{Result, ValidationError};

pub fn write_svg(report: &ValidationReport, path: &Path) -> Result<()> {
    draw(report, path).map_err(|e| ValidationError::Invalid(format!("cannot draw {}: {e}", path.display())))
}

fn draw(report: &ValidationReport, path: &Path) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let e = &report.experiment;
    let xs_ms: Vec<f64> = report.points.iter().map(|p| p.interarrival_s * 1e3).collect();
    let (xmin, xmax) = xs_ms.iter().fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
    let (xmin, xmax) = (xmin / 1.3, xmax * 1.3);
    // The model curve, dense and log-spaced over the swept range.
    let curve: Vec<(f64, f64, f64)> = (0..=80)
        .filter_map(|i| {
            let x = xmin * (xmax / xmin).powf(i as f64 / 80.0);
            let sc = scenario(e, std::time::Duration::from_secs_f64(x / 1e3), report.one_way_delay_s);
            predict_bandwidth(&sc, e.bandwidth, e.phi).ok().map(|p| (x, p.mean_s * 1e3, p.percentile_s * 1e3))
        })
        .collect();
    // The model with the server's measured per-request overhead (mean over the points) added.
    let overheads: Vec<f64> = report.points.iter().filter_map(|p| p.server_overhead_s).collect();
    let corrected: Vec<(f64, f64, f64)> = if overheads.is_empty() {
        Vec::new()
    } else {
        let o = overheads.iter().sum::<f64>() / overheads.len() as f64;
        (0..=80)
            .filter_map(|i| {
                let x = xmin * (xmax / xmin).powf(i as f64 / 80.0);
                let mut sc = scenario(e, std::time::Duration::from_secs_f64(x / 1e3), report.corrected_one_way_delay_s);
                sc.mu = 1.0 / (1.0 / sc.mu + o);
                predict_bandwidth(&sc, e.bandwidth, e.phi).ok().map(|p| (x, p.mean_s * 1e3, p.percentile_s * 1e3))
            })
            .collect()
    };
    let ys = report
        .points
        .iter()
        .flat_map(|p| [p.measured.mean_s * 1e3, p.measured_percentile_s * 1e3])
        .chain(curve.iter().chain(corrected.iter()).flat_map(|c| [c.1, c.2]));
    let (ymin, ymax) = ys.fold((f64::INFINITY, 0.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let (ymin, ymax) = (ymin.max(1e-3) / 1.5, ymax * 1.5);

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "{}: LD {} · Q/P {} · P {} ms · {} · {} B",
        e.name,
        e.load,
        e.bandwidth,
        e.period.as_secs_f64() * 1e3,
        super::mechanism_label(e.mechanism),
        e.request_bytes
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((xmin..xmax).log_scale(), (ymin..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("mean inter-arrival period (ms)")
        .y_desc("round-trip time (ms)")
        .draw()?;
    let pct = format!("p{}", e.phi * 100.0);
    chart
        .draw_series(LineSeries::new(curve.iter().map(|c| (c.0, c.1)), BLUE.stroke_width(2)))?
        .label("model mean")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(curve.iter().map(|c| (c.0, c.2)), RED.stroke_width(2)))?
        .label(format!("model {pct}"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED.stroke_width(2)));
    if !corrected.is_empty() {
        let light_blue = BLUE.mix(0.45);
        let light_red = RED.mix(0.45);
        chart
            .draw_series(DashedLineSeries::new(corrected.iter().map(|c| (c.0, c.1)), 6, 4, light_blue.stroke_width(2)))?
            .label("model + measured overhead, mean")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], light_blue.stroke_width(2)));
        chart
            .draw_series(DashedLineSeries::new(corrected.iter().map(|c| (c.0, c.2)), 6, 4, light_red.stroke_width(2)))?
            .label(format!("model + measured overhead, {pct}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], light_red.stroke_width(2)));
    }
    chart
        .draw_series(report.points.iter().map(|p| Circle::new((p.interarrival_s * 1e3, p.measured.mean_s * 1e3), 5, BLUE.filled())))?
        .label("measured mean")
        .legend(|(x, y)| Circle::new((x + 10, y), 5, BLUE.filled()));
    chart
        .draw_series(
            report
                .points
                .iter()
                .map(|p| TriangleMarker::new((p.interarrival_s * 1e3, p.measured_percentile_s * 1e3), 6, RED.filled())),
        )?
        .label(format!("measured {pct}"))
        .legend(|(x, y)| TriangleMarker::new((x + 10, y), 6, RED.filled()));
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(())
}
