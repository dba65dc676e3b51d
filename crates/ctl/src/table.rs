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
        Some(Value::Array(items))
            if items
                .iter()
                .all(|item| !item.is_array() && !item.is_object()) =>
        {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn table_aligns_columns() {
        let table = format_table(
            &["name", "messages"],
            &[
                vec!["q1".to_string(), "0".to_string()],
                vec!["a-longer-name".to_string(), "12345678901".to_string()],
            ],
        );
        let expected = "\
+---------------+-------------+
| name          | messages    |
+---------------+-------------+
| q1            | 0           |
| a-longer-name | 12345678901 |
+---------------+-------------+
";
        assert_eq!(table, expected);
    }

    #[test]
    fn table_counts_characters_and_flattens_newlines() {
        let table = format_table(&["k"], &[vec!["é\nx".to_string()], vec![]]);
        assert_eq!(
            table,
            "+-----+\n| k   |\n+-----+\n| é x |\n|     |\n+-----+\n"
        );
    }

    #[test]
    fn cells_from_json() {
        assert_eq!(cell(None), "");
        assert_eq!(cell(Some(&json!(null))), "");
        assert_eq!(cell(Some(&json!("x"))), "x");
        assert_eq!(cell(Some(&json!(true))), "true");
        assert_eq!(cell(Some(&json!(1.5))), "1.5");
        assert_eq!(
            cell(Some(&json!(["administrator", "monitoring"]))),
            "administrator,monitoring"
        );
        assert_eq!(cell(Some(&json!({"max-length": 5}))), r#"{"max-length":5}"#);
        assert_eq!(cell(Some(&json!([{"a": 1}]))), r#"[{"a":1}]"#);
    }

    #[test]
    fn items_walk_dotted_fields_and_tolerate_odd_json() {
        let columns: &[Column] = &[("queue", "queue.name"), ("tag", "consumer_tag")];
        let items = json!([{"queue": {"name": "q1"}, "consumer_tag": "c1"}, {"queue": 3}, 7]);
        assert_eq!(
            format_items(&items, columns),
            "+-------+-----+\n| queue | tag |\n+-------+-----+\n| q1    | c1  |\n\
             |       |     |\n|       |     |\n+-------+-----+\n"
        );
        assert_eq!(format_items(&json!([]), columns), "No items\n");
        assert_eq!(format_items(&json!(null), columns), "No items\n");
        assert!(format_items(&json!({"queue": {"name": "x"}}), columns).contains("| x "));
    }
}
