//! Sizes on the command line: one parser for every `weft` subcommand and `weft bench`, kept in
//! `weft_bench::size` (binary units: `4096`, `64K`, `8KiB`, `100G`, `1.5T`, `10GiB`).

pub use weft_bench::size::parse_size;
