//! chart.png: records/s against threads for push and for pop: tvmq, Boost
//! mq, crossbeam, DPDK rte_ring (RTS and MP/MC) and STVM's figures.

use crate::cell::{Cell, LatencyCell};
use crate::latency::GAPS;
use plotters::chart::SeriesLabelStyle;
use plotters::prelude::*;
use std::path::Path;

/// A line of the chart: its name, colour and points (threads, M records/s).
type Line<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// Fonts tried for the labels (plotters draws text with a TrueType font).
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

pub(crate) fn load_font() -> Result<(), String> {
    let path =
        FONTS.iter().find(|p| Path::new(p).exists()).ok_or("no DejaVuSans.ttf found (install fonts-dejavu-core)")?;
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into_boxed_slice()))
        .map_err(|_| format!("{path}: not a usable font"))
}

/// Draws `points` as a line with a dot at each, named `name` in the legend.
pub(crate) fn draw_line<DB: DrawingBackend, CT: CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'_, DB, CT>,
    name: &str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    chart
        .draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))
        .map_err(|x| e(&x))?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(|x| e(&x))?;
    Ok(())
}

/// The legend of `chart`, in a white, half-transparent box with a black
/// border; its position and font are the caller's.
pub(crate) fn legend<'a, 'b, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &'b mut ChartContext<'a, DB, CT>,
) -> SeriesLabelStyle<'a, 'b, DB, CT> {
    let mut style = chart.configure_series_labels();
    style.background_style(WHITE.mix(0.8)).border_style(BLACK);
    style
}

fn series(cells: &[Cell], test: &str, subject: &str) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = cells
        .iter()
        .filter(|c| c.section == "threads" && c.test == test && c.subject == subject && c.error.is_none())
        .filter_map(|c| Some((c.param.parse::<f64>().ok()?, c.rates()?.0 / 1e6)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

pub(crate) fn draw(cells: &[Cell], path: &Path, stvm: &[Vec<(f64, f64)>; 2]) -> Result<(), String> {
    load_font()?;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let panels = root.split_evenly((1, 2));
    let subjects: [(&str, RGBColor); 5] = [
        ("tvmq", RGBColor(200, 30, 30)),
        ("Boost mq", RGBColor(30, 90, 200)),
        ("crossbeam", RGBColor(30, 150, 60)),
        ("DPDK RTS", RGBColor(230, 140, 0)),
        ("DPDK MP/MC", RGBColor(150, 60, 170)),
    ];
    for (i, (panel, test)) in panels.iter().zip(["push", "pop"]).enumerate() {
        let mut all: Vec<Vec<(f64, f64)>> = subjects.iter().map(|(s, _)| series(cells, test, s)).collect();
        let stvm_m: Vec<(f64, f64)> = stvm[i].iter().map(|&(x, r)| (x, r / 1e6)).collect();
        all.push(stvm_m.clone());
        let top = all.iter().flatten().map(|p| p.1).fold(1.0, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{test}, 304-byte records"), ("sans-serif", 22))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0.5f64..10.5f64, 0f64..top)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("threads")
            .y_desc("million records / s")
            .x_labels(11)
            .x_label_formatter(&|x| if [1.0, 2.0, 4.0, 10.0].contains(x) { format!("{x:.0}") } else { String::new() })
            .draw()
            .map_err(|x| e(&x))?;
        let mut lines: Vec<Line> = subjects.iter().zip(all.iter()).map(|((s, c), v)| (*s, *c, v.clone())).collect();
        lines.push(("STVM (docs/stvm.md)", RGBColor(120, 120, 120), stvm_m));
        for (name, color, points) in lines {
            if points.is_empty() {
                continue;
            }
            draw_line(&mut chart, name, color, points)?;
        }
        legend(&mut chart).position(SeriesLabelPosition::LowerRight).draw().map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))
}

/// latency.png: p50, p99, p99.9 and max of each subject, one panel per gap,
/// on a logarithmic scale of microseconds.
pub(crate) fn draw_latency(cells: &[LatencyCell], path: &Path) -> Result<(), String> {
    load_font()?;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::new(path, (1500, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let colors = [
        RGBColor(200, 30, 30),
        RGBColor(240, 140, 20),
        RGBColor(120, 120, 120),
        RGBColor(30, 90, 200),
        RGBColor(30, 150, 60),
        RGBColor(140, 60, 160),
        RGBColor(170, 90, 40),
        RGBColor(20, 170, 180),
    ];
    let mut subjects: Vec<&str> = Vec::new();
    for c in cells {
        if !subjects.contains(&c.subject) {
            subjects.push(c.subject);
        }
    }
    let top = cells.iter().filter_map(|c| c.percentiles()).map(|p| p[3]).fold(10.0, f64::max) * 2.0;
    for (panel, gap) in root.split_evenly((1, 3)).iter().zip(GAPS) {
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("a record every {gap} us"), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..3.2f64, (0.05f64..top).log_scale())
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("percentile")
            .y_desc("microseconds")
            .x_labels(4)
            .x_label_formatter(&|x| {
                ["p50", "p99", "p99.9", "max"].get(x.round() as usize).copied().unwrap_or("").into()
            })
            .draw()
            .map_err(|x| e(&x))?;
        for (i, s) in subjects.iter().enumerate() {
            let Some(p) = cells.iter().find(|c| c.gap_us == gap && c.subject == *s).and_then(|c| c.percentiles())
            else {
                continue;
            };
            let color = colors[i % colors.len()];
            let points: Vec<(f64, f64)> = p.iter().enumerate().map(|(k, &v)| (k as f64, v.max(0.05))).collect();
            draw_line(&mut chart, s, color, points)?;
        }
        legend(&mut chart)
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))
}
