//! libiscsi's `iscsi-test-cu`: running some of its tests over one or more URLs (paths to one
//! LUN) and reading CUnit's output, which counts a skipped test as passed.

use std::collections::BTreeMap;
use std::fs;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

pub const SUITE_TIMEOUT: Duration = Duration::from_secs(900);

pub type Results = BTreeMap<String, (Verdict, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Skipped,
    Failed,
}

/// Test name (`Suite.Test`) -> verdict and, for skips and failures, the first reason printed.
pub fn parse_cunit(output: &str) -> BTreeMap<String, (Verdict, String)> {
    let mut results = BTreeMap::new();
    let mut suite = String::new();
    let mut current: Option<(String, Vec<String>, Option<Verdict>)> = None;
    let finish = |cur: Option<(String, Vec<String>, Option<Verdict>)>,
                  results: &mut BTreeMap<String, (Verdict, String)>| {
        if let Some((name, lines, verdict)) = cur {
            let skipped = lines.iter().any(|l| l.contains("[SKIPPED]"));
            let verdict = match verdict.unwrap_or(Verdict::Failed) {
                Verdict::Passed if skipped => Verdict::Skipped,
                v => v,
            };
            let reason = lines
                .iter()
                .find(|l| l.contains("[SKIPPED]") || l.contains("[FAILED]") || l.contains("CU_"))
                .map(|l| l.trim().to_string())
                .unwrap_or_default();
            results.insert(name, (verdict, reason));
        }
    };
    for line in output.lines() {
        if let Some(name) = line.strip_prefix("Suite: ") {
            finish(current.take(), &mut results);
            suite = name.trim().to_string();
            continue;
        }
        if let Some(rest) = line.trim_start().strip_prefix("Test: ") {
            finish(current.take(), &mut results);
            let (name, tail) = rest.split_once(" ...").unwrap_or((rest, ""));
            // "...passed" at once: whatever follows on the line is the suite's cleanup.
            let verdict = tail.starts_with("passed").then_some(Verdict::Passed);
            let lines = if verdict.is_some() {
                Vec::new()
            } else {
                vec![tail.to_string()]
            };
            current = Some((format!("{suite}.{}", name.trim()), lines, verdict));
            continue;
        }
        if let Some((_, lines, verdict)) = current.as_mut() {
            if verdict.is_some() {
                continue;
            }
            // The verdict line may carry the suite's cleanup output after it: not the test's.
            let t = line.trim();
            if t.starts_with("passed") {
                *verdict = Some(Verdict::Passed);
            } else if t.starts_with("FAILED") {
                *verdict = Some(Verdict::Failed);
                lines.push(line.to_string());
            } else {
                lines.push(line.to_string());
            }
        }
    }
    finish(current.take(), &mut results);
    results
}

/// Run the `tests` of iscsi-test-cu over `urls` (several: paths to one LUN).
pub fn run_cunit(
    scratch: &Scratch,
    name: &str,
    tests: &str,
    urls: &[&str],
) -> BTreeMap<String, (Verdict, String)> {
    let log = scratch.join(format!("{name}-iscsi-test-cu.log"));
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"log="$1"; shift; exec "$@" > "$log" 2>&1"#)
        .arg("iscsi-test-cu")
        .arg(&log)
        .arg(require_tool("iscsi-test-cu"))
        .arg("--dataloss")
        .arg(format!("--test={tests}"))
        .args(urls);
    let out = run(&mut cmd, SUITE_TIMEOUT);
    assert!(!out.timed_out, "iscsi-test-cu timed out against {urls:?}");
    let text = fs::read_to_string(&log).unwrap_or_default();
    let results = parse_cunit(&text);
    if results.is_empty() {
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        panic!(
            "iscsi-test-cu ran no test against {urls:?} (exit {:?}), its output ends (last line first):\n{}",
            out.status,
            tail.join("\n")
        );
    }
    results
}
