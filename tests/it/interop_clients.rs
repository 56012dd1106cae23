//! Interop: clients no one here wrote (kubectl, the official Python `kubernetes` client),
//! through the gateway, to a backend no one here wrote either (the Go `net/http` addon server
//! in `tests/interop/goaddon`). Every tool is required: a missing one fails the test.

use crate::support;

use crate::support::goaddon::{GoAddon, GoOpts};
use crate::support::tool::{kubectl_async, kubectl_command};
use crate::support::World;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The Go addon behind a gateway, and a kubeconfig for alice.
struct Stack {
    world: World,
    addon: GoAddon,
    gw: support::Gateway,
    kubeconfig: std::path::PathBuf,
}

async fn stack() -> Stack {
    let world = World::new();
    let addon = GoAddon::start(&world, GoOpts::default()).await;
    addon.register(&world);
    let mut cfg = world.config(&[]);
    addon.resolve(&mut cfg);
    let gw = world.gateway(cfg).await;
    let alice = world.client(Some("alice"));
    let available = support::eventually(20, || {
        let alice = alice.clone();
        let addr = gw.addr;
        async move { alice.get(addr, "/apis/interop.example.com/v1").await.status == 200 }
    })
    .await;
    assert!(available, "the Go addon never became available");
    let kubeconfig = world.pki.path("kubeconfig");
    let p = |n: &str| world.pki.path(n).display().to_string();
    let kc = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "gw",
        "clusters": [{"name": "gw", "cluster": {"server": format!("https://127.0.0.1:{}", gw.addr.port()), "certificate-authority": p("ca.crt")}}],
        "users": [{"name": "alice", "user": {"client-certificate": p("alice.crt"), "client-key": p("alice.key")}}],
        "contexts": [{"name": "gw", "context": {"cluster": "gw", "user": "alice", "namespace": "team"}}]
    });
    std::fs::write(&kubeconfig, kc.to_string()).unwrap();
    Stack {
        world,
        addon,
        gw,
        kubeconfig,
    }
}

impl Stack {
    /// Runs kubectl; panics with its output unless it succeeds.
    async fn kubectl(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.try_kubectl(args).await;
        assert!(ok, "kubectl {args:?} failed:\n{stdout}\n{stderr}");
        stdout
    }

    /// Runs kubectl: whether it succeeded, its stdout and its stderr.
    async fn try_kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let ran = kubectl_async(&self.kubeconfig, args).await;
        (ran.succeeded(), ran.stdout(), ran.stderr())
    }

    fn manifest(&self, name: &str, text: &str) -> String {
        let path = self.world.pki.path(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

fn widget(name: &str, color: &str, size: u32) -> String {
    format!(
        "apiVersion: interop.example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  color: {color}\n  size: {size}\n"
    )
}

/// Every kubectl verb users run on an aggregated resource, against Go's `net/http` behind the
/// gateway: discovery, explain, create (server-side field validation), get as a table, as YAML
/// and as JSON, apply (create, then a change), patch, label, annotate, replace, delete, and
/// the errors kubectl prints from the backend's Status.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_verbs_against_a_go_addon_through_the_gateway() {
    let s = stack().await;

    let versions = s.kubectl(&["api-versions"]).await;
    assert!(
        versions.lines().any(|l| l == "interop.example.com/v1"),
        "{versions}"
    );
    let resources = s
        .kubectl(&[
            "api-resources",
            "--api-group=interop.example.com",
            "--no-headers",
        ])
        .await;
    let row: Vec<&str> = resources.split_whitespace().collect();
    assert_eq!(
        row,
        ["widgets", "wg", "interop.example.com/v1", "true", "Widget"],
        "{resources}"
    );
    let explained = s.kubectl(&["explain", "widgets.spec"]).await;
    assert!(
        explained.contains("color") && explained.contains("size"),
        "{explained}"
    );

    let red = s.manifest("red.yaml", &widget("red", "red", 1));
    let created = s.kubectl(&["create", "-f", &red]).await;
    assert_eq!(created.trim(), "widget.interop.example.com/red created");
    let (ok, _, err) = s.try_kubectl(&["create", "-f", &red]).await;
    assert!(!ok && err.contains("already exists"), "{err}");

    let table = s.kubectl(&["get", "widgets"]).await;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header.first(), Some(&"NAME"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("red ")), "{table}");

    let yaml = s.kubectl(&["get", "wg", "red", "-o", "yaml"]).await;
    assert!(
        yaml.contains("name: red")
            && yaml.contains("namespace: team")
            && yaml.contains("color: red"),
        "{yaml}"
    );

    // apply: creates, then changes only what the manifest changed.
    let blue = s.manifest("blue.yaml", &widget("blue", "blue", 2));
    let applied = s.kubectl(&["apply", "-f", &blue]).await;
    assert_eq!(applied.trim(), "widget.interop.example.com/blue created");
    let bluer = s.manifest("blue2.yaml", &widget("blue", "navy", 2));
    let applied = s.kubectl(&["apply", "-f", &bluer]).await;
    assert_eq!(applied.trim(), "widget.interop.example.com/blue configured");
    let color = s
        .kubectl(&["get", "wg", "blue", "-o", "jsonpath={.spec.color}"])
        .await;
    assert_eq!(color, "navy");

    let patched = s
        .kubectl(&[
            "patch",
            "wg",
            "red",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"size":7}}"#,
        ])
        .await;
    assert_eq!(patched.trim(), "widget.interop.example.com/red patched");
    let patched = s
        .kubectl(&[
            "patch",
            "wg",
            "red",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/color","value":"green"}]"#,
        ])
        .await;
    assert_eq!(patched.trim(), "widget.interop.example.com/red patched");
    s.kubectl(&["label", "wg", "red", "tier=front"]).await;
    s.kubectl(&["annotate", "wg", "red", "note=hello"]).await;
    let json = s.kubectl(&["get", "wg", "red", "-o", "json"]).await;
    let red_now: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        red_now["spec"],
        serde_json::json!({"color": "green", "size": 7})
    );
    assert_eq!(red_now["metadata"]["labels"]["tier"], "front");
    assert_eq!(red_now["metadata"]["annotations"]["note"], "hello");
    let selected = s
        .kubectl(&["get", "wg", "-l", "tier=front", "-o", "name"])
        .await;
    assert_eq!(selected.trim(), "widget.interop.example.com/red");

    // replace: a full object back, resourceVersion and all.
    let mut replaced = red_now.clone();
    replaced["spec"]["size"] = 8.into();
    let file = s.manifest("red-replaced.json", &replaced.to_string());
    let out = s.kubectl(&["replace", "-f", &file]).await;
    assert_eq!(out.trim(), "widget.interop.example.com/red replaced");
    // The same again is stale: the backend's 409 Conflict reaches kubectl.
    let (ok, _, err) = s.try_kubectl(&["replace", "-f", &file]).await;
    assert!(!ok && err.contains("the object has been modified"), "{err}");

    let deleted = s.kubectl(&["delete", "wg", "red", "blue"]).await;
    assert!(
        deleted.contains("\"red\" deleted") && deleted.contains("\"blue\" deleted"),
        "{deleted}"
    );
    // kubectl then asks whether the namespace exists (`/api/v1/namespaces/team`, a 404 here,
    // with no delegate) and prints that Status rather than the backend's.
    let (ok, _, err) = s.try_kubectl(&["get", "wg", "red"]).await;
    assert!(!ok && err.contains("(NotFound)"), "{err}");
    // Go saw every request in origin form, naming the service, as alice or as the gateway.
    let log = std::fs::read_to_string(&s.addon.log).unwrap();
    let requests: Vec<&str> = log.lines().filter(|l| l.contains(" uri=")).collect();
    assert!(requests.len() > 20, "{log}");
    for line in requests {
        assert!(line.contains(r#"host="widgets.interop.svc:443""#), "{line}");
        assert!(line.contains(r#"uri="/"#), "{line}");
        assert!(
            line.contains(r#"user="alice""#) || line.contains(r#"user="system:kube-aggregator""#),
            "{line}"
        );
    }
}

/// `kubectl get -w --output-watch-events` through the gateway prints every change made after
/// the watch started.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_get_watch_sees_changes_made_through_the_gateway() {
    let s = stack().await;
    let mut watch = kubectl_command(
        &s.kubeconfig,
        &["get", "widgets", "-w", "--output-watch-events"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("kubectl is required for this test");
    let stdout = watch.stdout.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The watch is open once kubectl has listed; give it a moment, then change things.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let file = s.manifest("w.yaml", &widget("watched", "red", 1));
    s.kubectl(&["create", "-f", &file]).await;
    s.kubectl(&[
        "patch",
        "wg",
        "watched",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"size":2}}"#,
    ])
    .await;
    s.kubectl(&["delete", "wg", "watched"]).await;
    let mut seen = Vec::new();
    let read = async {
        while let Some(line) = rx.recv().await {
            seen.push(line);
            if seen.last().is_some_and(|l| l.starts_with("DELETED")) {
                break;
            }
        }
    };
    let finished = tokio::time::timeout(Duration::from_secs(20), read).await;
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(finished.is_ok(), "the watch printed only {seen:?}");
    // A table: a header, then one row per event, its type first.
    assert_eq!(seen[0].split_whitespace().next(), Some("EVENT"), "{seen:?}");
    let events: Vec<Vec<&str>> = seen[1..]
        .iter()
        .map(|l| l.split_whitespace().take(2).collect())
        .collect();
    assert_eq!(
        events,
        [
            ["ADDED", "watched"],
            ["MODIFIED", "watched"],
            ["DELETED", "watched"]
        ],
        "{seen:?}"
    );
}

/// The official Python client (PyPI `kubernetes`): discovery, CRUD, a conflict, and a watch
/// resumed from a resourceVersion, all through the gateway to the Go addon.
#[tokio::test(flavor = "multi_thread")]
async fn the_python_kubernetes_client_through_the_gateway() {
    let s = stack().await;
    let p = |n: &str| s.world.pki.path(n).display().to_string();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/python_client.py"
    );
    let args = vec![
        script.to_string(),
        "--server".into(),
        format!("https://127.0.0.1:{}", s.gw.addr.port()),
        "--ca".into(),
        p("ca.crt"),
        "--cert".into(),
        p("alice.crt"),
        "--key".into(),
        p("alice.key"),
    ];
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args(&args)
            .output()
            .expect("python3 is required for this test")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client failed (needs `pip install kubernetes`):\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("python client: all checks passed"),
        "{stdout}"
    );
}
