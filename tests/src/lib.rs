//! Test harness: placeholder
