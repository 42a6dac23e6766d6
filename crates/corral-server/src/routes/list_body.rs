//! The body of every list answer, `{"items": [...]}`, written without an intermediate
//! `Value` (lists are the largest answers).

use axum::http::header;
use axum::response::{IntoResponse, Response};
use corral_local::cluster::SummaryRow;

use crate::error::ApiError;

/// A list response, `{"items": [...]}`, serialized straight from the rows (no
/// intermediate `Value`: a list of 10,000 jobs is 2.5 MB).
#[derive(serde::Serialize)]
struct Items<T> {
    items: Vec<T>,
}

/// Bytes reserved per listed row before serializing (a job summary is about 250).
const ITEM_BYTES_HINT: usize = 256;

/// A list of jobs: the rows' JSON, made when each job last changed, joined. The same
/// bytes as [`items`] of their summaries, without serializing every job again.
pub(super) fn job_rows(rows: &[SummaryRow]) -> Response {
    const OPEN: &str = "{\"items\":[";
    const CLOSE: &str = "]}";
    // Each row's text is checked as UTF-8 when taken: once, not again for the length.
    let texts: Vec<&str> = rows.iter().map(SummaryRow::json).collect();
    let len = OPEN.len() + CLOSE.len() + texts.iter().map(|t| t.len() + 1).sum::<usize>();
    let mut body = String::with_capacity(len);
    body.push_str(OPEN);
    for (i, text) in texts.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(text);
    }
    body.push_str(CLOSE);
    (
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from(body),
    )
        .into_response()
}

pub(super) fn items<T: serde::Serialize>(items: Vec<T>) -> Response {
    // Into a buffer sized for the rows up front: `Json` writes into a small `BytesMut`
    // that grows by copying, one `put_slice` per token, which was half of a 10,000-job
    // list's time.
    let mut body = Vec::with_capacity(16 + items.len() * ITEM_BYTES_HINT);
    match serde_json::to_writer(&mut body, &Items { items }) {
        Ok(()) => (
            [(header::CONTENT_TYPE, "application/json")],
            axum::body::Body::from(body),
        )
            .into_response(),
        Err(e) => ApiError::internal(format!("cannot serialize the list: {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_local::cluster::{JobState, JobSummary};
    use jiff::Timestamp;

    fn summary(name: &str, queue: &str) -> JobSummary {
        JobSummary {
            namespace: "team-a".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            framework: "pytorch".into(),
            queue: queue.into(),
            state: JobState::Running,
            replicas_ready: 3,
            replicas_total: 4,
            gpus: 8,
            created: Timestamp::from_millisecond(1_795_000_000_123).expect("in range"),
            restarts: 1,
            preemptions: 2,
        }
    }

    async fn body_of(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        String::from_utf8(bytes.to_vec()).expect("UTF-8")
    }

    /// The joined rows are byte for byte what serializing the summaries gives, so the
    /// API's format does not depend on which path made it.
    #[tokio::test]
    async fn joined_rows_are_the_serialized_list() {
        for summaries in [
            vec![],
            vec![summary("one", "default")],
            vec![summary("a", "q\"uoted\\"), summary("b", "ünï\ncode")],
        ] {
            let rows: Vec<SummaryRow> = summaries.iter().map(SummaryRow::new).collect();
            let joined = body_of(job_rows(&rows)).await;
            let serialized = body_of(items(summaries.clone())).await;
            assert_eq!(joined, serialized);
            let parsed: serde_json::Value = serde_json::from_str(&joined).expect("JSON");
            assert_eq!(
                parsed["items"].as_array().map(Vec::len),
                Some(summaries.len())
            );
        }
    }
}
