//! The web dashboard: one page (`/`) and its assets (`/ui/...`), built into the binary,
//! served by the embedded server and by the operator alike.
//!
//! The page is a Preact + htm application (vendored, see `assets/dashboard/vendor/`) that
//! reads the API as any client does (bearer token included) and keeps up through
//! `/api/v1/watch`; it decides nothing. The assets carry no data, so they are served
//! without a token. Each is gzipped once, on first use, and sent gzipped to browsers that
//! accept it; vendored files have their version in their name and are cached for good, the
//! application's own files are revalidated by ETag.

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One file of the dashboard.
struct Asset {
    /// Its name under `/ui/` (`index.html` is also `/`).
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    /// A versioned vendored file: it never changes under this name.
    immutable: bool,
}

macro_rules! asset {
    ($name:literal, $type:literal, $immutable:literal) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("../assets/dashboard/", $name)),
            immutable: $immutable,
        }
    };
}

static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8", false),
    asset!("app.js", "text/javascript; charset=utf-8", false),
    asset!("pages.js", "text/javascript; charset=utf-8", false),
    asset!("job.js", "text/javascript; charset=utf-8", false),
    asset!("live.js", "text/javascript; charset=utf-8", false),
    asset!("runs.js", "text/javascript; charset=utf-8", false),
    asset!("serving.js", "text/javascript; charset=utf-8", false),
    asset!("usage.js", "text/javascript; charset=utf-8", false),
    asset!("charts.js", "text/javascript; charset=utf-8", false),
    asset!("style.css", "text/css; charset=utf-8", false),
    asset!(
        "vendor/preact-10.29.8.module.js",
        "text/javascript; charset=utf-8",
        true
    ),
    asset!(
        "vendor/preact-hooks-10.29.8.module.js",
        "text/javascript; charset=utf-8",
        true
    ),
    asset!(
        "vendor/htm-3.1.1.module.js",
        "text/javascript; charset=utf-8",
        true
    ),
    asset!(
        "vendor/dagre-3.1.3.module.js",
        "text/javascript; charset=utf-8",
        true
    ),
    asset!(
        "vendor/uplot-1.6.32.module.js",
        "text/javascript; charset=utf-8",
        true
    ),
    asset!(
        "vendor/uplot-1.6.32.min.css",
        "text/css; charset=utf-8",
        true
    ),
];

/// What is made of each asset once: its gzipped body and its ETag.
struct Prepared {
    gzipped: Vec<u8>,
    etag: String,
}

fn prepared() -> &'static [Prepared] {
    static PREPARED: OnceLock<Vec<Prepared>> = OnceLock::new();
    PREPARED.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                use sha2::Digest;
                let digest = sha2::Sha256::digest(a.body);
                let etag = format!(
                    "\"{}\"",
                    digest
                        .iter()
                        .take(12)
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                );
                Prepared {
                    gzipped: gzip(a.body),
                    etag,
                }
            })
            .collect()
    })
}

fn gzip(body: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(body);
    enc.finish().unwrap_or_default()
}

/// The dashboard's files: how many, their bytes and their bytes gzipped (what a browser
/// downloads), for `corral bench dashboard` and the size check.
pub fn bundle_size() -> BundleSize {
    BundleSize {
        files: ASSETS.len(),
        bytes: ASSETS.iter().map(|a| a.body.len()).sum(),
        gzipped_bytes: prepared().iter().map(|p| p.gzipped.len()).sum(),
    }
}

#[derive(Clone, Copy, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleSize {
    pub files: usize,
    pub bytes: usize,
    pub gzipped_bytes: usize,
}

/// `/` and `/ui/{*file}`.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route(
            "/ui/{*file}",
            get(|Path(file): Path<String>, headers: HeaderMap| async move {
                serve(&file, &headers)
            }),
        )
}

fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some(i) = ASSETS.iter().position(|a| a.name == name) else {
        let known: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        let message = format!(
            "the dashboard has no file {name}; it has {}",
            known.join(", ")
        );
        // The API's error body (`{"error": {"code", "message"}}`).
        let body = serde_json::json!({"error": {"code": "NotFound", "message": message}});
        return (StatusCode::NOT_FOUND, axum::Json(body)).into_response();
    };
    let (asset, prep) = (&ASSETS[i], &prepared()[i]);
    let cache = if asset.immutable {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let etag = HeaderValue::from_str(&prep.etag).unwrap_or(HeaderValue::from_static("\"\""));
    let mut response = if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == prep.etag.as_bytes())
    {
        StatusCode::NOT_MODIFIED.into_response()
    } else if accepts_gzip(headers) {
        let mut r = prep.gzipped.clone().into_response();
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        r
    } else {
        asset.body.into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(header::ETAG, etag);
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or_default().trim();
            // `gzip;q=0` refuses it.
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every asset the page loads is served, and what index.html imports is an asset.
    #[test]
    fn index_names_only_served_assets() {
        let index = std::str::from_utf8(ASSETS[0].body).expect("UTF-8");
        for part in index.split("/ui/").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| !matches!(c, '"' | '\'' | '?'))
                .collect();
            assert!(
                ASSETS.iter().any(|a| a.name == name),
                "index.html loads /ui/{name}, which is not served"
            );
        }
    }

    #[test]
    fn gzip_is_negotiated() {
        let mut h = HeaderMap::new();
        assert!(!accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip, br"),
        );
        assert!(accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br, gzip;q=0"),
        );
        assert!(!accepts_gzip(&h));
    }

    #[test]
    fn the_bundle_is_small_and_gzip_round_trips() {
        let size = bundle_size();
        assert_eq!(size.files, ASSETS.len());
        assert!(size.gzipped_bytes < size.bytes);
        // The issue's limit: the whole bundle under 300 KB gzipped.
        assert!(size.gzipped_bytes < 300 * 1000, "{size:?}");
        let mut out = Vec::new();
        use std::io::Read;
        flate2::read::GzDecoder::new(prepared()[0].gzipped.as_slice())
            .read_to_end(&mut out)
            .expect("gunzip");
        assert_eq!(out, ASSETS[0].body);
    }
}
