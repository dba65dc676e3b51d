//! The log's writer: client-chosen text (user names, vhost and queue names, container ids,
//! reply texts) reaches log lines, and a control character in it must not forge a line or
//! rewrite the terminal. Every control character of a record is written escaped (`\n` as
//! `\x0a`), except the newline that ends the record and, when the log is coloured for a
//! terminal, the escape that starts the formatter's own colours.

use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// Makes [`EscapingWriter`]s over standard output.
#[derive(Debug, Clone, Copy)]
pub struct EscapingStdout {
    /// Whether the formatter writes ANSI colours (then ESC passes through).
    pub ansi: bool,
}

impl<'a> MakeWriter<'a> for EscapingStdout {
    type Writer = EscapingWriter<io::StdoutLock<'static>>;

    fn make_writer(&'a self) -> Self::Writer {
        EscapingWriter {
            inner: io::stdout().lock(),
            ansi: self.ansi,
        }
    }
}

/// Writes each record with its control characters escaped (see the module doc).
pub struct EscapingWriter<W> {
    inner: W,
    ansi: bool,
}

impl<W: Write> EscapingWriter<W> {
    pub fn new(inner: W, ansi: bool) -> EscapingWriter<W> {
        EscapingWriter { inner, ansi }
    }
}

impl<W: Write> Write for EscapingWriter<W> {
    /// Takes a whole record (the formatter writes each event with one `write_all`).
    fn write(&mut self, record: &[u8]) -> io::Result<usize> {
        let (body, end) = match record.split_last() {
            Some((b'\n', body)) => (body, &b"\n"[..]),
            _ => (record, &b""[..]),
        };
        let passes = |byte: u8| !(byte < 0x20 || byte == 0x7f) || (self.ansi && byte == 0x1b);
        if body.iter().all(|&byte| passes(byte)) {
            self.inner.write_all(record)?;
            return Ok(record.len());
        }
        let mut escaped = Vec::with_capacity(body.len() + 16);
        for &byte in body {
            if passes(byte) {
                escaped.push(byte);
            } else {
                write!(escaped, "\\x{byte:02x}")?;
            }
        }
        escaped.extend_from_slice(end);
        self.inner.write_all(&escaped)?;
        Ok(record.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escape(record: &[u8], ansi: bool) -> String {
        let mut writer = EscapingWriter::new(Vec::new(), ansi);
        writer.write_all(record).unwrap();
        String::from_utf8(writer.inner).unwrap()
    }

    #[test]
    fn control_characters_cannot_start_a_line() {
        let forged = b"WARN authentication failed user=guest\nINFO forged line\r\n";
        assert_eq!(
            escape(forged, false),
            "WARN authentication failed user=guest\\x0aINFO forged line\\x0d\n"
        );
        assert_eq!(escape(b"plain line\n", false), "plain line\n");
        assert_eq!(escape(b"\x1b[2mdim\x1b[0m\n", true), "\x1b[2mdim\x1b[0m\n");
        assert_eq!(escape(b"\x1b[2m\n", false), "\\x1b[2m\n");
        assert_eq!(escape("naïve\n".as_bytes(), false), "naïve\n");
    }
}
