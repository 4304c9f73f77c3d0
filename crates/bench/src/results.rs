//! The result file (JSON, described by `schema/results.schema.json`), its CSV flattening, the
//! terminal summary table and the knee finding. Pure data: no I/O besides the `write_*` helpers.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::datagen::DataPattern;
use crate::machine::Machine;
use crate::plan::Region;
use crate::stats::DirStats;
use crate::target::TargetInfo;
use crate::unwritten::Unwritten;
use crate::BenchError;

/// Bumped when a field changes meaning or disappears; adding fields keeps the version.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// One run of `weft bench`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Results {
    pub(crate) schema_version: u32,
    pub(crate) label: String,
    pub(crate) tool: Tool,
    pub(crate) started_at: String,
    pub(crate) finished_at: String,
    pub(crate) machine: Machine,
    pub(crate) target: TargetInfo,
    pub(crate) config: Config,
    pub(crate) points: Vec<PointResult>,
    pub(crate) knees: Vec<Knee>,
    /// Never-written ranges of the measured region and the prefill (absent in files from
    /// before the check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unwritten: Option<Unwritten>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Tool {
    pub(crate) name: String,
    pub(crate) version: String,
}

/// The configuration as run, after defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Config {
    pub(crate) mode: String,
    pub(crate) small_io_bytes: u32,
    pub(crate) large_io_bytes: u32,
    pub(crate) small_queue_depths: Vec<u32>,
    pub(crate) large_queue_depths: Vec<u32>,
    pub(crate) write_pcts: Vec<u8>,
    pub(crate) region_spec: String,
    pub(crate) region: Region,
    pub(crate) duration_s: f64,
    pub(crate) warmup_s: f64,
    pub(crate) workers: u32,
    pub(crate) latency_threshold_us: f64,
    pub(crate) seed: u64,
    /// How latency is measured, for readers of the file.
    pub(crate) latency_method: String,
    /// What the written data looks like (absent in files from before: unique, incompressible).
    #[serde(default)]
    pub(crate) data_pattern: DataPattern,
    /// The local server process whose CPU was sampled (`--server-pid`), if any.
    #[serde(default)]
    pub(crate) server_pid: Option<u32>,
}

/// One measured point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PointResult {
    pub(crate) index: usize,
    pub(crate) name: String,
    /// "small_random", "large_sequential" or "mixed".
    pub(crate) kind: String,
    pub(crate) small_qd: u32,
    pub(crate) large_qd: u32,
    pub(crate) write_pct: u8,
    /// Measured window in seconds (warm-up excluded).
    pub(crate) duration_s: f64,
    /// Queues (NBD connections, iSCSI sessions or file threads) the point used.
    pub(crate) queues: u32,
    pub(crate) total: DirStats,
    pub(crate) read: DirStats,
    pub(crate) write: DirStats,
    /// Small random I/O alone (present when small_qd > 0).
    pub(crate) small: Option<ClassStats>,
    /// Large sequential I/O alone (present when large_qd > 0).
    pub(crate) large: Option<ClassStats>,
    /// CPU used over the measured window (absent in files from before).
    #[serde(default)]
    pub(crate) cpu: PointCpu,
    /// The measured window sample by sample: one per second, or ten for a window under 10 s.
    #[serde(default)]
    pub(crate) series: Vec<Sample>,
}

/// CPU used by the client (this process) and the server (`--server-pid`) over a point's
/// measured window: percent of one core, and CPU microseconds per I/O.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct PointCpu {
    pub(crate) client_pct: f64,
    pub(crate) client_us_per_io: f64,
    pub(crate) server_pct: Option<f64>,
    pub(crate) server_us_per_io: Option<f64>,
}

/// One interval of a point's measured window.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Sample {
    /// End of the interval, seconds since the run started (points follow each other).
    pub(crate) t_s: f64,
    pub(crate) interval_s: f64,
    pub(crate) ios: u64,
    pub(crate) iops: f64,
    pub(crate) mb_per_s: f64,
    pub(crate) latency_us_mean: f64,
    pub(crate) latency_us_max: f64,
    pub(crate) client_cpu_pct: f64,
    pub(crate) server_cpu_pct: Option<f64>,
}

/// Statistics of one I/O class (small random or large sequential) within a point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ClassStats {
    pub(crate) io_bytes: u32,
    pub(crate) total: DirStats,
    pub(crate) read: DirStats,
    pub(crate) write: DirStats,
}

/// The highest load of a series whose mean latency stays at or under the threshold.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Knee {
    pub(crate) kind: String,
    pub(crate) write_pct: u8,
    pub(crate) latency_threshold_us: f64,
    /// Index of the point, or None if no point of the series was under the threshold.
    pub(crate) point_index: Option<usize>,
    pub(crate) qd: u32,
    pub(crate) iops: f64,
    pub(crate) mb_per_s: f64,
    pub(crate) latency_us_mean: f64,
}

/// Finds the knee of each (kind, write %) series of single-class points. Mixed (matrix) points
/// have no single load axis and are left out.
pub(crate) fn find_knees(points: &[PointResult], threshold_us: f64) -> Vec<Knee> {
    let mut series: Vec<(&str, u8)> = Vec::new();
    for p in points.iter().filter(|p| p.kind != "mixed") {
        if !series.contains(&(p.kind.as_str(), p.write_pct)) {
            series.push((p.kind.as_str(), p.write_pct));
        }
    }
    series
        .into_iter()
        .map(|(kind, write_pct)| {
            let best = points
                .iter()
                .filter(|p| p.kind == kind && p.write_pct == write_pct && p.total.ios > 0)
                .filter(|p| p.total.latency_us.mean <= threshold_us)
                .max_by(|a, b| a.total.iops.total_cmp(&b.total.iops));
            Knee {
                kind: kind.to_string(),
                write_pct,
                latency_threshold_us: threshold_us,
                point_index: best.map(|p| p.index),
                qd: best.map_or(0, |p| p.small_qd.max(p.large_qd)),
                iops: best.map_or(0.0, |p| p.total.iops),
                mb_per_s: best.map_or(0.0, |p| p.total.mb_per_s),
                latency_us_mean: best.map_or(0.0, |p| p.total.latency_us.mean),
            }
        })
        .collect()
}

const CSV_HEADER: &str = "label,index,name,kind,small_qd,large_qd,write_pct,duration_s,\
iops,mb_per_s,lat_mean_us,lat_p50_us,lat_p95_us,lat_p99_us,lat_p999_us,lat_max_us,\
read_iops,read_mb_per_s,read_lat_mean_us,read_lat_p99_us,\
write_iops,write_mb_per_s,write_lat_mean_us,write_lat_p99_us,client_cpu_pct,server_cpu_pct";

/// One line per point, with a header.
pub(crate) fn to_csv(r: &Results) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for p in &r.points {
        let (t, rd, wr) = (&p.total, &p.read, &p.write);
        let l = &t.latency_us;
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{:.3},{:.1},{:.3},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},\
             {:.1},{:.3},{:.2},{:.2},{:.1},{:.3},{:.2},{:.2},{:.1},{}",
            csv_field(&r.label),
            p.index,
            csv_field(&p.name),
            p.kind,
            p.small_qd,
            p.large_qd,
            p.write_pct,
            p.duration_s,
            t.iops,
            t.mb_per_s,
            l.mean,
            l.p50,
            l.p95,
            l.p99,
            l.p999,
            l.max,
            rd.iops,
            rd.mb_per_s,
            rd.latency_us.mean,
            rd.latency_us.p99,
            wr.iops,
            wr.mb_per_s,
            wr.latency_us.mean,
            wr.latency_us.p99,
            p.cpu.client_pct,
            p.cpu
                .server_pct
                .map_or(String::new(), |v| format!("{v:.1}")),
        );
    }
    s
}

fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

/// The table printed when a run ends.
pub(crate) fn summary_table(r: &Results) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>3}  {:<28} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "#",
        "point",
        "IOPS",
        "MB/s",
        "mean µs",
        "p50",
        "p95",
        "p99",
        "p99.9",
        "max",
        "rd mean",
        "wr mean",
        "cli CPU",
        "srv CPU"
    );
    for p in &r.points {
        let l = &p.total.latency_us;
        let dash = |d: &DirStats| {
            if d.ios == 0 {
                "-".to_string()
            } else {
                format!("{:.1}", d.latency_us.mean)
            }
        };
        let _ = writeln!(
            s,
            "{:>3}  {:<28} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>9} {:>6.0}% {:>7}",
            p.index,
            p.name,
            p.total.iops,
            p.total.mb_per_s,
            l.mean,
            l.p50,
            l.p95,
            l.p99,
            l.p999,
            l.max,
            dash(&p.read),
            dash(&p.write),
            p.cpu.client_pct,
            p.cpu
                .server_pct
                .map_or("-".to_string(), |v| format!("{v:.0}%")),
        );
    }
    if let Some(w) = r.unwritten.as_ref().and_then(|u| u.warning.as_ref()) {
        let _ = writeln!(s, "warning: {w}");
    }
    for k in &r.knees {
        let _ = match k.point_index {
            Some(i) => writeln!(
                s,
                "knee ({} w{}%): qd {} gives {:.0} IOPS, {:.1} MB/s at {:.1} µs mean (point {i}, threshold {:.0} µs)",
                k.kind, k.write_pct, k.qd, k.iops, k.mb_per_s, k.latency_us_mean, k.latency_threshold_us
            ),
            None => writeln!(
                s,
                "knee ({} w{}%): no point stays under {:.0} µs mean latency",
                k.kind, k.write_pct, k.latency_threshold_us
            ),
        };
    }
    s
}

pub(crate) fn write_file(path: &Path, contents: &str) -> Result<(), BenchError> {
    std::fs::write(path, contents).map_err(|source| BenchError::File {
        path: path.to_path_buf(),
        source,
    })
}

pub(crate) fn read_results(path: &Path) -> Result<Results, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::File {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| BenchError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stats::LatencyUs;

    pub(crate) fn point(
        index: usize,
        qd: u32,
        write_pct: u8,
        iops: f64,
        mean_us: f64,
    ) -> PointResult {
        let total = DirStats {
            ios: 100,
            bytes: 100 * 8192,
            iops,
            mb_per_s: iops * 8192.0 / 1e6,
            latency_us: LatencyUs {
                mean: mean_us,
                ..Default::default()
            },
            histogram_pow2_us: vec![0, 1, 99],
        };
        PointResult {
            index,
            name: format!("small qd{qd} w{write_pct}%"),
            kind: "small_random".into(),
            small_qd: qd,
            large_qd: 0,
            write_pct,
            duration_s: 1.0,
            queues: 1,
            read: total.clone(),
            total,
            write: DirStats::default(),
            small: None,
            large: None,
            cpu: PointCpu::default(),
            series: Vec::new(),
        }
    }

    #[test]
    fn knee_is_highest_load_under_threshold() {
        let pts = vec![
            point(0, 1, 0, 1000.0, 100.0),
            point(1, 4, 0, 3500.0, 400.0),
            point(2, 16, 0, 5000.0, 1500.0),
            point(3, 1, 100, 800.0, 2000.0),
        ];
        let k = find_knees(&pts, 1000.0);
        assert_eq!(k.len(), 2);
        assert_eq!(k[0].point_index, Some(1));
        assert_eq!(k[0].qd, 4);
        assert_eq!(k[1].write_pct, 100);
        assert_eq!(k[1].point_index, None);
    }

    #[test]
    fn csv_has_a_row_per_point_and_quotes_commas() {
        let r = Results {
            schema_version: SCHEMA_VERSION,
            label: "a,b".into(),
            tool: Tool {
                name: "weft-bench".into(),
                version: "0".into(),
            },
            started_at: String::new(),
            finished_at: String::new(),
            machine: Machine::default(),
            target: TargetInfo {
                uri: "x".into(),
                kind: "file".into(),
                size_bytes: 1,
                block_size_min_bytes: 1,
                block_size_preferred_bytes: 1,
                block_size_max_bytes: 1,
                read_only: false,
                direct_io: None,
            },
            config: Config {
                mode: "oltp".into(),
                small_io_bytes: 8192,
                large_io_bytes: 1 << 20,
                small_queue_depths: vec![1],
                large_queue_depths: vec![],
                write_pcts: vec![0],
                region_spec: "0-100%".into(),
                region: Region {
                    start_bytes: 0,
                    end_bytes: 1,
                },
                duration_s: 1.0,
                warmup_s: 0.0,
                workers: 1,
                latency_threshold_us: 1000.0,
                seed: 0,
                latency_method: String::new(),
                data_pattern: DataPattern::default(),
                server_pid: None,
            },
            points: vec![point(0, 1, 0, 1.0, 1.0), point(1, 2, 0, 2.0, 2.0)],
            knees: vec![],
            unwritten: Some(Unwritten {
                warning: Some("holes".into()),
                ..Unwritten::default()
            }),
        };
        // A file from before data patterns, CPU and series still loads, with defaults.
        let mut old = serde_json::to_value(&r).expect("serialises");
        old["config"]
            .as_object_mut()
            .unwrap()
            .remove("data_pattern");
        old["config"].as_object_mut().unwrap().remove("server_pid");
        old.as_object_mut().unwrap().remove("unwritten");
        for p in old["points"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().remove("cpu");
            p.as_object_mut().unwrap().remove("series");
        }
        let loaded: Results = serde_json::from_value(old).expect("old files load");
        assert_eq!(loaded.config.data_pattern, DataPattern::default());
        assert_eq!(loaded.points[1].cpu, PointCpu::default());
        let csv = to_csv(&r);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("\"a,b\",0,"));
        assert_eq!(
            lines[0].split(',').count(),
            lines[2].split(',').count() - 1, // the quoted label holds one comma
        );
        assert!(summary_table(&r).contains("small qd2 w0%"));
        assert!(summary_table(&r).contains("warning: holes"));
    }
}
