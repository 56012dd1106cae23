//! A fault proxy between the gateway and a real backend: it ends the gateway's TLS with a
//! certificate for the backend's service name (from the APIService's CA, so the gateway's
//! verification passes), opens its own TLS connection to the backend with the same ALPN and the
//! front-proxy client certificate (so the backend still trusts the gateway's `X-Remote-*`
//! headers), and relays the bytes. While armed, it injects one [`Fault`] into the connections
//! it picks, at the byte level, as a broken network or a broken server would.
//!
//! ```ignore
//! let proxy = FaultProxy::start(&world, &addon.host, addon.addr, &[b"http/1.1"]).await;
//! proxy.arm(Fault::Reset, Scope::Path("/namespaces/faulty/"), 1);
//! ```

use super::World;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What happens to a faulted connection.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// The response's first byte is held this long.
    DelayHead(Duration),
    /// The response pauses this long once `after` bytes of its body are through.
    PauseMidBody { after: usize, pause: Duration },
    /// The response ends (TLS close, then FIN) once `keep` bytes of its body are through.
    Truncate { keep: usize },
    /// The connection is reset (RST) as soon as the request arrives.
    Reset,
    /// The request is swallowed: no answer, no FIN, no RST, ever.
    BlackHole,
    /// The answer is an SSH server's greeting instead of HTTP; the connection stays open.
    Garbage,
    /// The response comes one byte per this interval.
    Trickle(Duration),
    /// Once the gateway has sent `after` bytes, nothing more is read from it and nothing more
    /// relayed from the backend; the connection stays open (an HTTP/2 backend that stopped
    /// reading: the gateway's writes stall on flow control, its pings go unanswered).
    StopReading { after: usize },
}

/// Which new connections an armed fault takes.
#[derive(Clone, Copy, Debug)]
pub enum Scope {
    /// Those whose first request line (HTTP/1.1) contains this.
    Path(&'static str),
    /// All, the availability checks' included.
    Every,
}

#[derive(Default)]
struct Armed {
    fault: Option<(Fault, Scope)>,
    /// Connections still to take it.
    left: usize,
}

/// A running fault proxy; its tasks end with the test's runtime.
pub struct FaultProxy {
    pub addr: SocketAddr,
    armed: Arc<Mutex<Armed>>,
    hits: Arc<AtomicUsize>,
}

/// The TLS ends of the proxy: toward the gateway and toward the backend.
struct Ends {
    acceptor: tokio_rustls::TlsAcceptor,
    upstream: Arc<rustls::ClientConfig>,
    host: ServerName<'static>,
    backend: SocketAddr,
}

impl FaultProxy {
    /// Listens on a free loopback port in front of `backend`, whose serving certificate names
    /// `host` and comes from `world.addon_ca`, offering the gateway the protocols in `alpn`
    /// (the faults that act on a response's body need HTTP/1.1, where a head ends at the first
    /// blank line).
    pub async fn start(
        world: &World,
        host: &str,
        backend: SocketAddr,
        alpn: &[&[u8]],
    ) -> FaultProxy {
        let (crt, key) = world
            .pki
            .leaf("fault-proxy", &world.addon_ca, host, &[], &[host], true);
        let load = |p: &std::path::Path| apigw_core::tls::load_certs(p).unwrap();
        let mut server = rustls::ServerConfig::builder_with_provider(apigw_core::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(load(&crt), apigw_core::tls::load_key(&key).unwrap())
            .unwrap();
        server.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let roots = apigw_core::tls::root_store(
            &load(&world.pki.path(&format!("{}.crt", world.addon_ca.name))),
            "addon-ca",
        )
        .unwrap();
        let upstream = rustls::ClientConfig::builder_with_provider(apigw_core::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(
                load(&world.pki.path("proxy-client.crt")),
                apigw_core::tls::load_key(&world.pki.path("proxy-client.key")).unwrap(),
            )
            .unwrap();
        let ends = Arc::new(Ends {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            upstream: Arc::new(upstream),
            host: ServerName::try_from(host.to_string()).unwrap(),
            backend,
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = FaultProxy {
            addr: listener.local_addr().unwrap(),
            armed: Arc::default(),
            hits: Arc::default(),
        };
        let (armed, hits) = (proxy.armed.clone(), proxy.hits.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (ends, armed, hits) = (ends.clone(), armed.clone(), hits.clone());
                tokio::spawn(async move {
                    if let Err(e) = relay(tcp, &ends, &armed, &hits).await {
                        eprintln!("fault proxy: {e}");
                    }
                });
            }
        });
        proxy
    }

    /// The next `times` new connections in `scope` get `fault`.
    pub fn arm(&self, fault: Fault, scope: Scope, times: usize) {
        *self.armed.lock().unwrap() = Armed {
            fault: Some((fault, scope)),
            left: times,
        };
    }

    /// New connections are relayed untouched again (faulted ones stay as they are).
    pub fn disarm(&self) {
        *self.armed.lock().unwrap() = Armed::default();
    }

    /// How many connections took a fault.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::Relaxed)
    }
}

type Error = Box<dyn std::error::Error + Send + Sync>;

async fn relay(
    tcp: TcpStream,
    ends: &Ends,
    armed: &Mutex<Armed>,
    hits: &AtomicUsize,
) -> Result<(), Error> {
    let mut down = ends.acceptor.accept(tcp).await?;
    let alpn = down.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    // The request's first bytes, read before the choice, are sent on afterwards.
    let mut first = vec![0; 16 * 1024];
    let n = down.read(&mut first).await?;
    first.truncate(n);
    let fault = take(armed, &first);
    if fault.is_some() {
        hits.fetch_add(1, Ordering::Relaxed);
    }
    match fault {
        Some(Fault::Reset) => {
            // SO_LINGER 0: closing sends RST instead of FIN.
            down.get_ref().0.set_zero_linger()?;
            drop(down);
            return Ok(());
        }
        Some(Fault::BlackHole) => return swallow(down).await,
        Some(Fault::Garbage) => {
            down.write_all(b"SSH-2.0-OpenSSH_9.6p1 Debian-4\r\n")
                .await?;
            down.flush().await?;
            return swallow(down).await;
        }
        _ => {}
    }
    let mut tls = (*ends.upstream).clone();
    tls.alpn_protocols = alpn.into_iter().collect();
    let tcp = TcpStream::connect(ends.backend).await?;
    let mut up = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(ends.host.clone(), tcp)
        .await?;
    up.write_all(&first).await?;
    let (down_r, down_w) = tokio::io::split(down);
    let (up_r, up_w) = tokio::io::split(up);
    let frozen = Arc::new(AtomicBool::new(false));
    let requests = tokio::spawn(requests(down_r, up_w, fault, first.len(), frozen.clone()));
    let answered = responses(up_r, down_w, fault, frozen).await;
    requests.abort();
    answered
}

/// The armed fault, when this connection (whose first bytes are `first`) takes it.
fn take(armed: &Mutex<Armed>, first: &[u8]) -> Option<Fault> {
    let mut armed = armed.lock().unwrap();
    let (fault, scope) = armed.fault?;
    let line = first.split(|&b| b == b'\n').next().unwrap_or_default();
    let picked = match scope {
        Scope::Every => true,
        Scope::Path(p) => line.windows(p.len()).any(|w| w == p.as_bytes()),
    };
    if !picked || armed.left == 0 {
        return None;
    }
    armed.left -= 1;
    Some(fault)
}

/// Reads and drops everything the gateway sends; never answers, never closes.
async fn swallow(mut down: impl AsyncRead + Unpin) -> Result<(), Error> {
    let mut buf = vec![0; 16 * 1024];
    while down.read(&mut buf).await? > 0 {}
    std::future::pending().await
}

/// Gateway to backend, `sent` bytes already through; sets `frozen` when the fault stops it.
async fn requests(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    fault: Option<Fault>,
    mut sent: usize,
    frozen: Arc<AtomicBool>,
) -> Result<(), Error> {
    let mut buf = vec![0; 16 * 1024];
    loop {
        if let Some(Fault::StopReading { after }) = fault {
            if sent >= after {
                frozen.store(true, Ordering::Relaxed);
                return std::future::pending().await;
            }
        }
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(to.shutdown().await?);
        }
        to.write_all(&buf[..n]).await?;
        to.flush().await?;
        sent += n;
    }
}

/// Backend to gateway, with the fault's effect on the first response (HTTP/1.1: its head
/// ends at the first blank line).
async fn responses(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    fault: Option<Fault>,
    frozen: Arc<AtomicBool>,
) -> Result<(), Error> {
    let mut buf = vec![0; 16 * 1024];
    // The last four bytes of the head seen so far; body bytes relayed; the pause taken.
    let (mut tail, mut head_done, mut body, mut paused) = ([0u8; 4], false, 0usize, false);
    let mut first_byte = true;
    loop {
        let n = from.read(&mut buf).await?;
        if frozen.load(Ordering::Relaxed) {
            return std::future::pending().await;
        }
        if n == 0 {
            return Ok(to.shutdown().await?);
        }
        let mut i = 0;
        while i < n {
            if std::mem::take(&mut first_byte) {
                if let Some(Fault::DelayHead(d)) = fault {
                    tokio::time::sleep(d).await;
                }
            }
            if let Some(Fault::Trickle(every)) = fault {
                to.write_all(&buf[i..=i]).await?;
                to.flush().await?;
                tokio::time::sleep(every).await;
                i += 1;
                continue;
            }
            let in_body = head_done;
            let end = if in_body {
                // Up to the body offset where the fault acts, else the whole rest.
                let at = match fault {
                    Some(Fault::PauseMidBody { after, .. }) if !paused => Some(after),
                    Some(Fault::Truncate { keep }) => Some(keep),
                    _ => None,
                };
                match at {
                    Some(at) if body == at => {
                        to.flush().await?;
                        if let Some(Fault::PauseMidBody { pause, .. }) = fault {
                            tokio::time::sleep(pause).await;
                            paused = true;
                            continue;
                        }
                        to.shutdown().await?;
                        return std::future::pending().await;
                    }
                    Some(at) if at > body => n.min(i + (at - body)),
                    _ => n,
                }
            } else {
                let mut j = i;
                while j < n && !head_done {
                    tail = [tail[1], tail[2], tail[3], buf[j]];
                    head_done = &tail == b"\r\n\r\n";
                    j += 1;
                }
                j
            };
            to.write_all(&buf[i..end]).await?;
            if in_body {
                body += end - i;
            }
            i = end;
        }
        to.flush().await?;
    }
}
