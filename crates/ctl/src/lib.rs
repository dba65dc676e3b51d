//! `warren ctl`: the operator CLI. It drives a broker through RabbitMQ's management HTTP API,
//! which Warren answers too, so the same commands work against Warren and RabbitMQ.
//!
//! Layout: `cli` is the command line; `plan` maps it to requests (pure, unit-tested);
//! `http` sends them; `table` and `render` turn answers into text (pure, unit-tested).

pub mod cli;
pub mod http;
pub mod plan;
pub mod pretty;
pub mod render;
pub mod table;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use serde_json::Value;

use crate::cli::Cli;
use crate::http::{Client, Response, Target};
use crate::plan::{Method, Output, Plan, Request};

/// Runs `warren ctl` with the arguments after `ctl`.
pub fn main(args: Vec<String>) -> ExitCode {
    let cli = match Cli::try_parse_from(std::iter::once("warren ctl".to_string()).chain(args)) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    match run(&cli) {
        Ok(Outcome { text, failed }) => {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
            if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("warren ctl: {error}");
            ExitCode::FAILURE
        }
    }
}

/// What a command prints, and whether it exits with 1 although the API answered (alarms).
pub struct Outcome {
    pub text: String,
    pub failed: bool,
}

impl Outcome {
    fn ok(text: String) -> Outcome {
        Outcome {
            text,
            failed: false,
        }
    }
}

/// Flags override WARREN_CTL_URL (or --url), which overrides the defaults.
pub fn target(cli: &Cli, env_url: Option<String>) -> Result<Target, String> {
    let mut target = match cli.url.clone().or(env_url).filter(|url| !url.is_empty()) {
        Some(url) => http::parse_url(&url)?,
        None => Target::default(),
    };
    if let Some(host) = &cli.host {
        target.host = host.clone();
    }
    if let Some(port) = cli.port {
        target.port = port;
    }
    if let Some(user) = &cli.user {
        target.user = user.clone();
    }
    if let Some(password) = &cli.password {
        target.password = password.clone();
    }
    Ok(target)
}

fn run(cli: &Cli) -> Result<Outcome, String> {
    let plan = plan::plan(cli)?;
    let client = Client::new(target(cli, std::env::var("WARREN_CTL_URL").ok())?);
    match plan {
        Plan::Call { request, output } => call(&client, &request, &output, cli.json),
        Plan::DeleteBinding { list, routing_key } => {
            let bindings = parse(&list, &checked(&list, client.send(&list, None)?)?)?;
            let Some(props) = plan::binding_props_key(&bindings, &routing_key) else {
                return Err(format!(
                    "no binding with routing key '{routing_key}' at {}",
                    list.path
                ));
            };
            let delete = Request {
                method: Method::Delete,
                path: format!("{}/{}", list.path, plan::encode(props)),
                body: None,
            };
            checked(&delete, client.send(&delete, None)?)?;
            Ok(Outcome::ok(format!(
                "binding with routing key '{routing_key}' deleted\n"
            )))
        }
        Plan::Export { request, file } => {
            let body = checked(&request, client.send(&request, None)?)?;
            let text = pretty_json(&request, &body)? + "\n";
            match file {
                None => Ok(Outcome::ok(text)),
                Some(file) => {
                    std::fs::write(&file, text)
                        .map_err(|error| format!("writing {}: {error}", file.display()))?;
                    Ok(Outcome::ok(format!(
                        "definitions exported to {}\n",
                        file.display()
                    )))
                }
            }
        }
        Plan::Import { file } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|error| format!("reading {}: {error}", file.display()))?;
            serde_json::from_str::<Value>(&text)
                .map_err(|error| format!("{}: not JSON: {error}", file.display()))?;
            let request = Request {
                method: Method::Post,
                path: "/api/definitions".to_string(),
                body: None,
            };
            let answer = checked(&request, client.send(&request, Some(&text))?)?;
            Ok(Outcome::ok(if cli.json && !answer.trim().is_empty() {
                answer + "\n"
            } else {
                format!("definitions imported from {}\n", file.display())
            }))
        }
    }
}

fn call(
    client: &Client,
    request: &Request,
    output: &Output,
    json: bool,
) -> Result<Outcome, String> {
    let response = client.send(request, None)?;
    if let Output::Alarms = output {
        // 503 with a JSON body is the answer "alarms in effect".
        let answer = serde_json::from_str::<Value>(&response.body);
        if let (200 | 503, Ok(answer)) = (response.status, answer) {
            let (text, failed) = render::alarms(response.status, &answer);
            let text = if json {
                pretty_json(request, &response.body)? + "\n"
            } else {
                text
            };
            return Ok(Outcome { text, failed });
        }
    }
    let body = checked(request, response)?;
    if json {
        return Ok(Outcome::ok(if body.trim().is_empty() {
            String::new()
        } else {
            pretty_json(request, &body)? + "\n"
        }));
    }
    let text = match output {
        Output::Done(message) => format!("{message}\n"),
        Output::Table(columns) => table::format_items(&parse(request, &body)?, columns),
        Output::Status => render::status(&parse(request, &body)?),
        Output::Routed => render::routed(&parse(request, &body)?),
        Output::Messages => table::format_items(&parse(request, &body)?, plan::MESSAGES),
        Output::Tracking => render::tracking(&parse(request, &body)?),
        Output::Alarms => render::alarms(200, &parse(request, &body)?).0,
    };
    Ok(Outcome::ok(text))
}

/// The body of a 2xx answer, else the error line `METHOD path: status error: reason`.
pub fn checked(request: &Request, response: Response) -> Result<String, String> {
    if (200..300).contains(&response.status) {
        return Ok(response.body);
    }
    Err(error_line(request, response.status, &response.body))
}

pub fn error_line(request: &Request, status: u16, body: &str) -> String {
    let answer: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let text = |key: &str| answer.get(key).map(|v| table::cell(Some(v)));
    let detail = match (text("error"), text("reason")) {
        (Some(error), Some(reason)) => format!("{error}: {reason}"),
        (Some(error), None) => error,
        (None, Some(reason)) => reason,
        (None, None) if body.trim().is_empty() => reason_phrase(status).to_string(),
        (None, None) => body.trim().chars().take(500).collect(),
    };
    format!(
        "{} {}: {status} {detail}",
        request.method.as_str(),
        request.path
    )
}

/// For error answers without a body.
fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        415 => "Unsupported Media Type",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "(empty answer)",
    }
}

fn parse(request: &Request, body: &str) -> Result<Value, String> {
    serde_json::from_str(body).map_err(|error| {
        format!(
            "{} {}: the answer is not JSON ({error}): {}",
            request.method.as_str(),
            request.path,
            body.chars().take(200).collect::<String>()
        )
    })
}

/// The answer's JSON, pretty, in the broker's key order.
fn pretty_json(request: &Request, body: &str) -> Result<String, String> {
    match pretty::pretty(body) {
        Some(text) => Ok(text),
        None => parse(request, body).map(|_| body.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once(&"warren ctl").chain(args)).unwrap()
    }

    #[test]
    fn error_lines_show_rabbitmq_error_and_reason() {
        let request = Request {
            method: Method::Delete,
            path: "/api/queues/%2F/nope".to_string(),
            body: None,
        };
        assert_eq!(
            error_line(
                &request,
                404,
                r#"{"error":"Object Not Found","reason":"Not Found"}"#
            ),
            "DELETE /api/queues/%2F/nope: 404 Object Not Found: Not Found"
        );
        assert_eq!(
            error_line(&request, 500, "<html>oops</html>"),
            "DELETE /api/queues/%2F/nope: 500 <html>oops</html>"
        );
        assert_eq!(
            error_line(&request, 406, ""),
            "DELETE /api/queues/%2F/nope: 406 Not Acceptable"
        );
        assert_eq!(
            error_line(&request, 400, r#"{"error":"bad_request","reason":{"x":1}}"#),
            r#"DELETE /api/queues/%2F/nope: 400 bad_request: {"x":1}"#
        );
    }

    #[test]
    fn flags_override_the_url() {
        let from_env = Some("http://admin:pw@10.0.0.1:15000".to_string());
        assert_eq!(target(&cli(&["status"]), None).unwrap(), Target::default());
        let t = target(&cli(&["status"]), from_env.clone()).unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.user.as_str()),
            ("10.0.0.1", 15000, "admin")
        );
        let t = target(
            &cli(&["-u", "bob", "-p", "x", "status", "--port", "1"]),
            from_env,
        )
        .unwrap();
        assert_eq!(
            (
                t.host.as_str(),
                t.port,
                t.user.as_str(),
                t.password.as_str()
            ),
            ("10.0.0.1", 1, "bob", "x")
        );
    }

    #[test]
    fn alarms_and_routed() {
        assert_eq!(
            render::alarms(200, &json!({"status": "ok"})),
            ("no alarms in effect\n".to_string(), false)
        );
        let (text, failed) = render::alarms(
            503,
            &json!({"status": "failed", "reason": "resource alarm(s) in effect",
                "alarms": [{"node": "rabbit@h", "resource": "disk"}]}),
        );
        assert!(failed);
        assert!(text.contains("resource alarm(s) in effect"));
        assert!(text.contains("| rabbit@h | disk     |"));
        assert_eq!(render::routed(&json!({"routed": false})), "routed: false\n");
        assert!(render::routed(&json!([1])).starts_with("unexpected answer"));
    }

    #[test]
    fn status_survives_odd_overviews() {
        let text = render::status(
            &json!({"product_name": "RabbitMQ", "product_version": "4.0.9",
            "warren_product": "Warren", "warren_version": "0.1.0",
            "node": "warren@h", "queue_totals": {"messages": 3},
            "object_totals": {"queues": 2}, "listeners": [{"protocol": "amqp", "port": 5672}]}),
        );
        assert!(text.contains("RabbitMQ 4.0.9 (Warren 0.1.0)"));
        assert!(text.contains("messages=3 messages_ready=0"));
        assert!(text.contains("queues=2"));
        assert!(text.contains("| amqp     |"));
        assert!(render::status(&json!([])).contains("No items"));
    }
}
