//! Drawing [`Series`] as a PNG line chart with plotters' bitmap backend.
//!
//! Text is rendered with ab_glyph from a TrueType file that [`load_font`] reads, so no
//! fontconfig or system font lookup is involved: on Debian the default is DejaVu Sans from
//! the `fonts-dejavu-core` package.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::Series;

/// Where [`load_font`] looks when no font file is named: Debian's fonts-dejavu-core first.
pub const DEFAULT_FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

const FONT: &str = "sans-serif";

/// Line colours, in series order (repeated past the sixth series).
const PALETTE: &[RGBColor] = &[
    RGBColor(0xd6, 0x5f, 0x0e), // orange
    RGBColor(0x1f, 0x6f, 0xb4), // blue
    RGBColor(0x2c, 0x9c, 0x3c), // green
    RGBColor(0xb0, 0x2a, 0x2a), // red
    RGBColor(0x7a, 0x4f, 0xa8), // purple
    RGBColor(0x55, 0x55, 0x55), // grey
];

/// Registers the font used for every text of the chart: `explicit` if given, else the
/// first of [`DEFAULT_FONTS`] that exists.
pub fn load_font(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => match DEFAULT_FONTS.iter().map(Path::new).find(|p| p.is_file()) {
            Some(path) => path.to_path_buf(),
            None => bail!(
                "no font file at {}: install Debian's fonts-dejavu-core \
                 (apt-get install fonts-dejavu-core) or pass --font FILE.ttf",
                DEFAULT_FONTS.join(" or ")
            ),
        },
    };
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "cannot read the font file {} (pass --font FILE.ttf, or install \
             fonts-dejavu-core)",
            path.display()
        )
    })?;
    // plotters keeps registered fonts for the life of the program
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    if register_font(FONT, FontStyle::Normal, bytes).is_err() {
        bail!("{} is not a TrueType or OpenType font", path.display());
    }
    Ok(path)
}

/// Titles and size of a chart.
#[derive(Debug, Clone)]
pub struct Layout {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub width: u32,
    pub height: u32,
}

/// Draws `series` as lines into a PNG file at `out`, with a legend when there is more than
/// one named series and a labelled dot at each mark, on the `axes` given (a linear y axis
/// from zero by default). [`load_font`] must have run.
pub fn draw_png(out: &Path, layout: &Layout, series: &[Series], axes: &Axes) -> anyhow::Result<()> {
    let drawn = render_png(out, layout, series, axes);
    if drawn.is_err() {
        // The backend writes its picture when it is dropped, on an error too: a blank or
        // half-drawn PNG would stand next to the real charts as if it were one.
        let _ = std::fs::remove_file(out);
    }
    drawn
}

fn render_png(out: &Path, layout: &Layout, series: &[Series], axes: &Axes) -> anyhow::Result<()> {
    let root = BitMapBackend::new(out, (layout.width, layout.height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    draw_on(&root, layout, series, axes)?;
    root.present().map_err(plot_error)?;
    Ok(())
}

/// How the axes are drawn. The limits, when set, let charts drawn side by side share their
/// scales; `None` takes the limit from the series.
#[derive(Debug, Clone, Copy, Default)]
pub struct Axes {
    pub x: Option<(f64, f64)>,
    /// Top of the y axis (headroom for the legend is added above it).
    pub y_max: Option<f64>,
    /// Bottom of a logarithmic y axis (a linear one starts at zero); `None`: half the
    /// smallest positive value.
    pub y_min_log: Option<f64>,
    /// A logarithmic y axis (latencies that span several decades); values at or below zero
    /// are drawn at the axis' bottom.
    pub log_y: bool,
}

/// Draws `series` as a chart filling `area` (one panel of a larger picture; `layout`'s width
/// and height are not used). The caller fills the background and presents the picture.
pub fn draw_on(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    layout: &Layout,
    series: &[Series],
    axes: &Axes,
) -> anyhow::Result<()> {
    let legend = series.iter().any(|s| !s.name.is_empty());
    // room above the highest point for mark labels, and for the legend box if any
    let headroom = if legend { 0.25 } else { 0.1 };
    let (mut x_range, mut y_range) = ranges(series, headroom)?;
    if let Some((x0, x1)) = axes.x.filter(|(x0, x1)| x1 > x0) {
        x_range = x0..x1;
    }
    if let Some(y_max) = axes.y_max.filter(|y| *y > y_range.start) {
        y_range = y_range.start..y_range.start + (y_max - y_range.start) * (1.0 + headroom);
    }
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&layout.title, (FONT, 26))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(85);
    if !axes.log_y {
        let chart = builder
            .build_cartesian_2d(x_range, y_range)
            .map_err(plot_error)?;
        return draw_lines(chart, layout, series, legend, 0.0);
    }
    let floor = axes
        .y_min_log
        .filter(|y| *y > 0.0)
        .unwrap_or_else(|| log_floor(series));
    // on a log axis the headroom is a factor: a decade for the legend
    let top = (y_range.end / (1.0 + headroom)).max(floor * 10.0) * if legend { 10.0 } else { 2.0 };
    let y_log = (floor..top).log_scale();
    let chart = builder
        .build_cartesian_2d(x_range, y_log)
        .map_err(plot_error)?;
    draw_lines(chart, layout, series, legend, floor)
}

/// The bottom of a log axis for these series: half the smallest positive value.
pub fn log_floor(series: &[Series]) -> f64 {
    let lowest = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| *y > 0.0)
        .fold(f64::INFINITY, f64::min);
    if lowest.is_finite() {
        lowest / 2.0
    } else {
        1.0
    }
}

/// The mesh, lines, marks and legend, on a linear or logarithmic y axis; y values below
/// `floor` are drawn at it.
fn draw_lines<'a, 'b: 'a, Y>(
    mut chart: ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, Y>>,
    layout: &Layout,
    series: &[Series],
    legend: bool,
    floor: f64,
) -> anyhow::Result<()>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(&layout.x_label)
        .y_desc(&layout.y_label)
        .x_label_formatter(&|v| format_number(*v))
        .y_label_formatter(&|v| format_number(*v))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(plot_error)?;
    for (index, line) in series.iter().enumerate() {
        let colour = PALETTE[index % PALETTE.len()];
        let points = line.points.iter().map(|&(x, y)| (x, y.max(floor)));
        let drawn = chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(plot_error)?;
        if !line.name.is_empty() {
            drawn.label(&line.name).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], colour.stroke_width(3))
            });
        }
        let label_font = (FONT, 14).into_font().color(&colour);
        chart
            .draw_series(line.marks.iter().map(|mark| {
                EmptyElement::at((mark.x, mark.y.max(floor)))
                    + Circle::new((0, 0), 4, colour.filled())
                    + Text::new(mark.label.clone(), (4, -18), label_font.clone())
            }))
            .map_err(plot_error)?;
    }
    if legend {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FONT, 16))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(plot_error)?;
    }
    Ok(())
}

type Range = std::ops::Range<f64>;

/// The x range spans every row's x; the y range starts at 0 (or the lowest value, if
/// negative) and leaves `headroom` (a fraction of the span) above the highest value.
fn ranges(series: &[Series], headroom: f64) -> anyhow::Result<(Range, Range)> {
    let points = || series.iter().flat_map(|s| s.points.iter());
    if points().next().is_none() {
        bail!("nothing to draw: no row has a value in the y column");
    }
    let x0 = series
        .iter()
        .map(|s| s.x_extent.0)
        .fold(f64::INFINITY, f64::min);
    let mut x1 = series
        .iter()
        .map(|s| s.x_extent.1)
        .fold(f64::NEG_INFINITY, f64::max);
    let (mut y0, mut y1) = (0.0_f64, f64::NEG_INFINITY);
    for &(_, y) in points() {
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let span = if y1 > y0 { y1 - y0 } else { 1.0 };
    Ok((x0..x1, y0..y0 + span * (1.0 + headroom)))
}

/// Axis labels: no decimals from 100 up, otherwise at most two, trailing zeros dropped.
fn format_number(value: f64) -> String {
    if value.abs() >= 100.0 || value == value.trunc() {
        return format!("{value:.0}");
    }
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A plotters error as an anyhow error.
pub fn plot_error<E: std::error::Error>(error: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the chart failed: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Columns, Table};

    #[test]
    fn axis_numbers_are_short() {
        assert_eq!(format_number(1500.0), "1500");
        assert_eq!(format_number(123.456), "123");
        assert_eq!(format_number(2.5), "2.5");
        assert_eq!(format_number(0.126), "0.13");
        assert_eq!(format_number(3.0), "3");
    }

    #[test]
    fn ranges_start_at_zero_and_leave_headroom() {
        let series = vec![Series {
            name: String::new(),
            points: vec![(5.0, 10.0), (9.0, 20.0)],
            x_extent: (4.0, 9.0),
            marks: Vec::new(),
        }];
        let (x, y) = ranges(&series, 0.1).unwrap();
        assert_eq!((x.start, x.end), (4.0, 9.0));
        assert_eq!(y.start, 0.0);
        assert!((y.end - 22.0).abs() < 1e-9);
        assert!(ranges(&[], 0.1).is_err());
    }

    fn small_layout(title: &str, x_label: &str, y_label: &str) -> Layout {
        Layout {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            width: 400,
            height: 300,
        }
    }

    #[test]
    fn nothing_to_draw_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("empty.png");
        let error = draw_png(
            &out,
            &small_layout("empty", "x", "y"),
            &[],
            &Axes::default(),
        )
        .unwrap_err();
        assert!(error.to_string().contains("nothing to draw"), "{error}");
        assert!(!out.exists(), "a failed chart left {}", out.display());
    }

    /// Draws a small chart when a default font is installed (it is in CI's Debian image
    /// only if fonts-dejavu-core is), and checks that a PNG came out.
    #[test]
    fn draws_a_png_when_a_font_is_installed() {
        if DEFAULT_FONTS.iter().all(|p| !Path::new(p).is_file()) {
            eprintln!("no default font installed; drawing not tested");
            return;
        }
        load_font(None).unwrap();
        let table = Table::parse("b,t,p,v\nx,0,a,1\nx,1,b,3\ny,0,a,2\ny,1,a,2.5\n").unwrap();
        let series = table
            .series(Columns {
                x: "t",
                y: "v",
                series: Some("b"),
                marks: Some("p"),
            })
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("chart.png");
        draw_png(
            &out,
            &small_layout("test", "t", "v"),
            &series,
            &Axes::default(),
        )
        .unwrap();
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // the same series on a log axis (bench/seeds.sh draws its ratios so), which differs
        // from the linear picture
        let log_out = dir.path().join("chart-log.png");
        let log = Axes {
            log_y: true,
            ..Axes::default()
        };
        draw_png(&log_out, &small_layout("test", "t", "v"), &series, &log).unwrap();
        let log_bytes = std::fs::read(&log_out).unwrap();
        assert_eq!(&log_bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert_ne!(bytes, log_bytes, "the log axis drew the linear chart");
    }
}
