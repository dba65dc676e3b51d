//! `warren-plot`: draws the CSV files that Warren's benchmark scripts write (one row per
//! sample, a header row naming the columns) as PNG line charts, one line per series.
//!
//! [`Table::parse`] reads the CSV, [`Table::series`] picks the x, y, series and mark columns,
//! and [`chart::draw_png`] draws the result.

pub mod chart;

use anyhow::{bail, Context};

/// A CSV file: its header and its rows, every row as long as the header.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One line of the chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The value of the series column shared by its rows (empty without a series column).
    pub name: String,
    /// (x, y) in file order; rows with an empty y are left out.
    pub points: Vec<(f64, f64)>,
    /// The lowest and highest x of the series' rows, those with an empty y included, so
    /// that charts of different columns of one file share their x axis.
    pub x_extent: (f64, f64),
    /// Points where the mark column changes value, labelled with the new value.
    pub marks: Vec<Mark>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub x: f64,
    pub y: f64,
    pub label: String,
}

/// Which columns make the chart: names from the header row.
#[derive(Debug, Clone, Copy)]
pub struct Columns<'a> {
    pub x: &'a str,
    pub y: &'a str,
    /// Rows with the same value here form one line; `None` draws one line of all rows.
    pub series: Option<&'a str>,
    /// A label column (such as a phase) marked on each line wherever its value changes.
    pub marks: Option<&'a str>,
}

impl Table {
    /// Parses CSV text: fields separated by commas, optionally in double quotes (`""` is a
    /// quote inside them), records separated by LF or CRLF. Blank lines are skipped. The
    /// first record is the header.
    pub fn parse(text: &str) -> anyhow::Result<Table> {
        let mut records = Vec::new();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let fields = parse_record(line).with_context(|| format!("line {}", index + 1))?;
            records.push((index + 1, fields));
        }
        let mut records = records.into_iter();
        let Some((_, header)) = records.next() else {
            bail!("no header row: the file is empty");
        };
        let mut rows = Vec::new();
        for (line, fields) in records {
            if fields.len() != header.len() {
                bail!(
                    "line {line} has {} fields, the header has {}",
                    fields.len(),
                    header.len()
                );
            }
            rows.push(fields);
        }
        Ok(Table { header, rows })
    }

    /// The index of the column named `name`.
    pub fn column(&self, name: &str) -> anyhow::Result<usize> {
        self.header.iter().position(|h| h == name).with_context(|| {
            format!(
                "no column {name:?}; the header has: {}",
                self.header.join(", ")
            )
        })
    }

    /// The lines to draw, in order of each series' first row. x must be a number on every
    /// row; y may be empty (the row is skipped) but is otherwise a number.
    pub fn series(&self, columns: Columns<'_>) -> anyhow::Result<Vec<Series>> {
        let x = self.column(columns.x)?;
        let y = self.column(columns.y)?;
        let by = columns.series.map(|name| self.column(name)).transpose()?;
        let marks = columns.marks.map(|name| self.column(name)).transpose()?;
        let mut out: Vec<Series> = Vec::new();
        // per series: the last mark value seen, and a change not yet placed on a point
        let mut mark_state: Vec<(Option<String>, Option<String>)> = Vec::new();
        for (row_index, row) in self.rows.iter().enumerate() {
            let line = row_index + 2;
            let name = by.map_or(String::new(), |i| row[i].clone());
            let slot = match out.iter().position(|s| s.name == name) {
                Some(slot) => slot,
                None => {
                    out.push(Series {
                        name,
                        points: Vec::new(),
                        x_extent: (f64::INFINITY, f64::NEG_INFINITY),
                        marks: Vec::new(),
                    });
                    mark_state.push((None, None));
                    out.len() - 1
                }
            };
            let xv = number(&row[x]).with_context(|| format!("line {line}, {}", columns.x))?;
            let extent = &mut out[slot].x_extent;
            *extent = (extent.0.min(xv), extent.1.max(xv));
            if let Some(m) = marks {
                let (last, pending) = &mut mark_state[slot];
                if last.as_deref() != Some(row[m].as_str()) {
                    *last = Some(row[m].clone());
                    *pending = Some(row[m].clone());
                }
            }
            if row[y].trim().is_empty() {
                continue;
            }
            let yv = number(&row[y]).with_context(|| format!("line {line}, {}", columns.y))?;
            out[slot].points.push((xv, yv));
            if let Some(label) = mark_state[slot].1.take() {
                out[slot].marks.push(Mark {
                    x: xv,
                    y: yv,
                    label,
                });
            }
        }
        Ok(out)
    }
}

fn number(field: &str) -> anyhow::Result<f64> {
    let value: f64 = field
        .trim()
        .parse()
        .with_context(|| format!("{field:?} is not a number"))?;
    if !value.is_finite() {
        bail!("{field:?} is not a finite number");
    }
    Ok(value)
}

fn parse_record(line: &str) -> anyhow::Result<Vec<String>> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() && !was_quoted => {
                quoted = true;
                was_quoted = true;
            }
            (false, ',') => {
                fields.push(std::mem::take(&mut field));
                was_quoted = false;
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        bail!("a quoted field is not closed");
    }
    fields.push(field);
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "broker,second,phase,rss_mib\n\
        rabbitmq,0,idle,100\n\
        rabbitmq,1,publish,150\n\
        warren,0,idle,10\n\
        rabbitmq,2,publish,\n\
        rabbitmq,3,rest,170\n\
        warren,1,publish,20\n";

    fn columns<'a>(series: Option<&'a str>, marks: Option<&'a str>) -> Columns<'a> {
        Columns {
            x: "second",
            y: "rss_mib",
            series,
            marks,
        }
    }

    #[test]
    fn rows_split_by_series_in_order_of_first_appearance() {
        let table = Table::parse(SAMPLE).unwrap();
        let series = table.series(columns(Some("broker"), None)).unwrap();
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].name, "rabbitmq");
        assert_eq!(
            series[0].points,
            vec![(0.0, 100.0), (1.0, 150.0), (3.0, 170.0)]
        );
        assert_eq!(series[1].name, "warren");
        assert_eq!(series[1].points, vec![(0.0, 10.0), (1.0, 20.0)]);
        assert_eq!(series[0].x_extent, (0.0, 3.0), "rows with an empty y count");
    }

    #[test]
    fn without_a_series_column_all_rows_make_one_line() {
        let table = Table::parse(SAMPLE).unwrap();
        let series = table.series(columns(None, None)).unwrap();
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].points.len(), 5);
    }

    #[test]
    fn marks_fall_on_the_first_point_after_each_change() {
        let table = Table::parse(SAMPLE).unwrap();
        let series = table
            .series(columns(Some("broker"), Some("phase")))
            .unwrap();
        let labels: Vec<(f64, &str)> = series[0]
            .marks
            .iter()
            .map(|m| (m.x, m.label.as_str()))
            .collect();
        assert_eq!(labels, vec![(0.0, "idle"), (1.0, "publish"), (3.0, "rest")]);
        assert_eq!(series[1].marks.len(), 2);
    }

    #[test]
    fn quoted_fields_keep_commas_and_quotes() {
        let table = Table::parse("a,b\n\"x, \"\"y\"\"\",2\r\n").unwrap();
        assert_eq!(
            table.rows,
            vec![vec!["x, \"y\"".to_string(), "2".to_string()]]
        );
    }

    #[test]
    fn errors_name_the_line_and_the_column() {
        let table = Table::parse("second,rss_mib\n0,1\nzero,2\n").unwrap();
        let error = table.series(columns(None, None)).unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "line 3, second: \"zero\" is not a number: invalid float literal"
        );
        let error = Table::parse("a,b\n1\n").unwrap_err();
        assert_eq!(error.to_string(), "line 2 has 1 fields, the header has 2");
        let error = table.column("nope").unwrap_err();
        assert_eq!(
            error.to_string(),
            "no column \"nope\"; the header has: second, rss_mib"
        );
    }
}
