//! Acceptance against n, one line per scheme and verifier (plotters), as
//! PNG or SVG by the file's extension.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

/// Text needs a font; plotters' system-font lookup needs fontconfig at
/// build time, so the binary carries DejaVu Sans (its licence is beside it).
const FONT: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");

pub struct Series {
    pub label: String,
    /// (n, mean acceptance).
    pub points: Vec<(f64, f64)>,
    /// Verifiers dashed, alpha* solid.
    pub dashed: bool,
}

pub fn draw(path: &Path, title: &str, series: &[Series]) -> Result<(), String> {
    static REGISTER: Once = Once::new();
    let mut registered = Ok(());
    REGISTER.call_once(|| {
        registered = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| "the built-in font is invalid".to_string());
    });
    registered?;
    let size = (960, 640);
    if path.extension().is_some_and(|e| e == "svg") {
        chart(
            SVGBackend::new(path, size).into_drawing_area(),
            title,
            series,
        )
    } else {
        chart(
            BitMapBackend::new(path, size).into_drawing_area(),
            title,
            series,
        )
    }
}

fn chart<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    series: &[Series],
) -> Result<(), String> {
    let error = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let points = series.iter().flat_map(|s| &s.points);
    let x_max = points.clone().map(|p| p.0).fold(1.0, f64::max);
    let (lo, hi) = points
        .map(|p| p.1)
        .fold((1.0f64, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let margin = ((hi - lo) * 0.08).max(0.01);
    let y_range = (lo - margin).max(0.0)..(hi + margin).min(1.0);
    root.fill(&WHITE).map_err(error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.5..x_max + 0.5, y_range)
        .map_err(error)?;
    chart
        .configure_mesh()
        .x_desc("n (drafts)")
        .y_desc("mean acceptance")
        .x_labels(x_max as usize + 1)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.3}"))
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(error)?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = color.stroke_width(2);
        let line: Vec<(f64, f64)> = if s.dashed {
            dashes(&s.points)
        } else {
            s.points.clone()
        };
        let drawn = if s.dashed {
            chart.draw_series(line.chunks(2).map(|d| PathElement::new(d.to_vec(), style)))
        } else {
            chart.draw_series(LineSeries::new(line, style))
        }
        .map_err(error)?;
        drawn
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(error)?;
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(error)?;
    root.present().map_err(error)
}

/// A polyline cut into dash segments (start, end pairs), 12 per unit of n.
fn dashes(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for w in points.windows(2) {
        let (a, b) = (w[0], w[1]);
        let pieces = ((b.0 - a.0) * 12.0).ceil().max(1.0) as usize;
        let at = |t: f64| (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
        for k in (0..pieces).step_by(2) {
            out.push(at(k as f64 / pieces as f64));
            out.push(at(((k + 1) as f64 / pieces as f64).min(1.0)));
        }
    }
    out
}
