//! Line charts as SVG files, for benchmark reports.
//!
//! One function, [`line_chart`]: named series of (x, y) points, optionally on a logarithmic x
//! axis, written with plotters' SVG backend (no fonts needed: text is left to the viewer).

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::io;
use std::path::Path;

/// One named line of a chart.
pub type Series = (String, Vec<(f64, f64)>);

/// Chart size in pixels.
const WIDTH: u32 = 900;
const HEIGHT: u32 = 600;

/// Draws `series` as lines with point markers into the SVG file `path`. With `log_x` the
/// x axis is logarithmic with ticks at powers of 2 (points with x <= 0 are dropped). Points that are not finite are
/// dropped; empty series still get a legend entry. The y axis starts at 0 unless values are
/// negative.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    log_x: bool,
    series: &[Series],
) -> io::Result<()> {
    let clean: Vec<Series> = series
        .iter()
        .map(|(name, pts)| {
            let pts = pts
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_x || *x > 0.0))
                .collect();
            (name.clone(), pts)
        })
        .collect();
    let xs = clean.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
    let ys = clean.iter().flat_map(|(_, p)| p.iter().map(|q| q.1));
    let (mut x0, mut x1) = bounds(xs).unwrap_or((1.0, 10.0));
    let (y0, y1) = bounds(ys).unwrap_or((0.0, 1.0));
    if x1 <= x0 {
        x1 = x0 * 2.0 + 1.0;
    }
    if log_x {
        x0 = x0.max(f64::MIN_POSITIVE);
    }
    let y0 = y0.min(0.0);
    let y1 = if y1 > y0 { y1 * 1.08 } else { y0 + 1.0 };
    let r = if log_x {
        draw(
            path,
            title,
            x_label,
            y_label,
            (x0..x1).log_scale().base(2.0),
            y0..y1,
            &clean,
        )
    } else {
        draw(path, title, x_label, y_label, x0..x1, y0..y1, &clean)
    };
    r.map_err(|e| io::Error::other(format!("{}: {e}", path.display())))
}

/// Smallest and largest value, if any.
fn bounds(v: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    v.fold(None, |acc, x| match acc {
        None => Some((x, x)),
        Some((a, b)) => Some((a.min(x), b.max(x))),
    })
}

fn draw<X>(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    x: X,
    y: std::ops::Range<f64>,
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error>>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|v| short_number(*v))
        .draw()?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Axis tick text: 1472, 8K, 64K, 10000, 0.5.
fn short_number(v: f64) -> String {
    let a = v.abs();
    if a >= 8192.0 && a % 1024.0 == 0.0 {
        format!("{}K", trim(v / 1024.0))
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_log_x_svg() {
        let dir = std::env::temp_dir().join(format!("slipstream-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("chart.svg");
        let series = vec![
            (
                "plain".to_string(),
                vec![(32.0, 0.1), (1472.0, 6.9), (65507.0, 20.0)],
            ),
            ("gso".to_string(), vec![(32.0, 0.2), (1472.0, f64::NAN)]),
            ("empty".to_string(), vec![]),
        ];
        line_chart(
            &path,
            "Throughput",
            "payload bytes",
            "Gbit/s",
            true,
            &series,
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("plain") && svg.contains("gso") && svg.contains("Throughput"));
        line_chart(&path, "linear", "x", "y", false, &[]).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 100);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tick_text() {
        assert_eq!(short_number(1472.0), "1472");
        assert_eq!(short_number(65536.0), "64K");
        assert_eq!(short_number(10000.0), "10000");
        assert_eq!(short_number(65507.0), "65507");
        assert_eq!(short_number(0.5), "0.5");
    }
}
