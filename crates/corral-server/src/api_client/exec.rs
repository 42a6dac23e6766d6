//! The client of the exec route (`corral exec`, `corral rsh`): sends the command, writes
//! the frames' output as it arrives, returns the command's exit status.

use std::io::{Read, Write};

use super::{Client, ClientError, api_error, encode};
use crate::routes::exec::{FRAME_EXIT, FRAME_STDERR, FRAME_STDOUT};

/// Largest frame the client accepts (the server sends at most 16 KiB).
const MAX_FRAME: usize = 1 << 20;

/// What to run where.
#[derive(Clone, Debug)]
pub struct ExecCall<'a> {
    pub namespace: &'a str,
    pub job: &'a str,
    /// `<job>-<role>-<index>` or `<role>-<index>`.
    pub replica: &'a str,
    pub command: &'a [String],
    /// The command's whole input; `None`: /dev/null.
    pub stdin: Option<String>,
}

impl Client {
    /// Runs a command inside a replica; its output goes to `out` and `err` as it comes.
    /// Returns its exit status (the code, or 128 + signal).
    pub fn exec(
        &self,
        call: &ExecCall<'_>,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<i32, ClientError> {
        let path = format!(
            "{}/replicas/{}/exec",
            Self::job_path(call.namespace, call.job),
            encode(call.replica)
        );
        let body = serde_json::json!({ "command": call.command, "stdin": call.stdin });
        let req = self
            .auth(self.agent.post(self.url(&path)))
            .header("Content-Type", "application/json");
        let mut response = req
            .send(body.to_string())
            .map_err(|e| self.connect_error(e))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let text = response.body_mut().read_to_string().unwrap_or_default();
            return Err(api_error(status, &text));
        }
        let mut reader = response.into_body().into_reader();
        let broke = |e: std::io::Error| {
            ClientError::Protocol(format!(
                "the exec stream broke before the command's exit status came ({e}): the \
                 server stopped, or the replica ended"
            ))
        };
        loop {
            let mut head = [0u8; 5];
            reader.read_exact(&mut head).map_err(broke)?;
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if len > MAX_FRAME {
                return Err(ClientError::Protocol(format!(
                    "an exec frame of {len} bytes, larger than {MAX_FRAME}"
                )));
            }
            let mut data = vec![0u8; len];
            reader.read_exact(&mut data).map_err(broke)?;
            let sink: &mut dyn Write = match head[0] {
                FRAME_STDOUT => out,
                FRAME_STDERR => err,
                FRAME_EXIT => {
                    let code: [u8; 4] = data.as_slice().try_into().map_err(|_| {
                        ClientError::Protocol(format!("an exit frame of {len} bytes, not 4"))
                    })?;
                    return Ok(i32::from_be_bytes(code));
                }
                other => {
                    return Err(ClientError::Protocol(format!(
                        "an exec frame of unknown kind {other}"
                    )));
                }
            };
            match sink.write_all(&data).and_then(|()| sink.flush()) {
                Ok(()) => {}
                // `corral exec ... | head`: the reader went away; the command keeps its
                // exit status.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => return Err(ClientError::Output(e)),
            }
        }
    }
}
