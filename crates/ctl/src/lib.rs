//! `warren ctl`: the operator CLI. It drives a broker through RabbitMQ's management HTTP API,
//! which Warren answers too, so the same commands work against Warren and RabbitMQ.
//!
//! Layout: `cli` is the command line; `plan` maps it to requests (pure, unit-tested);
//! `http` sends them; `table` and `render` turn answers into text (pure, unit-tested).

pub mod cli;
pub mod http;
pub mod plan;
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
            let definitions = parse(&request, &checked(&request, client.send(&request, None)?)?)?;
            let text = pretty(&definitions) + "\n";
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

fn call(client: &Client, request: &Request, output: &Output, json: bool) -> Result<Outcome, String> {
    let response = client.send(request, None)?;
    if let Output::Alarms = output {
        // 503 with a JSON body is the answer "alarms in effect".
        if response.status == 200 || response.status == 503 {
            let answer = parse(request, &response.body)?;
            let (text, failed) = render::alarms(response.status, &answer);
            let text = if json { pretty(&answer) + "\n" } else { text };
            return Ok(Outcome { text, failed });
        }
    }
    let body = checked(request, response)?;
    if json {
        return Ok(Outcome::ok(if body.trim().is_empty() {
            String::new()
        } else {
            pretty(&parse(request, &body)?) + "\n"
        }));
    }
    let text = match output {
        Output::Done(message) => format!("{message}\n"),
        Output::Table(columns) => table::format_items(&parse(request, &body)?, columns),
        Output::Status => render::status(&parse(request, &body)?),
        Output::Routed => render::routed(&parse(request, &body)?),
        Output::Messages => table::format_items(&parse(request, &body)?, plan::MESSAGES),
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
        (None, None) => body.trim().chars().take(500).collect(),
    };
    format!(
        "{} {}: {status} {detail}",
        request.method.as_str(),
        request.path
    )
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

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}
