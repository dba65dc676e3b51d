//! Placeholder: figures measured in `#[ignore]` tests (filled below).
