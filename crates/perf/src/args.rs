//! The command line: PerfTest's flags (same names, same meanings) plus this tool's own, read by
//! hand rather than by clap because PerfTest's single-dash flags may have several letters
//! (`-qa`, `-ca`, `-ad`) and `-h` means `--uri` (help is `--help` only).
//!
//! Forms accepted, as PerfTest's command-line library reads them: `-x 2`, `-x2` (one-letter
//! flags only), `--producers 2`, `--producers=2`. A flag that takes no value (`-a`, `-p`) stands
//! alone. Anything else starting with `-` is refused with its name.

use crate::error::PerfError;

/// One flag: its PerfTest names and what it takes.
#[derive(Debug, PartialEq, Eq)]
pub struct Flag {
    /// Without the dash: `"x"`, `"qa"`.
    pub short: Option<&'static str>,
    /// Without the dashes: `"producers"`.
    pub long: &'static str,
    /// The value's placeholder in `--help`; `None` for a switch.
    pub value: Option<&'static str>,
    pub help: &'static str,
}

const fn flag(
    short: &'static str,
    long: &'static str,
    value: &'static str,
    help: &'static str,
) -> Flag {
    Flag {
        short: if short.is_empty() { None } else { Some(short) },
        long,
        value: if value.is_empty() { None } else { Some(value) },
        help,
    }
}

/// Every flag `warren perf` knows, PerfTest's first.
pub const FLAGS: &[Flag] = &[
    flag("h", "uri", "URI", "broker URI [amqp://localhost]"),
    flag("x", "producers", "N", "producer connections [1]"),
    flag("y", "consumers", "N", "consumer connections [1]"),
    flag(
        "X",
        "producer-channel-count",
        "N",
        "channels per producer connection [1]",
    ),
    flag(
        "Y",
        "consumer-channel-count",
        "N",
        "channels per consumer connection [1]",
    ),
    flag("s", "size", "BYTES", "message body size, at least 12 [12]"),
    flag(
        "C",
        "pmessages",
        "N",
        "each producer channel stops after N messages [unlimited]",
    ),
    flag(
        "D",
        "cmessages",
        "N",
        "each consumer channel stops after N messages [unlimited]",
    ),
    flag(
        "z",
        "time",
        "SECONDS",
        "run time [until -C/-D; 60 with --connections]",
    ),
    flag(
        "u",
        "queue",
        "NAME",
        "queue name [a server-named queue per consumer]",
    ),
    flag("e", "exchange", "NAME", "exchange name [direct]"),
    flag("t", "type", "TYPE", "exchange type [direct]"),
    flag(
        "k",
        "routing-key",
        "KEY",
        "routing key [the queue name, else a random key]",
    ),
    flag(
        "K",
        "random-routing-key",
        "",
        "a random routing key for each message (consistent-hash exchanges)",
    ),
    flag(
        "f",
        "flag",
        "FLAG",
        "message flag: persistent or mandatory (repeatable)",
    ),
    flag(
        "c",
        "confirm",
        "N",
        "publisher confirms, at most N unconfirmed per channel",
    ),
    flag("q", "qos", "N", "consumer prefetch count [0: unlimited]"),
    flag(
        "",
        "multi-ack-every",
        "N",
        "ack with multiple=true every N messages",
    ),
    flag("a", "autoack", "", "consume with no-ack (autoack)"),
    flag("r", "rate", "MSG/S", "rate limit per producer channel"),
    flag(
        "R",
        "consumer-rate",
        "MSG/S",
        "rate limit per consumer channel",
    ),
    flag(
        "qa",
        "queue-args",
        "K=V,...",
        "queue arguments (x-max-length=10,x-queue-type=quorum)",
    ),
    flag(
        "ca",
        "consumer-args",
        "K=V,...",
        "consumer arguments (x-priority=10)",
    ),
    flag(
        "p",
        "predeclared",
        "",
        "use existing queues and exchange; declare nothing",
    ),
    flag(
        "",
        "queue-pattern",
        "PATTERN",
        "queue names from a pattern with %d (perf-test-%d)",
    ),
    flag(
        "",
        "queue-pattern-from",
        "N",
        "first number for --queue-pattern",
    ),
    flag(
        "",
        "queue-pattern-to",
        "N",
        "last number for --queue-pattern",
    ),
    flag(
        "ad",
        "auto-delete",
        "BOOL",
        "declare queues auto-delete [true]",
    ),
    flag(
        "b",
        "heartbeat",
        "SECONDS",
        "heartbeat to ask for [0: the broker's, as PerfTest]",
    ),
    flag(
        "i",
        "interval",
        "SECONDS",
        "seconds between report lines [1]",
    ),
    flag("", "id", "ID", "test id in every line [test-HHMMSS-mmm]"),
    flag(
        "",
        "json",
        "FILE",
        "write every sample and the summary as JSON (warren perf)",
    ),
    flag(
        "",
        "chart",
        "FILE.png",
        "draw rates and latency over time (warren perf)",
    ),
    flag(
        "",
        "label",
        "TEXT",
        "name of this run in charts [the broker's host:port]",
    ),
    flag(
        "",
        "sweep",
        "",
        "step the rate from 10% to 110% of the measured maximum",
    ),
    flag(
        "",
        "sweep-step-seconds",
        "SECONDS",
        "length of each sweep step [5]",
    ),
    flag(
        "",
        "connections",
        "N",
        "open N idle connections with 2 channels each; hold -z s",
    ),
    flag(
        "",
        "source-addresses",
        "N",
        "--connections binds to 127.0.0.2.. (N addresses; 0: never) [auto]",
    ),
    flag(
        "",
        "threads",
        "N",
        "worker threads of this tool [the number of cores]",
    ),
    flag("", "max-seconds", "SECONDS", "hard limit on any run [3600]"),
    flag(
        "",
        "verify-order",
        "",
        "fail on a message out of its producer's order (warren perf)",
    ),
];

/// The flags given, in order, with their values (a switch has none).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Given {
    pub flags: Vec<(&'static Flag, Option<String>)>,
}

impl Given {
    /// The last value of the flag named `long` (later flags override earlier ones).
    pub fn value(&self, long: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(f, _)| f.long == long)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Every value of a repeatable flag.
    pub fn values(&self, long: &str) -> Vec<&str> {
        self.flags
            .iter()
            .filter(|(f, _)| f.long == long)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }

    /// Whether a switch was given.
    pub fn switch(&self, long: &str) -> bool {
        self.flags.iter().any(|(f, _)| f.long == long)
    }
}

/// Splits the arguments into flags and values. `--help` is reported as `Ok(None)`.
pub fn tokenize(args: &[String]) -> Result<Option<Given>, PerfError> {
    let mut given = Given::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--help" {
            return Ok(None);
        }
        let (found, inline) = find_flag(arg)?;
        let value = match (found.value, inline) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(PerfError::usage(format!("flag '{arg}' takes no value")));
            }
            (Some(_), Some(value)) => Some(value),
            (Some(placeholder), None) => match rest.next() {
                Some(value) => Some(value.clone()),
                None => {
                    return Err(PerfError::usage(format!(
                        "flag '{arg}' needs a value ({placeholder})"
                    )))
                }
            },
        };
        given.flags.push((found, value));
    }
    Ok(Some(given))
}

/// The flag an argument names, and a value written into it (`--x=1`, `-x1`).
fn find_flag(arg: &str) -> Result<(&'static Flag, Option<String>), PerfError> {
    let unknown = || {
        PerfError::usage(format!(
            "unknown flag '{arg}' (warren perf takes PerfTest's flags; --help lists them)"
        ))
    };
    if let Some(long) = arg.strip_prefix("--") {
        let (name, inline) = match long.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (long, None),
        };
        let found = FLAGS.iter().find(|f| f.long == name).ok_or_else(unknown)?;
        return Ok((found, inline));
    }
    let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) else {
        return Err(PerfError::usage(format!(
            "unexpected argument '{arg}' (every value follows a flag, as in -x 2)"
        )));
    };
    if let Some(found) = FLAGS.iter().find(|f| f.short == Some(short)) {
        return Ok((found, None));
    }
    // `-x2`: a one-letter flag that takes a value, with the value attached
    let first = short.chars().next().map(|c| c.len_utf8()).unwrap_or(0);
    let (letter, attached) = short.split_at(first);
    FLAGS
        .iter()
        .find(|f| f.short == Some(letter) && f.value.is_some())
        .map(|f| (f, Some(attached.to_owned())))
        .ok_or_else(unknown)
}

/// `--help`: usage and every flag.
pub fn help() -> String {
    let mut text = String::from(
        "warren perf: load a RabbitMQ-compatible broker with PerfTest's workloads\n\n\
         usage: warren perf [FLAGS]\n       \
         warren perf stream [FLAGS]   (stream-perf-test's flags: warren perf stream --help)\n       \
         warren perf chart A.json [B.json] -o OUT.png\n\nflags:\n",
    );
    for f in FLAGS {
        let short = f.short.map_or(String::new(), |s| format!("-{s}, "));
        let value = f.value.map_or(String::new(), |v| format!(" {v}"));
        let names = format!("{short}--{}{value}", f.long);
        text.push_str(&format!("  {names:<38} {}\n", f.help));
    }
    text.push_str("  --help                                 this text\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(args: &[&str]) -> Given {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokenize(&args).unwrap().unwrap()
    }

    fn error(args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokenize(&args).unwrap_err().to_string()
    }

    #[test]
    fn perftest_forms() {
        let g = given(&[
            "-h",
            "amqp://h",
            "-x2",
            "--consumers=3",
            "-qa",
            "x-max-length=5",
        ]);
        assert_eq!(g.value("uri"), Some("amqp://h"));
        assert_eq!(g.value("producers"), Some("2"));
        assert_eq!(g.value("consumers"), Some("3"));
        assert_eq!(g.value("queue-args"), Some("x-max-length=5"));
        let g = given(&[
            "-a",
            "-f",
            "persistent",
            "--flag",
            "mandatory",
            "-ad",
            "false",
        ]);
        assert!(g.switch("autoack"));
        assert_eq!(g.values("flag"), vec!["persistent", "mandatory"]);
        assert_eq!(g.value("auto-delete"), Some("false"));
        assert!(tokenize(&["--help".to_string()]).unwrap().is_none());
    }

    #[test]
    fn unknown_and_incomplete_flags_are_named() {
        assert!(error(&["-Q", "1"]).contains("unknown flag '-Q'"));
        assert!(error(&["--producer", "1"]).contains("unknown flag '--producer'"));
        assert!(error(&["-x"]).contains("flag '-x' needs a value (N)"));
        assert!(error(&["-a=1"]).contains("unknown flag '-a=1'"));
        assert!(error(&["--autoack=1"]).contains("flag '--autoack=1' takes no value"));
        assert!(error(&["stray"]).contains("unexpected argument 'stray'"));
    }

    #[test]
    fn help_lists_every_flag() {
        let text = help();
        for f in FLAGS {
            assert!(text.contains(&format!("--{}", f.long)), "{}", f.long);
        }
    }
}
