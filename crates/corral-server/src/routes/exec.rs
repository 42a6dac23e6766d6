//! `POST .../trainingjobs/{name}/replicas/{replica}/exec`: runs a command inside a running
//! replica (`corral exec`, and the MPI launcher's rsh agent `corral rsh`, which starts
//! `orted` in each worker). Whether it may is the core's rule (`control::decide_exec`); the
//! cluster finds the replica's context; this route spawns the command and streams it.
//!
//! Request: JSON `{"command": [program, args...], "stdin": "text"}` (`stdin` optional: the
//! command's whole input; without it the command reads /dev/null). Answer: `200` with a
//! stream of frames (`application/vnd.corral.exec-frames`), each one byte of kind, a
//! 4-byte big-endian length and that many bytes: 1 stdout, 2 stderr, 3 the exit status
//! (4-byte big-endian signed: the code, or 128 + signal), always last. A client that goes
//! away kills the command, as ssh's remote command dies with its connection.

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use corral_local::cluster::ExecError;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

use super::ApiResult;

/// The frames' content type.
pub const EXEC_CONTENT_TYPE: &str = "application/vnd.corral.exec-frames";
pub const FRAME_STDOUT: u8 = 1;
pub const FRAME_STDERR: u8 = 2;
pub const FRAME_EXIT: u8 = 3;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecRequest {
    command: Vec<String>,
    #[serde(default)]
    stdin: Option<String>,
}

fn frame(kind: u8, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + data.len());
    out.push(kind);
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(data);
    Bytes::from(out)
}

fn refused(e: ExecError) -> ApiError {
    let message = e.to_string();
    match e {
        ExecError::Refused(r) if r.is_forbidden() => {
            ApiError::new(StatusCode::FORBIDDEN, "Forbidden", message)
        }
        ExecError::Refused(r) if r.is_not_found() => ApiError::not_found(message),
        ExecError::Refused(_) | ExecError::Unsupported(_) => {
            ApiError::new(StatusCode::CONFLICT, "Conflict", message)
        }
        ExecError::BadToken(_) => ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", message),
    }
}

pub(super) async fn exec(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name, replica)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult {
    let request: ExecRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the exec request is not valid ({e}); expected {{\"command\": [program, \
             args...], \"stdin\": optional text}}"
        ))
    })?;
    if request.command.is_empty() || request.command[0].is_empty() {
        return Err(ApiError::bad_request(
            "command: empty; give the program and its arguments, e.g. [\"hostname\"]",
        ));
    }
    let auth = caller.exec_auth();
    let context = state
        .with_cluster(move |c| c.exec_context(&auth, &namespace, &name, &replica))
        .await?
        .map_err(refused)?;
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let command = request.command;
    let stdin = request.stdin;
    let std_cmd = context
        .command(&command, stdin.is_some())
        .map_err(|e| ApiError::new(StatusCode::CONFLICT, "Conflict", e.to_string()))?;
    let mut cmd = tokio::process::Command::from(std_cmd);
    cmd.kill_on_drop(true);
    tokio::spawn(async move {
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                // As a shell reports it: 127 for a program not found, else 126.
                let code: i32 = if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                };
                let msg = format!("corral exec: cannot run {:?}: {e}\n", command[0]);
                let _ = tx.send(frame(FRAME_STDERR, msg.as_bytes())).await;
                let _ = tx.send(frame(FRAME_EXIT, &code.to_be_bytes())).await;
                return;
            }
        };
        if let (Some(mut input), Some(text)) = (child.stdin.take(), stdin) {
            tokio::spawn(async move {
                let _ = input.write_all(text.as_bytes()).await;
                // Dropping `input` closes it: the command sees the end of its input.
            });
        }
        let out = child
            .stdout
            .take()
            .map(|o| pump(o, FRAME_STDOUT, tx.clone()));
        let err = child
            .stderr
            .take()
            .map(|e| pump(e, FRAME_STDERR, tx.clone()));
        // Both streams first, so that the exit status is the last frame. A client that
        // went away ends the pumps early; the child is then killed when dropped.
        let (out_ok, err_ok) = tokio::join!(
            async {
                match out {
                    Some(p) => p.await,
                    None => true,
                }
            },
            async {
                match err {
                    Some(p) => p.await,
                    None => true,
                }
            }
        );
        if !(out_ok && err_ok) {
            return;
        }
        let code = match child.wait().await {
            Ok(status) => corral_local::exec::exit_code(status),
            Err(_) => 255,
        };
        let _ = tx.send(frame(FRAME_EXIT, &code.to_be_bytes())).await;
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<Bytes, std::io::Error>(b), rx))
    });
    Ok((
        [(header::CONTENT_TYPE, EXEC_CONTENT_TYPE)],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Copies one output of the command into frames; false once the client is gone.
async fn pump(mut from: impl AsyncRead + Unpin, kind: u8, tx: mpsc::Sender<Bytes>) -> bool {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return true,
            Ok(n) => {
                if tx.send(frame(kind, &buf[..n])).await.is_err() {
                    return false;
                }
            }
        }
    }
}
