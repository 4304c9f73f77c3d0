//! A token's role through a standby c.node, which passes every management request to the
//! owner's API (`api_proxy`): real etcd, three d.nodes, an owner and a standby on loopback.
//! Through the standby, either c.node's read-only token reads (the answer names its role in
//! `x-weft-role` and the owner in `x-weft-served-by`) and is refused every host edit (403,
//! audited on the owner as read-only), also when the caller sends an `x-weft-role: admin`
//! header of its own; an admin token makes the same edits; a wrong token gets 401 and no
//! role. The web UI reached through the standby in headless Chromium shows a read-only
//! viewer no host actions and lets an admin add an initiator, which the owner then has.

mod browser_support;
mod cluster_support;
mod common;

use std::time::Duration;

use browser_support::*;
use cluster_support::*;
use common::*;
use serde_json::{json, Value};

const TEST: &str = "through_a_standby_a_tokens_role_holds_for_the_api_and_the_ui";
const IQN_A: &str = "iqn.2026-01.test:db1";
const IQN_B: &str = "iqn.2026-01.test:db1-b";
const IQN_C: &str = "iqn.2026-01.test:db1-c";
const SECRET: &str = "db1-chap-secret-0451";

/// An answer: status, headers (lowercase names) and body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request with a bearer token and extra headers, keeping the answer's headers.
fn call(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    token: &str,
    extra: &[(&str, &str)],
) -> Answer {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut request = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{}{path}", base.trim_end_matches('/')))
        .header("Authorization", format!("Bearer {token}"));
    for (k, v) in extra {
        request = request.header(*k, *v);
    }
    let request = match body {
        Some(b) => request
            .header("Content-Type", "application/json")
            .body(b.to_string().into_bytes()),
        None => request.body(Vec::new()),
    }
    .unwrap();
    let mut response = agent
        .run(request)
        .unwrap_or_else(|e| panic!("{method} {base}{path}: {e}"));
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                v.to_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    Answer {
        status,
        headers,
        body,
    }
}

/// The standby's API, once its `serve.json` says it forwards to the owner.
fn forwarding_api(cnode: &Cnode) -> String {
    poll_until(
        Duration::from_secs(60),
        "the standby's serve.json, forwarding",
        || {
            let text = std::fs::read_to_string(cnode.data_dir.join("serve.json")).ok()?;
            let v: Value = serde_json::from_str(&text).ok()?;
            (v["pid"].as_u64() == Some(u64::from(cnode.pid())) && v["forwarding"] == true)
                .then(|| v["api"].as_str().map(str::to_string))
                .flatten()
        },
    )
}

fn file(cnode: &Cnode, name: &str) -> String {
    std::fs::read_to_string(cnode.data_dir.join(name))
        .unwrap_or_else(|e| panic!("{name} of {}: {e}", cnode.name))
        .trim()
        .to_string()
}

#[test]
fn through_a_standby_a_tokens_role_holds_for_the_api_and_the_ui() {
    let _serial = serial();
    chromium();
    let (_, seed) = test_rng(TEST);
    let mut opts = ClusterOpts::new(3);
    opts.redundancy = "2+1".into();
    opts.pg_count = 8;
    opts.volume_size = "64M".into();
    let mut c = Cluster::start(TEST, seed, opts);
    c.cli_ok(&["host", "create", "db1", "--iqn", IQN_A]);
    let standby = c.spawn_other_cnode("c2");
    let via = forwarding_api(&standby);
    let owner = c.cnode.as_ref().unwrap();
    let owner_api = owner.api.clone();
    let owner_id = file(owner, "cnode-id");
    let (owner_admin, owner_ro) = (file(owner, "api-token"), file(owner, "api-token-read-only"));
    let (admin, ro) = (
        file(&standby, "api-token"),
        file(&standby, "api-token-read-only"),
    );
    c.step(&format!(
        "standby {} forwards its API from {via}",
        standby.name
    ));
    let host = || -> Value {
        let a = call(
            &owner_api,
            "GET",
            "/api/v1/hosts/db1",
            None,
            &owner_admin,
            &[],
        );
        assert_eq!(a.status, 200, "{}", a.body);
        serde_json::from_str(&a.body).unwrap()
    };

    // Reads through the standby: the owner answers, naming the token's role.
    for (token, role) in [
        (&ro, "read-only"),
        (&owner_ro, "read-only"),
        (&admin, "admin"),
    ] {
        let a = call(&via, "GET", "/api/v1/hosts/db1", None, token, &[]);
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.header("x-weft-role"), Some(role), "{:?}", a.headers);
        assert_eq!(a.header("x-weft-served-by"), Some(owner_id.as_str()));
    }
    let wrong = call(&via, "GET", "/api/v1/hosts", None, "wrong", &[]);
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert_eq!(
        wrong.header("x-weft-role"),
        None,
        "a role for a wrong token"
    );

    // Every host edit with a read-only token through the standby is refused, whoever's token
    // it is and whatever role the caller claims in its own header.
    let chap = json!({"chap_user": "db1", "chap_secret": SECRET});
    let edits: Vec<(&str, String, Option<Value>)> = vec![
        (
            "POST",
            "/api/v1/hosts/db1/initiators".into(),
            Some(json!({ "iqn": IQN_B })),
        ),
        (
            "DELETE",
            format!("/api/v1/hosts/db1/initiators/{IQN_A}"),
            None,
        ),
        ("PUT", "/api/v1/hosts/db1/chap".into(), Some(chap.clone())),
        ("DELETE", "/api/v1/hosts/db1/chap".into(), None),
        ("DELETE", "/api/v1/hosts/db1".into(), None),
        (
            "POST",
            "/api/v1/hosts".into(),
            Some(json!({"name": "db2", "iqns": [IQN_C]})),
        ),
    ];
    let before = host();
    for token in [&ro, &owner_ro] {
        for (method, path, body) in &edits {
            for forged in [&[][..], &[("x-weft-role", "admin")][..]] {
                let a = call(&via, method, path, body.as_ref(), token, forged);
                assert_eq!(
                    a.status, 403,
                    "{method} {path} read-only through the standby: {}",
                    a.body
                );
                assert!(a.body.contains("read-only"), "{}", a.body);
                assert_eq!(a.header("x-weft-role"), Some("read-only"));
                assert_eq!(a.header("x-weft-served-by"), Some(owner_id.as_str()));
            }
        }
    }
    assert_eq!(host(), before, "a read-only token changed the host");
    let hosts = call(&owner_api, "GET", "/api/v1/hosts", None, &owner_admin, &[]);
    assert!(!hosts.body.contains("db2"), "{}", hosts.body);
    // The owner's audit log has each refusal, as read-only.
    let audit = call(&owner_api, "GET", "/api/v1/audit", None, &owner_admin, &[]);
    let entries: Vec<Value> = serde_json::from_str(&audit.body).expect("audit JSON");
    for (method, path, _) in &edits {
        let refused = entries
            .iter()
            .filter(|e| {
                e["role"] == "read-only"
                    && e["status"] == 403
                    && e["method"] == *method
                    && e["path"] == path.as_str()
            })
            .count();
        assert_eq!(refused, 4, "{method} {path} in the audit log: {entries:#?}");
    }
    c.step("read-only tokens through the standby: reads answered, every host edit refused");

    // The standby's admin token makes the edits through it.
    let (method, path, body) = &edits[0];
    let a = call(&via, method, path, body.as_ref(), &admin, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.header("x-weft-role"), Some("admin"));
    assert_eq!(host()["iqns"], json!([IQN_A, IQN_B]));
    let a = call(
        &via,
        "PUT",
        "/api/v1/hosts/db1/chap",
        Some(&chap),
        &admin,
        &[],
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(!a.body.contains(SECRET), "the secret came back: {}", a.body);
    assert_eq!(host()["chap_user"], "db1");
    let a = call(&via, "DELETE", "/api/v1/hosts/db1/chap", None, &admin, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    let (method, path, _) = &edits[1];
    let a = call(&via, method, path, None, &admin, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    let now = host();
    assert_eq!(now["iqns"], json!([IQN_B]), "{now}");
    assert!(now["chap_user"].is_null(), "{now}");
    c.step("the standby's admin token edits the host through it");

    // The web UI through the standby: a read-only viewer sees no host actions...
    let browser = Browser::launch();
    let mut page = browser.page();
    page.navigate(&format!("{via}/"));
    page.wait_for(
        "the login page through the standby",
        "window.weft && weft.page === 'login'",
        PAGE_TIMEOUT,
    );
    page.login(&ro);
    page.wait_for(
        "the list, read-only, through the standby",
        "weft.page === 'volumes' && weft.role === 'read-only'",
        PAGE_TIMEOUT,
    );
    page.go("#/hosts");
    page.wait_for(
        "the hosts page, read-only",
        "weft.page === 'hosts' && weft.hosts.initiators('db1').length === 1",
        PAGE_TIMEOUT,
    );
    let shown = page.eval(
        "['#hs-create', '#hs-table form.add-initiator', '#hs-table form.set-chap', \
          '#hs-table button.remove-initiator', '#role-tag'] \
           .map((s) => getComputedStyle(document.querySelector(s)).display)",
    );
    let displays = shown.as_array().expect("an array");
    assert!(
        displays[..4].iter().all(|d| *d == "none"),
        "read-only actions shown: {shown}"
    );
    assert_ne!(displays[4], "none", "the header says read-only: {shown}");
    // ...and an admin adds an initiator, which the owner has.
    click(&mut page, "logout");
    page.wait_for("the login page", "weft.page === 'login'", PAGE_TIMEOUT);
    page.login(&admin);
    page.wait_for(
        "the list, as admin, through the standby",
        "weft.page === 'volumes' && weft.role === 'admin'",
        PAGE_TIMEOUT,
    );
    page.go("#/hosts");
    page.wait_for(
        "the hosts page, as admin",
        "weft.page === 'hosts' && weft.hosts.names().includes('db1')",
        PAGE_TIMEOUT,
    );
    page.eval(&format!(
        "const tr = document.querySelector('#hs-table tr[data-host=\"db1\"]'); \
         tr.querySelector('input.add-iqn').value = {}; \
         tr.querySelector('button.add-initiator').click()",
        json!(IQN_C)
    ));
    page.wait_for(
        "the new initiator on the page",
        &format!("weft.hosts.initiators('db1').includes({})", json!(IQN_C)),
        PAGE_TIMEOUT,
    );
    assert_eq!(host()["iqns"], json!([IQN_B, IQN_C]));
    assert_no_page_errors(&mut page, "through the standby");
    c.step("the web UI through the standby: read-only shows no actions, admin edits");
}
