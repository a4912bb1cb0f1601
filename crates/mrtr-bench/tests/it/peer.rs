//! A peer gateway started from a command template, with the mock backend standing in for it: it
//! is ready once its port accepts connections, its answers are checked as a peer's, and its
//! whole process group is measured and killed, including what a launcher left running.

#![forbid(unsafe_code)]

use std::time::Duration;

use mrtr_bench::load::{Connection, Target};
use mrtr_bench::peer::{Peer, Values};
use mrtr_bench::procs::{self, Launch};
use mrtr_bench::workload::{Cell, Workload};

fn log_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mrtr-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "current_thread")]
async fn a_forking_launcher_is_measured_and_killed_as_one_group() {
    let dir = log_dir("peer");
    // A launcher that leaves a child behind instead of exec-ing only the gateway.
    let template = format!(
        "peer=sh -c 'sleep 600 & exec {} --listen {{listen}}'",
        env!("CARGO_BIN_EXE_mock-backend")
    );
    let peer = Peer::parse(&template).unwrap();
    let values = Values {
        port: procs::free_port().unwrap(),
        backend: "http://127.0.0.1:9/mcp".to_owned(),
        dir: dir.display().to_string(),
    };
    let command = peer.command(&values).unwrap();
    let proc = Launch {
        name: peer.name,
        command: &command,
        port: values.port,
        path: &peer.path,
        cpus: None,
        log_dir: &dir,
    }
    .start(Duration::from_secs(60))
    .await
    .unwrap();
    let group = proc.pid();
    assert_eq!(proc.members().len(), 2, "the backend and the sleep");
    assert!(proc.peak_rss_kib().unwrap() > 0);

    let target = Target::from_url(&proc.url).unwrap();
    let mut connection = Connection::open(&target).await.unwrap();
    let work = Workload::new(Cell::Call { size: 256 }, peer.hop(), None);
    let exchange = connection.exchange(&work).await;
    assert_eq!(exchange.verdict, Ok(()));
    assert!(proc.cpu().unwrap().on_cpu_ns > 0);

    drop(connection);
    drop(proc);
    // SIGKILL is delivered asynchronously: wait for the group to be gone, however long it takes.
    while !procs::group_members(group).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_peer_that_exits_before_listening_is_an_error_naming_its_log() {
    let dir = log_dir("peer-exit");
    // A port held bound and never listened on: a port picked and released (`free_port`) could
    // be taken by another test's listener, which the readiness check would take for the peer.
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let error = Launch {
        name: "broken",
        command: "sh -c 'echo no config >&2; exit 3'",
        port: reserved.local_addr().unwrap().port(),
        path: "/mcp",
        cpus: None,
        log_dir: &dir,
    }
    .start(Duration::from_secs(60))
    .await
    .unwrap_err()
    .to_string();
    assert!(error.contains("exited"), "{error}");
    assert!(error.contains("broken.log"), "{error}");
    let log = std::fs::read_to_string(dir.join("broken.log")).unwrap();
    assert_eq!(log, "no config\n");
}

/// A connect to a loopback port nobody listens on, from that same port (what the system may pick
/// by chance as the source port), succeeds by TCP's simultaneous open: the readiness check must
/// not take it for a peer listening.
#[tokio::test(flavor = "current_thread")]
async fn a_connection_to_itself_is_not_a_peer_listening() {
    // Bound first to a port the system picks, then connected to that same port: a port picked
    // and released (`free_port`) could be taken by another test in between.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let addr = socket.local_addr().unwrap();
    let stream = socket.connect(addr).await.unwrap();
    assert!(procs::connected_to_itself(&stream));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    assert!(!procs::connected_to_itself(&other));
}
