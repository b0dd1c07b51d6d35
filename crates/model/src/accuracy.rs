//! How well predictions match measurements, in study B's Table 3 terms.

use serde::Serialize;

/// Root mean square error, in the unit of the inputs. `None` for empty or mismatched inputs.
pub fn rmse(measured: &[f64], predicted: &[f64]) -> Option<f64> {
    if measured.is_empty() || measured.len() != predicted.len() {
        return None;
    }
    let sum: f64 = measured.iter().zip(predicted).map(|(m, p)| (m - p) * (m - p)).sum();
    Some((sum / measured.len() as f64).sqrt())
}

/// Mean absolute percentage error, in percent, relative to the measurement (as study B reports it).
/// `None` for empty or mismatched inputs or a zero measurement.
pub fn mape(measured: &[f64], predicted: &[f64]) -> Option<f64> {
    if measured.is_empty() || measured.len() != predicted.len() || measured.contains(&0.0) {
        return None;
    }
    let sum: f64 = measured.iter().zip(predicted).map(|(m, p)| ((m - p) / m).abs()).sum();
    Some(100.0 * sum / measured.len() as f64)
}

/// One row of study B's Table 3: RMSE (µs) and MAPE (%) for the mean and the p99.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Accuracy {
    pub mean_rmse_us: f64,
    pub mean_mape_pct: f64,
    pub pct_rmse_us: f64,
    pub pct_mape_pct: f64,
}

impl Accuracy {
    /// From paired (measured, predicted) values in seconds.
    pub fn from_points(
        measured_mean_s: &[f64],
        predicted_mean_s: &[f64],
        measured_pct_s: &[f64],
        predicted_pct_s: &[f64],
    ) -> Option<Accuracy> {
        let us = |v: &[f64]| v.iter().map(|x| x * 1e6).collect::<Vec<_>>();
        let (mm, pm, mp, pp) = (us(measured_mean_s), us(predicted_mean_s), us(measured_pct_s), us(predicted_pct_s));
        Some(Accuracy {
            mean_rmse_us: rmse(&mm, &pm)?,
            mean_mape_pct: mape(&mm, &pm)?,
            pct_rmse_us: rmse(&mp, &pp)?,
            pct_mape_pct: mape(&mp, &pp)?,
        })
    }
}
