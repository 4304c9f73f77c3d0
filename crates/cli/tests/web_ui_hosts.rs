//! A host's initiators and CHAP edited on the web UI's hosts page, as `weft host
//! add-initiator|remove-initiator|set-chap` edit them, through the real binary in headless
//! Chromium: adding an initiator asks nothing; removing one, setting, changing and removing
//! CHAP ask first (a cancelled question changes nothing); the API's refusals (not an initiator
//! name, the last initiator of a host with CHAP) are shown on the page; a secret is never
//! shown again, in the page or the API; a read-only token's viewer sees none of these actions.
//! Each result is checked in the API, not only on the page, and by logging in to the array
//! target as the host would (libiscsi's `iscsi-ls`): a new initiator sees the host's LUN, a
//! removed one does not, CHAP set on the page is asked at login and its secret logs in.

mod browser_support;
mod common;
mod iscsi_support;

use browser_support::*;
use common::*;
use serde_json::{json, Value};

const IQN_A: &str = "iqn.1994-05.com.redhat:db1";
const IQN_B: &str = "iqn.1994-05.com.redhat:db1-second";
const SECRET: &str = "db1-ui-chap-secret-0451";
const MUTUAL_SECRET: &str = "array-proves-itself-7788";

/// Runs `js` with `tr` bound to host `host`'s row of the hosts table.
fn in_row(page: &mut Page, host: &str, js: &str) -> Value {
    page.eval(&format!(
        "(() => {{ const tr = document.querySelector('#hs-table tr[data-host=' + {} + ']'); {js} }})()",
        json!(json!(host).to_string())
    ))
}

/// Sets the value of the input `selector` in `host`'s row.
fn fill(page: &mut Page, host: &str, selector: &str, value: &str) {
    in_row(
        page,
        host,
        &format!(
            "tr.querySelector({}).value = {};",
            json!(selector),
            json!(value)
        ),
    );
}

/// Clicks the button `selector` in `host`'s row (for a button of a form: submits it, with the
/// browser's checks of its required fields).
fn press(page: &mut Page, host: &str, selector: &str) {
    in_row(
        page,
        host,
        &format!("tr.querySelector({}).click();", json!(selector)),
    );
}

/// The question on the page, after it asked.
fn asked(page: &mut Page) -> String {
    let v = page.wait_for(
        "a question on the confirmation line",
        "!document.getElementById('hs-confirm').hidden && weft.hosts.asking",
        PAGE_TIMEOUT,
    );
    v.as_str().unwrap().to_string()
}

/// Answers the question and waits for the hosts to be loaded again.
fn answer_yes(page: &mut Page) {
    let loads = page.eval("weft.hosts.loads").as_u64().unwrap();
    click(page, "hs-confirm-yes");
    page.wait_for(
        "the hosts loaded again",
        &format!("weft.hosts.loads > {loads} || document.getElementById('hs-error').textContent"),
        PAGE_TIMEOUT,
    );
}

fn host_json(srv: &Server) -> Value {
    srv.api_json("GET", "/api/v1/hosts/db1", None)
}

/// The LUNs `initiator` sees on the array target, logging in with `auth` (`user%secret@`).
fn luns(srv: &Server, initiator: &str, auth: &str) -> Result<Vec<u64>, String> {
    let target = host_json(srv)["iscsi_target"]
        .as_str()
        .expect("iscsi_target")
        .to_string();
    let portal = srv.iscsi.expect("an iSCSI portal");
    iscsi_support::array_luns::array_luns(portal, &target, initiator, auth)
}

#[test]
fn web_ui_edits_a_hosts_initiators_and_chap_as_the_cli_does() {
    const TEST: &str = "web_ui_edits_a_hosts_initiators_and_chap_as_the_cli_does";
    chromium();
    require_tool("iscsi-ls");
    let srv = Server::start_with("web-ui-hosts", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    srv.cli_ok(&[
        "host",
        "create",
        "db1",
        "--iqn",
        IQN_A,
        "--nbd-address",
        "10.1.1.1",
    ]);
    srv.cli_ok(&["volume", "map", "vol0", "--host", "db1", "--lun", "2"]);
    assert_eq!(luns(&srv, IQN_A, ""), Ok(vec![2]));
    assert_ne!(
        luns(&srv, IQN_B, ""),
        Ok(vec![2]),
        "a stranger sees db1's LUN"
    );
    let shots = screenshot_dir();
    let browser = Browser::launch();
    let mut page = browser.page();
    page.navigate(&format!("{}/", srv.api));
    page.wait_for(
        "the login page",
        "window.weft && weft.page === 'login'",
        PAGE_TIMEOUT,
    );
    page.login(&srv.token());
    page.wait_for("the volume list", "weft.page === 'volumes'", PAGE_TIMEOUT);
    page.go("#/hosts");
    page.wait_for(
        "db1 on the hosts page",
        "weft.page === 'hosts' && weft.hosts.names().includes('db1')",
        PAGE_TIMEOUT,
    );

    // Adding an initiator asks nothing.
    fill(&mut page, "db1", "input.add-iqn", IQN_B);
    press(&mut page, "db1", "button.add-initiator");
    page.wait_for(
        "two initiators on the page",
        &format!(
            "JSON.stringify(weft.hosts.initiators('db1')) === {}",
            json!(json!([IQN_A, IQN_B]).to_string())
        ),
        PAGE_TIMEOUT,
    );
    assert_eq!(host_json(&srv)["iqns"], json!([IQN_A, IQN_B]));
    assert_eq!(luns(&srv, IQN_B, ""), Ok(vec![2]), "the new initiator");
    // Not an initiator name: the API's refusal is on the page, nothing changed.
    fill(&mut page, "db1", "input.add-iqn", "db1.example.com");
    press(&mut page, "db1", "button.add-initiator");
    let error = page.wait_for(
        "the refusal on the page",
        "document.getElementById('hs-error').textContent",
        PAGE_TIMEOUT,
    );
    assert!(
        error
            .as_str()
            .unwrap()
            .contains("is not an iSCSI initiator name"),
        "{error}"
    );
    assert_eq!(host_json(&srv)["iqns"], json!([IQN_A, IQN_B]));

    // CHAP where there was none: asked, naming the user; the secret is sent once.
    fill(&mut page, "db1", "input.chap-user", "db1");
    fill(&mut page, "db1", "input.chap-secret", SECRET);
    press(&mut page, "db1", "button.set-chap");
    assert_eq!(
        asked(&mut page),
        "Require CHAP of host db1 (user db1)? Sessions logged in go on; their next login needs the new secret."
    );
    assert_eq!(
        page.eval("document.getElementById('hs-confirm-yes').textContent"),
        "Set CHAP"
    );
    answer_yes(&mut page);
    page.wait_for(
        "db1's CHAP user on the page",
        "JSON.stringify(weft.hosts.chap('db1')) === '[\"db1\",null]' \
         && document.querySelector('#hs-table tr[data-host=\"db1\"] .chap-text').textContent.startsWith('user db1')",
        PAGE_TIMEOUT,
    );
    let host = host_json(&srv);
    assert_eq!(host["chap_user"], "db1", "{host}");
    assert!(host["mutual_chap_user"].is_null(), "{host}");
    // The next login needs the secret typed on the page.
    let without = luns(&srv, IQN_A, "");
    assert!(
        without
            .as_ref()
            .is_err_and(|e| e.contains("Authentication failure")),
        "a login without CHAP: {without:?}"
    );
    assert_eq!(luns(&srv, IQN_A, &format!("db1%{SECRET}@")), Ok(vec![2]));

    // Changed to mutual CHAP, the target answering as another name.
    fill(&mut page, "db1", "input.chap-secret", SECRET);
    fill(&mut page, "db1", "input.chap-mutual-secret", MUTUAL_SECRET);
    fill(&mut page, "db1", "input.chap-mutual-user", "weft-array");
    press(&mut page, "db1", "button.set-chap");
    assert_eq!(
        asked(&mut page),
        "Change the CHAP secrets of host db1 (user db1, mutual (target answers as weft-array))? \
         Sessions logged in go on; their next login needs the new secret."
    );
    answer_yes(&mut page);
    page.wait_for(
        "mutual CHAP on the page",
        "JSON.stringify(weft.hosts.chap('db1')) === '[\"db1\",\"weft-array\"]'",
        PAGE_TIMEOUT,
    );
    assert_eq!(host_json(&srv)["mutual_chap_user"], "weft-array");
    // The secrets are nowhere to be read again: not in the page (its inputs are rebuilt
    // empty), not in the API.
    let html = page.eval("document.documentElement.outerHTML + JSON.stringify(Array.from(document.querySelectorAll('input')).map((i) => i.value))");
    let html = html.as_str().unwrap();
    for secret in [SECRET, MUTUAL_SECRET] {
        assert!(!html.contains(secret), "a secret left on the page");
        let (_, body) = srv.api("GET", "/api/v1/hosts", None);
        assert!(!body.contains(secret), "a secret in the API: {body}");
    }
    page.screenshot(&shots, "hosts-1-chap", VIEW_HEIGHT_PX);

    // Removing an initiator asks first; a cancelled question changes nothing.
    in_row(
        &mut page,
        "db1",
        &format!(
            "tr.querySelector('button.remove-initiator[data-iqn=' + {} + ']').click();",
            json!(json!(IQN_A).to_string())
        ),
    );
    assert_eq!(
        asked(&mut page),
        format!(
            "Remove initiator {IQN_A} from host db1? Its sessions from that initiator lose their LUNs at once."
        )
    );
    click(&mut page, "hs-confirm-no");
    assert_eq!(
        page.eval("document.getElementById('hs-confirm').hidden"),
        true
    );
    assert_eq!(host_json(&srv)["iqns"], json!([IQN_A, IQN_B]));
    in_row(
        &mut page,
        "db1",
        &format!(
            "tr.querySelector('button.remove-initiator[data-iqn=' + {} + ']').click();",
            json!(json!(IQN_A).to_string())
        ),
    );
    asked(&mut page);
    answer_yes(&mut page);
    page.wait_for(
        "one initiator left on the page",
        &format!(
            "JSON.stringify(weft.hosts.initiators('db1')) === {}",
            json!(json!([IQN_B]).to_string())
        ),
        PAGE_TIMEOUT,
    );
    assert_eq!(host_json(&srv)["iqns"], json!([IQN_B]));
    assert_ne!(
        luns(&srv, IQN_A, &format!("db1%{SECRET}@")),
        Ok(vec![2]),
        "the removed initiator still sees the LUN"
    );
    // The last initiator of a host with CHAP: the API refuses and the page says why.
    press(&mut page, "db1", "button.remove-initiator");
    asked(&mut page);
    answer_yes(&mut page);
    let error = page.wait_for(
        "the refusal on the page",
        "document.getElementById('hs-error').textContent",
        PAGE_TIMEOUT,
    );
    assert!(
        error.as_str().unwrap().contains("remove its CHAP first"),
        "{error}"
    );
    assert_eq!(host_json(&srv)["iqns"], json!([IQN_B]));

    // Removing CHAP asks, then the host logs in without it.
    press(&mut page, "db1", "button.remove-chap");
    assert_eq!(
        asked(&mut page),
        "Remove CHAP from host db1? Its initiators log in without a secret from their next login."
    );
    answer_yes(&mut page);
    page.wait_for(
        "no CHAP on the page",
        "JSON.stringify(weft.hosts.chap('db1')) === '[null,null]' \
         && document.querySelector('#hs-table tr[data-host=\"db1\"] button.remove-chap') === null",
        PAGE_TIMEOUT,
    );
    let host = host_json(&srv);
    assert!(host["chap_user"].is_null(), "{host}");
    assert_eq!(luns(&srv, IQN_B, ""), Ok(vec![2]), "a login without CHAP");
    assert_no_page_errors(&mut page, "after the host edits");

    // A read-only token's viewer sees the host as it is, without these actions.
    click(&mut page, "logout");
    page.wait_for("the login page", "weft.page === 'login'", PAGE_TIMEOUT);
    let read_only = std::fs::read_to_string(srv.data_dir.join("api-token-read-only")).unwrap();
    page.login(read_only.trim());
    page.wait_for(
        "the list, read-only",
        "weft.page === 'volumes' && weft.role === 'read-only'",
        PAGE_TIMEOUT,
    );
    page.go("#/hosts");
    page.wait_for(
        "the hosts page, read-only",
        "weft.page === 'hosts' && weft.hosts.initiators('db1').length === 1",
        PAGE_TIMEOUT,
    );
    let shown = in_row(
        &mut page,
        "db1",
        "return ['form.add-initiator', 'form.set-chap', 'button.remove-initiator'].map((s) => \
           getComputedStyle(tr.querySelector(s)).display);",
    );
    assert_eq!(shown, json!(["none", "none", "none"]), "read-only actions");
    page.screenshot(&shots, "hosts-2-read-only", VIEW_HEIGHT_PX);
    assert_no_page_errors(&mut page, "read-only");
}
