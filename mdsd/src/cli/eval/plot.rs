//! Acceptance against n (on a log2 axis, ticked at the n run), one line per
//! scheme and verifier (plotters), as PNG or SVG by the file's extension:
//! alpha* solid, verifiers dashed (so shown in the legend too), sampled
//! means with their 99% error bars, colours of the Okabe-Ito palette, which
//! stay apart on white and for colour-blind readers.

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
    /// The 99% half-width of each point, for sampled means.
    pub half_widths: Option<Vec<f64>>,
}

/// Okabe and Ito's colour-blind-safe palette without its yellow, which is
/// faint on white, and a grey after it.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(120, 120, 120),
];

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

/// The pixels of an image's height that are not the plot's: the caption,
/// the x labels and the margins.
const PLOT_FRAME_PX: f64 = 125.0;
/// A legend line's height and the legend's padding, in pixels (16 px text).
const LEGEND_LINE_PX: f64 = 22.0;
const LEGEND_PADDING_PX: f64 = 24.0;

fn chart<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    series: &[Series],
) -> Result<(), String> {
    let error = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    // x is log2 n: the n run double, so they fall evenly.
    let on_axis =
        |s: &Series| -> Vec<(f64, f64)> { s.points.iter().map(|&(n, y)| (n.log2(), y)).collect() };
    let ends = |s: &Series| -> Vec<(f64, f64, f64)> {
        let widths = s.half_widths.clone().unwrap_or_default();
        (s.points.iter().enumerate())
            .map(|(i, &(_, y))| {
                let h = widths
                    .get(i)
                    .copied()
                    .filter(|h| h.is_finite())
                    .unwrap_or(0.0);
                (y, y - h, y + h)
            })
            .collect()
    };
    let mut ticks: Vec<f64> = series.iter().flat_map(on_axis).map(|p| p.0).collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    let (x_lo, x_hi) = (
        ticks.first().copied().unwrap_or(0.0),
        ticks.last().copied().unwrap_or(0.0),
    );
    let (lo, hi) = (series.iter().flat_map(ends))
        .filter(|e| e.0.is_finite())
        .fold((1.0f64, 0.0f64), |(lo, hi), (_, l, h)| {
            (lo.min(l), hi.max(h))
        });
    let margin = ((hi - lo) * 0.08).max(0.01);
    // A band below the lowest point as tall as the legend, which sits in
    // the lower right: no series passes under it. The plot's height is the
    // image's less the caption, the x labels and the margins.
    let plot_height = f64::from(root.dim_in_pixel().1).max(200.0) - PLOT_FRAME_PX;
    let legend_share =
        ((series.len() as f64 * LEGEND_LINE_PX + LEGEND_PADDING_PX) / plot_height).min(0.6);
    let top = (hi + margin).min(1.0);
    let above_band = top - (lo - margin);
    let band = above_band * legend_share / (1.0 - legend_share);
    let y_range = (lo - margin - band)..top;
    root.fill(&WHITE).map_err(error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((x_lo - 0.3)..(x_hi + 0.3), y_range)
        .map_err(error)?;
    // Tick marks at whole powers of two; labelled where an n was run.
    let run = ticks.clone();
    chart
        .configure_mesh()
        .x_desc("n (drafts, log2 axis)")
        .y_desc("mean acceptance")
        .x_labels((x_hi - x_lo).round() as usize + 1)
        .x_label_formatter(&|&x| {
            if run.iter().any(|&t| (t - x).abs() < 1e-9) {
                format!("{:.0}", x.exp2())
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y:.3}"))
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(error)?;
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()].to_rgba();
        let style = color.stroke_width(2);
        let points = on_axis(s);
        let drawn = if s.dashed {
            let segments = dashes(&points, 12.0);
            chart.draw_series(
                segments
                    .chunks(2)
                    .map(|d| PathElement::new(d.to_vec(), style)),
            )
        } else {
            chart.draw_series(LineSeries::new(points.clone(), style))
        }
        .map_err(error)?;
        // The legend's sample line is drawn as the series is.
        let pieces = if s.dashed {
            [(0, 7), (11, 18), (22, 28)]
        } else {
            [(0, 10), (10, 20), (20, 28)]
        };
        drawn.label(&s.label).legend(move |(x, y)| {
            let piece = |(a, b): (i32, i32)| PathElement::new(vec![(a, 0), (b, 0)], style);
            EmptyElement::at((x, y)) + piece(pieces[0]) + piece(pieces[1]) + piece(pieces[2])
        });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(error)?;
        if s.half_widths.is_some() {
            // A bar from low to high with a cap at each end.
            let cap = 0.04;
            let bars = points.iter().zip(ends(s)).flat_map(|(&(x, _), (_, l, h))| {
                [
                    vec![(x, l), (x, h)],
                    vec![(x - cap, l), (x + cap, l)],
                    vec![(x - cap, h), (x + cap, h)],
                ]
            });
            chart
                .draw_series(bars.map(|bar| PathElement::new(bar, style)))
                .map_err(error)?;
        }
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

/// A polyline cut into dash segments (start, end pairs), `per_unit` pieces
/// per unit of x.
fn dashes(points: &[(f64, f64)], per_unit: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for w in points.windows(2) {
        let (a, b) = (w[0], w[1]);
        let pieces = ((b.0 - a.0) * per_unit).ceil().max(1.0) as usize;
        let at = |t: f64| (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
        for k in (0..pieces).step_by(2) {
            out.push(at(k as f64 / pieces as f64));
            out.push(at(((k + 1) as f64 / pieces as f64).min(1.0)));
        }
    }
    out
}
