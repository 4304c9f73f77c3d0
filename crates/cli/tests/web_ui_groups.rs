//! Consistency groups on the web UI's volume list, through the real binary in headless
//! Chromium: a group with a group snapshot and a clone group made through the API are listed
//! with their members, origin and group snapshots; without groups the section stays hidden.

mod browser_support;
mod common;

use browser_support::*;
use common::*;
use serde_json::json;

#[test]
fn volume_list_shows_consistency_groups_and_their_snapshots() {
    chromium();
    let srv = Server::start_with("web-ui-groups", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("volume_list_shows_consistency_groups_and_their_snapshots") {
        return;
    }
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
        "the volume list read once",
        "weft.page === 'volumes' && weft.volumes && weft.volumes.catalogReads > 0 \
         && Array.isArray(weft.volumes.groups)",
        PAGE_TIMEOUT,
    );
    assert_eq!(
        page.eval("document.getElementById('vl-groups').hidden"),
        json!(true),
        "the groups section shows with no group"
    );

    for name in ["pgdata", "pgwal"] {
        srv.api_json(
            "POST",
            "/api/v1/volumes",
            Some(json!({"name": name, "size_bytes": 64u64 << 20})),
        );
    }
    srv.api_json(
        "POST",
        "/api/v1/groups",
        Some(json!({"name": "pgprod", "volumes": ["pgdata", "pgwal"]})),
    );
    srv.api_json(
        "POST",
        "/api/v1/groups/pgprod/snapshots",
        Some(json!({"name": "monday"})),
    );
    srv.api_json(
        "POST",
        "/api/v1/group-snapshots/pgprod@monday/clones",
        Some(json!({"name": "pgdev"})),
    );
    // The list reads the catalog at start and every 10 s: come back to it.
    page.go("#/cluster");
    page.wait_for("the cluster page", "weft.page === 'cluster'", PAGE_TIMEOUT);
    page.go("#/volumes");
    page.wait_for(
        "both groups listed",
        "weft.page === 'volumes' && (weft.volumes.groups || []).length === 2",
        PAGE_TIMEOUT,
    );
    let row = |page: &mut Page, group: &str| {
        page.eval(&format!(
            "Array.from(document.querySelectorAll('#vl-groups-table tr[data-group=\"{group}\"] td')).map((td) => td.textContent)"
        ))
    };
    let prod = row(&mut page, "pgprod");
    assert_eq!(prod[0], "pgprod");
    assert_eq!(prod[1], "pgdata, pgwal");
    assert_eq!(prod[3], "–");
    assert_eq!(prod[4], "pgprod@monday");
    let dev = row(&mut page, "pgdev");
    assert_eq!(dev[1], "pgdev-pgdata, pgdev-pgwal");
    assert_eq!(dev[3], "pgprod@monday");
    assert_eq!(
        page.eval("document.getElementById('vl-groups').hidden"),
        json!(false)
    );
    page.screenshot(&screenshot_dir(), "groups-on-volume-list", VIEW_HEIGHT_PX);
    assert_no_page_errors(&mut page, "the volume list with groups");
}
