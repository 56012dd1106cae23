//! `apigw-bench`: the performance harness, apart from the product binary. It runs the `apigw`
//! binary (`--apigw PATH`, by default the `apigw` next to this executable) as the gateway and as
//! the sample server, and measures it against the same backend direct, nginx and haproxy.

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "apigw-bench",
    version,
    about = "Performance harness: apigw against direct, nginx and haproxy, side by side"
)]
struct Cli {
    #[command(flatten)]
    args: apigw_bench::BenchArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    apigw_core::tls::install_default_provider();
    apigw_core::server::raise_fd_limit();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match apigw_bench::main(cli.args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
