//! The web UI: static files from `ui/` embedded in the binary, so an install needs no Node
//! build and the browser needs no network but this server's. `/` redirects to `/ui/`, `/ui/`
//! is the single page, `/ui/assets/{file}` its scripts, styles and the vendored uPlot.
//!
//! The files hold no secret, so they are served without the token; the page asks for the token
//! and sends it with every API call it makes. Every answer carries a strict
//! Content-Security-Policy: scripts and styles from this origin only (no inline script), API
//! calls to this origin only, no frames.
//!
//! No state and no I/O: the router is generic over the API's state so it merges into it.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

/// Only this origin may supply scripts, styles, images and API answers. uPlot sets styles
/// through the CSSOM (element.style), which `style-src 'self'` allows; `data:` images are the
/// canvases' exports.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Our own files change with every build of weft: the browser asks again each time, and an
/// unchanged file costs a 304 (see [`etag`]).
const CACHE_REVALIDATE: &str = "no-cache";

/// The vendored library's path carries its version, so it never changes under that name.
const CACHE_IMMUTABLE: &str = "public, max-age=31536000, immutable";

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// One embedded file.
struct Asset {
    /// The name under `/ui/assets/`.
    name: &'static str,
    body: &'static [u8],
    content_type: &'static str,
    cache_control: &'static str,
}

const INDEX_HTML: &[u8] = include_bytes!("../../../ui/index.html");

/// Every file under `/ui/assets/`. The page loads the scripts in this order (see index.html).
const ASSETS: &[Asset] = &[
    Asset {
        name: "app.css",
        body: include_bytes!("../../../ui/app.css"),
        content_type: CSS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "api.js",
        body: include_bytes!("../../../ui/api.js"),
        content_type: JS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "format.js",
        body: include_bytes!("../../../ui/format.js"),
        content_type: JS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "cluster.js",
        body: include_bytes!("../../../ui/cluster.js"),
        content_type: JS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "volumes.js",
        body: include_bytes!("../../../ui/volumes.js"),
        content_type: JS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "volume_actions.js",
        body: include_bytes!("../../../ui/volume_actions.js"),
        content_type: JS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "volume_qos.js",
        body: include_bytes!("../../../ui/volume_qos.js"),
        content_type: JS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "volume.js",
        body: include_bytes!("../../../ui/volume.js"),
        content_type: JS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "host_edits.js",
        body: include_bytes!("../../../ui/host_edits.js"),
        content_type: JS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "hosts.js",
        body: include_bytes!("../../../ui/hosts.js"),
        content_type: JS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "app.js",
        body: include_bytes!("../../../ui/app.js"),
        content_type: JS,
        cache_control: CACHE_REVALIDATE,
    },
    Asset {
        name: "uplot-1.6.32/uPlot.iife.min.js",
        body: include_bytes!("../../../ui/vendor/uplot-1.6.32/uPlot.iife.min.js"),
        content_type: JS,
        cache_control: CACHE_IMMUTABLE,
    },
    Asset {
        name: "uplot-1.6.32/uPlot.min.css",
        body: include_bytes!("../../../ui/vendor/uplot-1.6.32/uPlot.min.css"),
        content_type: CSS,
        cache_control: CACHE_IMMUTABLE,
    },
];

/// The UI's routes; merge into the API router (no token needed).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(index))
        .route("/ui/assets/{*file}", get(asset))
}

async fn index(headers: HeaderMap) -> Response {
    serve(&headers, INDEX_HTML, HTML, CACHE_REVALIDATE)
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => serve(&headers, a.body, a.content_type, a.cache_control),
        None => with_policy((StatusCode::NOT_FOUND, "no such file\n").into_response()),
    }
}

/// The file, or 304 when the browser's copy is this build's.
fn serve(
    request: &HeaderMap,
    body: &'static [u8],
    content_type: &'static str,
    cache_control: &'static str,
) -> Response {
    let tag = etag(body);
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, content_type)], body).into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    with_policy(response)
}

fn with_policy(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// A strong validator: FNV-1a of the content (fixed at build time; hashing the largest file,
/// uPlot's 50 KB, takes microseconds, so it is not cached).
fn etag(body: &[u8]) -> String {
    format!("\"{:016x}\"", fnv1a(body))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_name_is_unique_and_typed() {
        for (i, a) in ASSETS.iter().enumerate() {
            assert!(!a.body.is_empty(), "{} is empty", a.name);
            assert!(
                ASSETS[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
            let ext = a.name.rsplit('.').next().unwrap();
            let want = if ext == "js" { JS } else { CSS };
            assert_eq!(a.content_type, want, "{}", a.name);
        }
    }

    #[test]
    fn index_loads_only_served_assets_and_no_inline_script() {
        let html = std::str::from_utf8(INDEX_HTML).unwrap();
        for part in html.split("assets/").skip(1) {
            let name = part.split('"').next().unwrap();
            assert!(
                ASSETS.iter().any(|a| a.name == name),
                "index.html loads {name}, which is not served"
            );
        }
        assert!(!html.contains("<script>"), "inline script in index.html");
        assert!(!html.contains("style=\""), "inline style in index.html");
    }

    #[test]
    fn a_current_copy_gets_304_and_every_answer_the_policy() {
        let mut request = HeaderMap::new();
        let fresh = serve(&request, INDEX_HTML, HTML, CACHE_REVALIDATE);
        assert_eq!(fresh.status(), StatusCode::OK);
        let tag = fresh.headers()[header::ETAG].clone();
        assert_eq!(
            fresh.headers()[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY
        );
        request.insert(header::IF_NONE_MATCH, tag);
        let cached = serve(&request, INDEX_HTML, HTML, CACHE_REVALIDATE);
        assert_eq!(cached.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(cached.headers()[header::CACHE_CONTROL], CACHE_REVALIDATE);
        request.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"old\""));
        let stale = serve(&request, INDEX_HTML, HTML, CACHE_REVALIDATE);
        assert_eq!(stale.status(), StatusCode::OK);
    }

    #[test]
    fn etag_is_stable_and_content_dependent() {
        assert_eq!(etag(INDEX_HTML), etag(INDEX_HTML));
        assert_ne!(etag(ASSETS[0].body), etag(ASSETS[1].body));
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
    }
}
