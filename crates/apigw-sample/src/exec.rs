//! The `flunders/{name}/exec` subresource: a WebSocket speaking Kubernetes' channel protocol
//! (`v5.channel.k8s.io`, `v4.channel.k8s.io`) the way kubelet does. Every message starts with
//! its channel: 0 stdin, 1 stdout, 2 stderr, 3 the final `Status` (JSON), 4 terminal resize,
//! and in v5 255 "this stream is closed" (`[255, 0]`: the client closed stdin).
//!
//! Instead of a container it runs a few built-in commands: `cat`, `echo ARGS...`, `env` (the
//! identity the server received), `exit N` / `sh -c "exit N"`; anything else is "command not
//! found" with exit code 127. After the command the status goes out on channel 3 and the
//! WebSocket closes.

use super::{Active, App, User};
use apigw_core::body::{self, Body};
use apigw_core::errors::Status;
use apigw_core::server::RequestBody;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode, Version};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::time::Duration;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// Subprotocols in order of preference.
const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const CLOSE: u8 = 255;

/// How long to wait for the client's half of the closing handshake.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

type Result<T> = std::result::Result<T, Status>;

/// What the exec request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Options {
    argv: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
}

impl Options {
    /// Reads `command` (repeated), `stdin`, `stdout` and `stderr` from the query string.
    fn parse(pairs: &[(String, String)]) -> Result<Self> {
        let flag = |name: &str| {
            pairs
                .iter()
                .any(|(k, v)| k == name && matches!(v.as_str(), "true" | "1"))
        };
        let argv: Vec<String> = pairs
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect();
        if argv.is_empty() {
            return Err(Status::bad_request("you must specify at least 1 command"));
        }
        let opts = Self {
            argv,
            stdin: flag("stdin"),
            stdout: flag("stdout"),
            stderr: flag("stderr"),
        };
        if !(opts.stdin || opts.stdout || opts.stderr) {
            return Err(Status::bad_request(
                "you must specify at least 1 of stdin, stdout, stderr",
            ));
        }
        Ok(opts)
    }
}

/// Answers an exec request on flunder `ns/name` with `101 Switching Protocols` and runs the
/// session on the upgraded connection.
pub(super) fn exec(
    app: &App,
    user: &User,
    ns: &str,
    name: &str,
    pairs: &[(String, String)],
    mut req: Request<RequestBody>,
) -> Result<Response<Body>> {
    app.store.get(ns, name)?;
    let opts = Options::parse(pairs)?;
    let (key, protocol) = check_handshake(req.version(), req.headers())?;
    let on_upgrade = hyper::upgrade::on(&mut req);
    let env = Env {
        user: user.clone(),
        flunder: format!("{ns}/{name}"),
    };
    let launch = Launch {
        protocol,
        opts,
        env,
        stopping: app.stopping.clone(),
        _active: app.stats.exec_started(),
    };
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(io) => session(io, launch).await,
            Err(e) => tracing::debug!(error = %e, "exec: the upgrade did not complete"),
        }
    });
    switching_protocols(&key, protocol)
}

/// The `Sec-WebSocket-Key` and the subprotocol to speak, or why this is no WebSocket request.
fn check_handshake(version: Version, headers: &HeaderMap) -> Result<(String, &'static str)> {
    let tokens = |name: header::HeaderName| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .collect()
    };
    let upgrade_ok = version == Version::HTTP_11
        && tokens(header::UPGRADE).iter().any(|t| t == "websocket")
        && tokens(header::CONNECTION).iter().any(|t| t == "upgrade");
    if !upgrade_ok {
        return Err(Status::bad_request(
            "exec needs an HTTP/1.1 WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)",
        ));
    }
    if tokens(header::SEC_WEBSOCKET_VERSION) != ["13"] {
        return Err(Status::bad_request(
            "unsupported Sec-WebSocket-Version: want 13",
        ));
    }
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.trim().is_empty())
        .ok_or_else(|| Status::bad_request("missing Sec-WebSocket-Key"))?;
    let offered = tokens(header::SEC_WEBSOCKET_PROTOCOL);
    let protocol = PROTOCOLS
        .into_iter()
        .find(|p| offered.iter().any(|o| o == p))
        .ok_or_else(|| {
            Status::bad_request(format!(
                "none of the offered subprotocols {offered:?} is supported; this server speaks {}",
                PROTOCOLS.join(", ")
            ))
        })?;
    Ok((key.trim().to_string(), protocol))
}

fn switching_protocols(key: &str, protocol: &'static str) -> Result<Response<Body>> {
    let accept = HeaderValue::from_str(&derive_accept_key(key.as_bytes()))
        .map_err(|e| Status::internal(format!("Sec-WebSocket-Accept: {e}")))?;
    let mut res = Response::new(body::empty());
    *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = res.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(protocol),
    );
    Ok(res)
}

/// What `env` reports.
struct Env {
    user: User,
    flunder: String,
}

/// A built-in command.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Cat,
    Echo(Vec<String>),
    Env,
    Exit(i32),
    /// `exit` with an argument that is no number.
    BadExit(String),
    NotFound(String),
}

impl Command {
    fn parse(argv: &[String]) -> Self {
        let (first, rest) = match argv.split_first() {
            Some((first, rest)) => (first.as_str(), rest),
            None => return Self::Exit(0),
        };
        match first {
            "sh" | "/bin/sh" | "bash" | "/bin/bash" if rest.first().is_some_and(|a| a == "-c") => {
                let script = rest.get(1).map(String::as_str).unwrap_or_default();
                let words: Vec<String> = script.split_whitespace().map(str::to_string).collect();
                Self::parse(&words)
            }
            "cat" | "/bin/cat" => Self::Cat,
            "echo" | "/bin/echo" => Self::Echo(rest.to_vec()),
            "env" | "/usr/bin/env" => Self::Env,
            "exit" => match rest.first() {
                None => Self::Exit(0),
                Some(n) => n
                    .parse()
                    .map_or_else(|_| Self::BadExit(n.clone()), Self::Exit),
            },
            other => Self::NotFound(other.to_string()),
        }
    }
}

/// The client went away before the command finished: nobody to report a status to.
struct Gone;

/// One client message, as the command sees it.
enum Input {
    Stdin(Bytes),
    StdinClosed,
}

/// The WebSocket of one exec session.
struct Session {
    ws: WebSocketStream<TokioIo<Upgraded>>,
    v5: bool,
    opts: Options,
}

/// Everything a session needs once the connection is upgraded.
struct Launch {
    protocol: &'static str,
    opts: Options,
    env: Env,
    /// Becomes `true` when the server shuts down; the session ends then.
    stopping: watch::Receiver<bool>,
    _active: Active,
}

async fn session(io: Upgraded, mut launch: Launch) {
    let ws = WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Server, None).await;
    let v5 = launch.protocol.starts_with("v5.");
    let mut s = Session {
        ws,
        v5,
        opts: launch.opts,
    };
    let command = Command::parse(&s.opts.argv);
    tracing::debug!(?command, protocol = launch.protocol, "exec session started");
    let outcome = tokio::select! {
        outcome = run(&mut s, &command, &launch.env) => outcome,
        () = stopped(&mut launch.stopping) => {
            s.going_away().await;
            return;
        }
    };
    let Ok(code) = outcome else {
        tracing::debug!("exec: the client left before the command ended");
        return;
    };
    let status = exit_status(code, &s.opts.argv);
    if s.send(ERROR, status.as_bytes()).await.is_ok() {
        s.close().await;
    }
}

/// Resolves once the server is shutting down (or gone).
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    if !*stopping.borrow_and_update() {
        let _ = stopping.changed().await;
    }
}

async fn run(s: &mut Session, command: &Command, env: &Env) -> std::result::Result<i32, Gone> {
    match command {
        Command::Cat => {
            while s.opts.stdin {
                match s.input().await? {
                    Input::Stdin(data) => s.out(STDOUT, &data).await?,
                    Input::StdinClosed => break,
                }
            }
            Ok(0)
        }
        Command::Echo(args) => {
            s.out(STDOUT, format!("{}\n", args.join(" ")).as_bytes())
                .await?;
            Ok(0)
        }
        Command::Env => {
            let text = format!(
                "USER={}\nGROUPS={}\nFLUNDER={}\n",
                env.user.name,
                env.user.groups.join(","),
                env.flunder
            );
            s.out(STDOUT, text.as_bytes()).await?;
            Ok(0)
        }
        Command::Exit(code) => Ok(*code),
        Command::BadExit(arg) => {
            s.out(
                STDERR,
                format!("sh: exit: Illegal number: {arg}\n").as_bytes(),
            )
            .await?;
            Ok(2)
        }
        Command::NotFound(name) => {
            s.out(STDERR, format!("{name}: command not found\n").as_bytes())
                .await?;
            Ok(127)
        }
    }
}

impl Session {
    /// Writes to stdout or stderr, if the client asked for that stream.
    async fn out(&mut self, channel: u8, data: &[u8]) -> std::result::Result<(), Gone> {
        let wanted = match channel {
            STDOUT => self.opts.stdout,
            STDERR => self.opts.stderr,
            _ => true,
        };
        if !wanted || data.is_empty() {
            return Ok(());
        }
        self.send(channel, data).await
    }

    async fn send(&mut self, channel: u8, data: &[u8]) -> std::result::Result<(), Gone> {
        let mut frame = Vec::with_capacity(data.len() + 1);
        frame.push(channel);
        frame.extend_from_slice(data);
        self.ws
            .send(Message::Binary(frame.into()))
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, "exec: writing to the client failed");
                Gone
            })
    }

    /// The next stdin event; resize messages, pings and unknown channels are skipped.
    async fn input(&mut self) -> std::result::Result<Input, Gone> {
        loop {
            let data: Bytes = match self.ws.next().await {
                Some(Ok(Message::Binary(b))) => b,
                Some(Ok(Message::Text(t))) => Bytes::copy_from_slice(t.as_bytes()),
                Some(Ok(Message::Close(_))) | None => return Err(Gone),
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "exec: reading from the client failed");
                    return Err(Gone);
                }
            };
            match data.first() {
                Some(&STDIN) => return Ok(Input::Stdin(data.slice(1..))),
                Some(&CLOSE) if self.v5 && data.get(1..) == Some(&[STDIN][..]) => {
                    return Ok(Input::StdinClosed)
                }
                _ => continue,
            }
        }
    }

    /// Ends the session because the server shuts down: a `1001 Going Away` close, no status.
    async fn going_away(mut self) {
        let frame = CloseFrame {
            code: CloseCode::Away,
            reason: "the server is shutting down".into(),
        };
        if let Err(e) = self.ws.close(Some(frame)).await {
            tracing::debug!(error = %e, "exec: closing the WebSocket failed");
        }
    }

    /// Starts the closing handshake and waits (briefly) for the client's answer.
    async fn close(mut self) {
        if let Err(e) = self.ws.close(None).await {
            tracing::debug!(error = %e, "exec: closing the WebSocket failed");
            return;
        }
        let drain = async { while let Some(Ok(_)) = self.ws.next().await {} };
        if tokio::time::timeout(CLOSE_WAIT, drain).await.is_err() {
            tracing::debug!("exec: the client did not answer the close");
        }
    }
}

/// kubelet's `metav1.Status` on the error channel, field order included.
#[derive(Serialize)]
struct ExitStatus<'a> {
    metadata: Empty,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Details {
    causes: Vec<Cause>,
}

#[derive(Serialize)]
struct Cause {
    reason: &'static str,
    message: String,
}

/// The channel-3 document for exit code `code` of `argv`.
fn exit_status(code: i32, argv: &[String]) -> String {
    let status = if code == 0 {
        ExitStatus {
            metadata: Empty {},
            status: "Success",
            message: None,
            reason: None,
            details: None,
        }
    } else {
        ExitStatus {
            metadata: Empty {},
            status: "Failure",
            message: Some(format!(
                "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                argv.join(" ")
            )),
            reason: Some("NonZeroExitCode"),
            details: Some(Details {
                causes: vec![Cause {
                    reason: "ExitCode",
                    message: code.to_string(),
                }],
            }),
        }
    };
    // Serializing plain structs of strings cannot fail; fall back to a bare failure anyway.
    serde_json::to_string(&status)
        .unwrap_or_else(|_| r#"{"metadata":{},"status":"Failure"}"#.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn commands() {
        assert_eq!(Command::parse(&argv(&["cat"])), Command::Cat);
        assert_eq!(
            Command::parse(&argv(&["echo", "a", "b"])),
            Command::Echo(argv(&["a", "b"]))
        );
        assert_eq!(
            Command::parse(&argv(&["sh", "-c", "exit 3"])),
            Command::Exit(3)
        );
        assert_eq!(Command::parse(&argv(&["exit", "7"])), Command::Exit(7));
        assert_eq!(
            Command::parse(&argv(&["exit", "x"])),
            Command::BadExit("x".into())
        );
        assert_eq!(
            Command::parse(&argv(&["ls", "-l"])),
            Command::NotFound("ls".into())
        );
    }

    #[test]
    fn statuses_are_what_kubelet_sends() {
        assert_eq!(
            exit_status(0, &argv(&["cat"])),
            r#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(
            exit_status(3, &argv(&["sh", "-c", "exit 3"])),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
        );
    }

    #[test]
    fn handshake_checks() {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        h.insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        h.insert(
            header::SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v4.channel.k8s.io, v5.channel.k8s.io"),
        );
        let (key, protocol) = check_handshake(Version::HTTP_11, &h).expect("handshake");
        assert_eq!(
            (key.as_str(), protocol),
            ("dGhlIHNhbXBsZSBub25jZQ==", "v5.channel.k8s.io")
        );
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v4.channel.k8s.io"),
        );
        assert_eq!(
            check_handshake(Version::HTTP_11, &h).map(|r| r.1).ok(),
            Some("v4.channel.k8s.io")
        );
        assert!(check_handshake(Version::HTTP_2, &h).is_err());
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v3.channel.k8s.io"),
        );
        assert!(check_handshake(Version::HTTP_11, &h).is_err());
        h.remove(header::UPGRADE);
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v4.channel.k8s.io"),
        );
        assert!(check_handshake(Version::HTTP_11, &h).is_err());
    }

    #[test]
    fn options_need_a_command_and_a_stream() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let opts = Options::parse(&q(&[
            ("command", "echo"),
            ("command", "hi"),
            ("stdout", "true"),
        ]))
        .expect("options");
        assert_eq!(opts.argv, argv(&["echo", "hi"]));
        assert!(opts.stdout && !opts.stdin && !opts.stderr);
        assert!(Options::parse(&q(&[("stdout", "true")])).is_err());
        assert!(Options::parse(&q(&[("command", "cat")])).is_err());
    }
}
