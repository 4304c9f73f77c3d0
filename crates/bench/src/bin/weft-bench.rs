//! Stand-alone `weft-bench` for testing the crate without the `weft` binary: the same arguments
//! as `weft bench`.

use clap::Parser;
use weft_bench::BenchArgs;

#[derive(Parser, Debug)]
#[command(
    name = "weft-bench",
    version,
    about = "ORION-style I/O benchmark (weft bench)"
)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // clap uses 2 for usage errors and 0 for --help/--version.
            std::process::exit(e.exit_code());
        }
    };
    std::process::exit(weft_bench::main_exit_code(cli.bench));
}
