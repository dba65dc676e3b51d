//! The list query parameters of RabbitMQ's management API: `name` and `use_regex` filter,
//! `sort` and `sort_reverse` order, `page` and `page_size` page (answering with the paged
//! envelope), `columns` keeps only the named (dotted) fields.

use std::cmp::Ordering;
use std::collections::HashMap;

use serde_json::{json, Map, Value as Json};

use crate::error::ApiError;

/// Largest page RabbitMQ serves.
const PAGE_SIZE_MAX: usize = 500;
const PAGE_SIZE_DEFAULT: usize = 100;

pub type Params = HashMap<String, String>;

/// Applies the query parameters to a list of items (objects), sorted by `default_sort` when
/// the request names no sort key.
pub fn list(
    mut items: Vec<Json>,
    params: &Params,
    default_sort: &[&str],
) -> Result<Json, ApiError> {
    let total_count = items.len();
    let sort_keys: Vec<String> = match params.get("sort").filter(|s| !s.is_empty()) {
        Some(keys) => keys.split(',').map(str::to_string).collect(),
        None => default_sort.iter().map(|k| k.to_string()).collect(),
    };
    items.sort_by(|a, b| compare_by(a, b, &sort_keys));
    if is_true(params.get("sort_reverse")) {
        items.reverse();
    }
    let Some(page) = params.get("page") else {
        return Ok(Json::Array(project(items, params)));
    };
    items = filter_by_name(items, params)?;
    let page: usize = page
        .parse()
        .ok()
        .filter(|p| *p >= 1)
        .ok_or_else(|| ApiError::bad_request(format!("invalid page number {page}")))?;
    let page_size: usize = match params.get("page_size") {
        Some(size) => size
            .parse()
            .ok()
            .filter(|s| (1..=PAGE_SIZE_MAX).contains(s))
            .ok_or_else(|| {
                ApiError::bad_request(format!("page_size must be 1 to {PAGE_SIZE_MAX}"))
            })?,
        None => PAGE_SIZE_DEFAULT,
    };
    let filtered_count = items.len();
    let page_count = filtered_count.div_ceil(page_size).max(1);
    if page > page_count {
        return Err(ApiError::bad_request(format!(
            "page out of range, page: {page} page size: {page_size}, len: {filtered_count}"
        )));
    }
    let page_items: Vec<Json> = items
        .into_iter()
        .skip((page - 1) * page_size)
        .take(page_size)
        .collect();
    Ok(json!({
        "filtered_count": filtered_count,
        "item_count": page_items.len(),
        "items": project(page_items, params),
        "page": page,
        "page_count": page_count,
        "page_size": page_size,
        "total_count": total_count,
    }))
}

/// Keeps only the `columns` fields of one object (for single-object GETs as well).
pub fn project_one(item: Json, params: &Params) -> Json {
    project(vec![item], params).pop().unwrap_or(Json::Null)
}

fn is_true(value: Option<&String>) -> bool {
    value.is_some_and(|v| v == "true")
}

fn filter_by_name(items: Vec<Json>, params: &Params) -> Result<Vec<Json>, ApiError> {
    let Some(pattern) = params.get("name").filter(|n| !n.is_empty()) else {
        return Ok(items);
    };
    let name_of = |item: &Json| {
        item.get("name")
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_string()
    };
    if is_true(params.get("use_regex")) {
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|error| ApiError::bad_request(format!("invalid regex: {error}")))?;
        Ok(items
            .into_iter()
            .filter(|i| regex.is_match(&name_of(i)))
            .collect())
    } else {
        Ok(items
            .into_iter()
            .filter(|i| name_of(i).contains(pattern.as_str()))
            .collect())
    }
}

fn compare_by(a: &Json, b: &Json, keys: &[String]) -> Ordering {
    keys.iter()
        .map(|key| compare_values(lookup(a, key), lookup(b, key)))
        .find(|order| *order != Ordering::Equal)
        .unwrap_or(Ordering::Equal)
}

fn compare_values(a: Option<&Json>, b: Option<&Json>) -> Ordering {
    match (a, b) {
        (Some(Json::Number(x)), Some(Json::Number(y))) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
        (Some(Json::String(x)), Some(Json::String(y))) => x.cmp(y),
        (Some(Json::Bool(x)), Some(Json::Bool(y))) => x.cmp(y),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        _ => Ordering::Equal,
    }
}

/// A dotted path into an object (`message_stats.publish`).
fn lookup<'a>(item: &'a Json, path: &str) -> Option<&'a Json> {
    path.split('.').try_fold(item, |value, key| value.get(key))
}

fn project(items: Vec<Json>, params: &Params) -> Vec<Json> {
    let Some(columns) = params.get("columns").filter(|c| !c.is_empty()) else {
        return items;
    };
    let paths: Vec<&str> = columns.split(',').map(str::trim).collect();
    items
        .into_iter()
        .map(|item| {
            let mut out = Json::Object(Map::new());
            for path in &paths {
                if let Some(value) = lookup(&item, path) {
                    insert_path(&mut out, path, value.clone());
                }
            }
            out
        })
        .collect()
}

fn insert_path(out: &mut Json, path: &str, value: Json) {
    let mut keys = path.split('.').peekable();
    let mut current = out;
    while let Some(key) = keys.next() {
        let Json::Object(map) = current else { return };
        if keys.peek().is_none() {
            map.insert(key.to_string(), value);
            return;
        }
        current = map
            .entry(key.to_string())
            .or_insert_with(|| Json::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Vec<Json> {
        (1..=5)
            .map(|i| json!({"name": format!("q{i}"), "vhost": "/", "messages": 10 - i}))
            .collect()
    }

    #[test]
    fn pages_sorts_and_projects() {
        let params: Params = [
            ("page", "2"),
            ("page_size", "2"),
            ("sort", "messages"),
            ("columns", "name"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let out = list(items(), &params, &["name"]).unwrap();
        assert_eq!(out["page_count"], 3);
        assert_eq!(out["total_count"], 5);
        assert_eq!(out["items"], json!([{"name": "q3"}, {"name": "q2"}]));
    }

    #[test]
    fn filters_by_regex_only_when_paged() {
        let params: Params = [("page", "1"), ("name", "^q[12]$"), ("use_regex", "true")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let out = list(items(), &params, &["name"]).unwrap();
        assert_eq!(out["filtered_count"], 2);
        assert_eq!(out["items"][1]["name"], "q2");
    }
}
