//! QoS on the web UI's volume page, through the real binary in headless Chromium: a volume
//! created with an IOPS limit shows its limits, burst and latency target, and the count of
//! I/Os the limit throttled (written over NBD before and while the page is open: the count
//! follows), the same as the API's.

mod browser_support;
mod common;

use browser_support::*;
use common::*;
use serde_json::json;

/// Writes `n` 4 KiB blocks to `export` over NBD, at QD1.
fn write_blocks(srv: &Server, export: &str, n: u64) {
    let mut c = srv.nbd_client(export);
    for i in 0..n {
        c.write(i * 4096, &[0x5a; 4096]).unwrap();
    }
    c.disconnect();
}

#[test]
fn volume_page_shows_qos_settings_and_throttled_ios() {
    chromium();
    let srv = Server::start_with("web-ui-qos", ServeOpts::default().volume_size("16M"));
    if srv.skip_without_api("volume_page_shows_qos_settings_and_throttled_ios") {
        return;
    }
    srv.cli_ok(&[
        "volume",
        "create",
        "lim",
        "--size",
        "16M",
        "--iops-max",
        "200",
        "--iops-burst",
        "10",
        "--latency-target",
        "5ms",
    ]);
    write_blocks(&srv, "lim", 40);
    let before = srv.api_json("GET", "/api/v1/volumes/lim/qos", None)["throttled_ios"]
        .as_u64()
        .unwrap();
    assert!(
        before > 0,
        "40 writes past a burst of 10 were not throttled"
    );

    let token = srv.token();
    let browser = Browser::launch();
    let mut page = browser.page();
    page.navigate(&format!("{}/", srv.api));
    page.wait_for(
        "the login page",
        "window.weft && weft.page === 'login'",
        PAGE_TIMEOUT,
    );
    page.login(&token);
    page.wait_for(
        "the volume list",
        "weft.page === 'volumes' && weft.volumes && weft.volumes.catalogReads > 0",
        PAGE_TIMEOUT,
    );
    page.go("#/volume/lim");
    page.wait_for(
        "the volume page with its QoS",
        "weft.page === 'volume' && weft.volume && weft.volume.qos !== undefined",
        PAGE_TIMEOUT,
    );
    let text = page.eval("document.getElementById('vv-qos').textContent");
    let text = text.as_str().unwrap();
    for want in [
        "IOPS ≤ 200",
        "IOPS burst 10",
        "p99 target 5 ms",
        "throttled",
    ] {
        assert!(
            text.contains(want),
            "{want:?} not in the QoS section: {text}"
        );
    }
    assert!(
        text.contains(&format!("{before} I/O")),
        "the throttled count {before} not shown: {text}"
    );
    assert_eq!(
        page.eval("document.getElementById('vv-qos-box').hidden"),
        json!(false)
    );

    // More throttled writes while the page is open: the count follows.
    write_blocks(&srv, "lim", 40);
    let after = srv.api_json("GET", "/api/v1/volumes/lim/qos", None)["throttled_ios"]
        .as_u64()
        .unwrap();
    assert!(after > before);
    page.wait_for(
        "the new throttled count",
        &format!("document.getElementById('vv-qos').dataset.throttledIos === '{after}'"),
        PAGE_TIMEOUT,
    );
    assert_no_page_errors(&mut page, "the volume page with QoS");

    // A volume without QoS says so.
    page.go("#/volume/vol0");
    page.wait_for(
        "vol0's QoS",
        "weft.volume && weft.volume.name === 'vol0' && weft.volume.qos !== undefined",
        PAGE_TIMEOUT,
    );
    let text = page.eval("document.getElementById('vv-qos').textContent");
    assert!(text.as_str().unwrap().contains("no limits"), "{text}");
}
