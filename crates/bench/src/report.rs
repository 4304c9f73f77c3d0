//! The self-contained HTML report: result files embedded as JSON, drawn with uPlot (the
//! charting library of the web UI, vendored in `ui/vendor/`) by our script `report/report.js`,
//! styled by `report/report.css`, all inline. The page loads nothing from the network and opens
//! offline.

use std::time::Duration;

use crate::args::ReportArgs;
use crate::results::{self, Results};
use crate::BenchError;

const REPORT_JS: &str = include_str!("report/report.js");
const REPORT_CSS: &str = include_str!("report/report.css");
const UPLOT_JS: &str = include_str!("../../../ui/vendor/uplot-1.6.32/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../../ui/vendor/uplot-1.6.32/uPlot.min.css");

/// `weft bench report a.json b.json -o cmp.html`
pub(crate) fn run_report(a: &ReportArgs) -> Result<(), BenchError> {
    let runs = a
        .inputs
        .iter()
        .map(|p| results::read_results(p))
        .collect::<Result<Vec<_>, _>>()?;
    results::write_file(&a.output, &render(&runs, a.latency_threshold))?;
    println!("wrote {}", a.output.display());
    Ok(())
}

/// Renders the report for one or several runs. With `threshold`, knees are recomputed with it.
pub(crate) fn render(runs: &[Results], threshold: Option<Duration>) -> String {
    let mut runs = runs.to_vec();
    if let Some(t) = threshold {
        let us = t.as_secs_f64() * 1e6;
        for r in &mut runs {
            r.config.latency_threshold_us = us;
            r.knees = results::find_knees(&r.points, us);
        }
    }
    let labels: Vec<String> = runs.iter().map(|r| escape_html(&r.label)).collect();
    let json = serde_json::to_string(&runs).expect("results serialise");
    // Inside <script>, only "</" can end the element early; JSON allows "<\/" for it.
    let json = json.replace("</", "<\\/");
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>weft bench: {title}</title>
<style>{UPLOT_CSS}</style>
<style>{REPORT_CSS}</style>
</head>
<body>
<header><h1>weft bench report</h1><p class="runs">{title}</p></header>
<noscript><p>The charts need JavaScript; the data is in the JSON result files.</p></noscript>
<div id="warnings"></div>
<section><h2>Latency against load</h2>
<p class="hint">Mean (solid), p99 (dashed) and p99.9 (dotted) latency at each number of
outstanding I/Os; one colour per run. Outstanding I/Os on a log scale.</p>
<div class="charts" id="charts-latency"></div></section>
<section><h2>IOPS against mean latency</h2>
<p class="hint">Each line is one write percentage; points are rising outstanding I/O counts. The
knee is the highest load whose mean latency stays under the dashed threshold.</p>
<div class="charts" id="charts-iops-latency"></div></section>
<section><h2>Throughput against outstanding I/Os</h2>
<div class="charts" id="charts-qd"></div></section>
<section><h2>ORION grids</h2>
<p class="hint">As ORION's matrix files: rows are outstanding small I/Os, columns outstanding
large I/Os; IOPS and latency of the small random I/O, MB/s of the large sequential I/O.</p>
<div id="grids"></div></section>
<section><h2>CPU</h2>
<p class="hint">Client: weft bench itself. Server: the process given with
<code>--server-pid</code>. All threads, user and system time; 100% is one core busy.</p>
<div class="charts" id="charts-cpu"></div></section>
<section><h2>Over time</h2>
<p class="hint">Each point's measured window, one sample per second (a tenth of the window when
it is shorter than 10 s); the lines break between points.</p>
<div class="charts" id="charts-time"></div></section>
<section><h2>Latency histograms</h2>
<p class="hint">Power-of-two microsecond buckets, as in Oracle's wait-event histograms: the
bucket "&lt;2^k µs" counts I/Os at or above 2^(k-1) µs and below 2^k µs. One bar per point.</p>
<div class="charts" id="charts-hist"></div></section>
<section><h2>Knee</h2><div id="knees"></div></section>
<section><h2>Points</h2><div id="tables"></div></section>
<script type="application/json" id="weft-data">{json}</script>
<script>{UPLOT_JS}</script>
<script>{REPORT_JS}</script>
</body>
</html>
"#,
        title = labels.join(" vs "),
    )
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlined_scripts_cannot_end_their_element_early() {
        for (name, text) in [("uPlot", UPLOT_JS), ("report.js", REPORT_JS)] {
            assert!(!text.contains("</script"), "{name} holds </script");
        }
    }

    #[test]
    fn html_escaping_covers_markup() {
        assert_eq!(
            escape_html("<a href=\"x\">&</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
    }
}
