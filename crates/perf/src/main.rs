//! `warren-perf ARGS...`: the same as `warren perf ARGS...`, built alone
//! (`cargo build --release -p warren-perf`) so that the load tool can be measured and
//! rebuilt without building the broker.

fn main() -> std::process::ExitCode {
    warren_perf::main(std::env::args().skip(1).collect())
}
