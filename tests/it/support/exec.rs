//! A WebSocket exec client speaking Kubernetes' channel protocol (`v5.channel.k8s.io`,
//! `v4.channel.k8s.io`) through the gateway, as kubectl does: every message starts with its
//! channel (0 stdin, 1 stdout, 2 stderr, 3 the final `Status`, 255 in v5 a stream's close).

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

pub const V5: &str = "v5.channel.k8s.io";
pub const V4: &str = "v4.channel.k8s.io";

/// How long a session may stay quiet before the test fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// An exec session.
pub struct Exec {
    ws: WebSocketStream<TlsStream<TcpStream>>,
    /// The subprotocol the server chose.
    pub protocol: String,
}

/// What a finished exec printed and its channel-3 status.
#[derive(Debug, Default)]
pub struct Outcome {
    pub stdout: String,
    pub stderr: String,
    pub status: Value,
}

impl Exec {
    /// Starts `argv` at `exec_url` (`wss://localhost:PORT/.../NAME/exec`) over `tls` (an
    /// HTTP/1.1 connection to the gateway), offering `protocols`, with stdin, stdout and
    /// stderr, and claiming to be mallory in `system:masters` with `X-Remote-*` headers the
    /// gateway must drop.
    pub async fn start(
        tls: TlsStream<TcpStream>,
        exec_url: &str,
        argv: &[&str],
        protocols: &str,
    ) -> Exec {
        let mut query: Vec<String> = argv
            .iter()
            .map(|a| format!("command={}", a.replace(' ', "%20")))
            .collect();
        query.extend(["stdin=true", "stdout=true", "stderr=true"].map(str::to_string));
        let url = format!("{exec_url}?{}", query.join("&"));
        let mut req = url.into_client_request().expect("WebSocket request");
        let h = req.headers_mut();
        h.insert("sec-websocket-protocol", protocols.parse().expect("header"));
        h.insert("x-remote-user", "mallory".parse().expect("header"));
        h.insert("x-remote-group", "system:masters".parse().expect("header"));
        let (ws, res) = tokio::time::timeout(PATIENCE, tokio_tungstenite::client_async(req, tls))
            .await
            .expect("no WebSocket handshake answer in time")
            .unwrap_or_else(|e| panic!("WebSocket handshake through the gateway failed: {e:?}"));
        let protocol = res
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        Exec { ws, protocol }
    }

    pub async fn send(&mut self, channel: u8, data: &[u8]) {
        let mut frame = vec![channel];
        frame.extend_from_slice(data);
        self.ws
            .send(Message::Binary(frame.into()))
            .await
            .expect("send to the exec session");
    }

    /// The next message on `channel` (pings and other channels are skipped).
    pub async fn next_on(&mut self, channel: u8) -> Vec<u8> {
        let read = async {
            loop {
                match self.ws.next().await {
                    Some(Ok(Message::Binary(b))) if b.first() == Some(&channel) => {
                        return b[1..].to_vec()
                    }
                    Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_))) => {}
                    other => panic!("expected a message on channel {channel}, got {other:?}"),
                }
            }
        };
        tokio::time::timeout(PATIENCE, read)
            .await
            .expect("the exec session went quiet")
    }

    /// The next message of any kind, or None when the stream ended; fails on timeout.
    pub async fn next_message(
        &mut self,
    ) -> Option<Result<Message, tokio_tungstenite::tungstenite::Error>> {
        tokio::time::timeout(PATIENCE, self.ws.next())
            .await
            .expect("the exec session went quiet")
    }

    /// Reads every message until the server closes the WebSocket.
    pub async fn finish(mut self) -> Outcome {
        let read = async {
            let mut out = Outcome::default();
            while let Some(msg) = self.ws.next().await {
                let data = match msg {
                    Ok(Message::Binary(b)) => b,
                    Ok(Message::Close(_)) => break,
                    Ok(_) => continue,
                    Err(e) => panic!("the exec session failed: {e}"),
                };
                let text = String::from_utf8_lossy(data.get(1..).unwrap_or_default()).into_owned();
                match data.first() {
                    Some(1) => out.stdout.push_str(&text),
                    Some(2) => out.stderr.push_str(&text),
                    Some(3) => {
                        out.status = serde_json::from_str(&text)
                            .unwrap_or_else(|e| panic!("the status is not JSON ({e}): {text}"))
                    }
                    other => panic!("unexpected channel {other:?}"),
                }
            }
            out
        };
        tokio::time::timeout(PATIENCE, read)
            .await
            .expect("the exec session did not end")
    }
}
