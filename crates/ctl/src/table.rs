//! Table output in the style of rabbitmqadmin's `-f table`, and the text of JSON values in
//! table cells.

use serde_json::Value;

use crate::plan::Column;

/// A boxed table with aligned columns; widths count characters. Newlines and tabs in
/// cells become spaces so that every row stays on one line.
pub fn format_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let clean = |cell: &str| cell.replace(['\n', '\r', '\t'], " ");
    let headers: Vec<String> = headers.iter().map(|h| clean(h)).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| clean(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let rule: String = widths
        .iter()
        .map(|w| format!("+{}", "-".repeat(w + 2)))
        .collect::<String>()
        + "+\n";
    let line = |cells: &[String]| {
        let mut out = String::new();
        for (i, width) in widths.iter().enumerate() {
            let cell = cells.get(i).map(String::as_str).unwrap_or("");
            let pad = width - cell.chars().count().min(*width);
            out.push_str(&format!("| {cell}{} ", " ".repeat(pad)));
        }
        out + "|\n"
    };
    let mut out = rule.clone();
    out.push_str(&line(&headers));
    out.push_str(&rule);
    for row in &rows {
        out.push_str(&line(row));
    }
    out.push_str(&rule);
    out
}

/// The field at a dotted path (`queue.name`), if any.
pub fn field<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |value, key| value.get(key))
}

/// A JSON value as a table cell: strings bare, null empty, arrays of scalars joined with
/// commas, other arrays and objects as compact JSON.
pub fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Bool(flag)) => flag.to_string(),
        Some(Value::Number(number)) => number.to_string(),
        Some(Value::Array(items)) if items.iter().all(|item| !item.is_array() && !item.is_object()) => {
            items
                .iter()
                .map(|item| cell(Some(item)))
                .collect::<Vec<_>>()
                .join(",")
        }
        Some(other) => other.to_string(),
    }
}

/// A JSON array of objects as a table with these columns; "No items" when it is empty.
pub fn format_items(items: &Value, columns: &[Column]) -> String {
    let empty = Vec::new();
    let items = match items {
        Value::Array(items) => items,
        Value::Null => &empty,
        // One object (some APIs answer with an object): one row.
        other => return format_items(&Value::Array(vec![other.clone()]), columns),
    };
    if items.is_empty() {
        return "No items\n".to_string();
    }
    let headers: Vec<&str> = columns.iter().map(|(header, _)| *header).collect();
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|item| {
            columns
                .iter()
                .map(|(_, path)| cell(field(item, path)))
                .collect()
        })
        .collect();
    format_table(&headers, &rows)
}
