//! Several engine workers (`--gpus`), with mock engines on the CPU: every request goes to the
//! worker with the fewest decisions in flight (equals in turn), a slow worker's queue does not hold the others
//! up, a worker that failed to load is left out, and every worker gives the answers one
//! worker gives.

use std::sync::Arc;

use laya_core::agent::Agent;
use laya_core::checkpoints::Single;
use laya_fixtures::Recorded;
use pyjson::Value;

use crate::support::{checkpoint, post_fresh, Gate, Gated, Server};

/// A `/health` payload's `gpus`: `(gpu, in_flight, answered, alive)` per worker.
fn gpus(s: &Server) -> Vec<(i64, i64, i64, bool)> {
    let health = s.send("GET", "/health", &[], None);
    let body = pyjson::loads(&health.body).expect("JSON").value;
    let Some(Value::Array(gpus)) = body.as_object().and_then(|o| o.get("gpus")).cloned() else {
        panic!("no gpus in {}", health.text())
    };
    gpus.iter()
        .map(|g| {
            let g = g.as_object().expect("object");
            let int = |k: &str| match g.get(k) {
                Some(Value::Int(i)) => i.as_i64().expect("small"),
                other => panic!("{k}: {other:?}"),
            };
            (
                int("gpu"),
                int("in_flight"),
                int("answered"),
                g.get("alive") == Some(&Value::Bool(true)),
            )
        })
        .collect()
}

/// The recorded requests of the fixture workload, as bodies.
fn bodies() -> Vec<String> {
    laya_fixtures::references("tiny", "smoke")
        .into_iter()
        .filter(|r| r.status == 200 && r.path == "/v1/systemone")
        .filter_map(|r| {
            r.request_body
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        })
        .take(8)
        .collect()
}

fn gated_pool(gates: Vec<Arc<Gate>>) -> Server {
    let ordinals: Vec<usize> = (0..gates.len()).collect();
    Server::in_process_pool(
        &[],
        &checkpoint("tiny"),
        &ordinals,
        true,
        move |dir, ordinal| {
            let engine = Gated {
                inner: Recorded::for_checkpoint("tiny"),
                gate: gates[ordinal].clone(),
            };
            Ok(Single::new(Agent::load(dir, engine)?, None))
        },
    )
}

#[test]
fn requests_go_to_the_least_loaded_worker_and_a_slow_one_holds_nobody_up() {
    let (slow, quick) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    quick.open();
    let s = gated_pool(vec![slow.clone(), quick.clone()]);
    let alone = Server::tiny(&[]);
    let bodies = bodies();
    assert!(bodies.len() >= 4, "{} bodies", bodies.len());
    assert_eq!(gpus(&s), [(0, 0, 0, true), (1, 0, 0, true)]);

    // Both idle: the first worker takes it, and stalls there.
    let addr = s.addr;
    let first = bodies[0].clone();
    let stuck = std::thread::spawn(move || {
        post_fresh(
            addr,
            &[("content-type", "application/json")],
            first.as_bytes(),
        )
    });
    slow.wait_calls(1);
    assert_eq!(gpus(&s), [(0, 1, 0, true), (1, 0, 0, true)]);
    // Everything else goes to the second worker, one after another, while the first waits.
    for body in &bodies[1..] {
        let r = s.post_json("/v1/systemone", body);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), alone.post_json("/v1/systemone", body).text());
    }
    let n = bodies.len() as i64 - 1;
    assert_eq!(gpus(&s), [(0, 1, 0, true), (1, 0, n, true)]);
    assert_eq!(quick.calls() as i64, n);
    slow.open();
    let r = stuck.join().expect("the stalled request");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.text(),
        alone.post_json("/v1/systemone", &bodies[0]).text()
    );
    assert_eq!(gpus(&s), [(0, 0, 1, true), (1, 0, n, true)]);
    // Idle workers take turns: two requests in a row go one to each.
    for body in &bodies[..2] {
        assert_eq!(s.post_json("/v1/systemone", body).status, 200);
    }
    assert_eq!(gpus(&s), [(0, 0, 2, true), (1, 0, n + 1, true)]);

    let metrics = s.send("GET", "/metrics", &[], None).text();
    for line in [
        "sys1_worker_answered_total{worker=\"0\",gpu=\"0\"} 2",
        &format!(
            "sys1_worker_answered_total{{worker=\"1\",gpu=\"1\"}} {}",
            n + 1
        ),
        "sys1_worker_in_flight{worker=\"0\",gpu=\"0\"} 0",
        "sys1_worker_up{worker=\"1\",gpu=\"1\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
}

/// Two workers on `tiny`, the first of which fails to load ("no such GPU").
fn pool_whose_first_worker_fails() -> Server {
    Server::in_process_pool(&[], &checkpoint("tiny"), &[0, 1], true, |dir, ordinal| {
        anyhow::ensure!(ordinal == 1, "no such GPU");
        Ok(Single::new(
            Agent::load(dir, Recorded::for_checkpoint("tiny"))?,
            None,
        ))
    })
}

#[test]
fn a_worker_that_failed_to_load_is_left_out() {
    let s = pool_whose_first_worker_fails();
    let alone = Server::tiny(&[]);
    for body in bodies() {
        let r = s.post_json("/v1/systemone", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), alone.post_json("/v1/systemone", &body).text());
    }
    let n = bodies().len() as i64;
    // The first request found worker 0 stopped and went on to worker 1; no other tried it.
    assert_eq!(gpus(&s), [(0, 0, 0, false), (1, 0, n, true)]);
    let metrics = s.send("GET", "/metrics", &[], None).text();
    assert!(
        metrics.contains("sys1_worker_up{worker=\"0\",gpu=\"0\"} 0"),
        "{metrics}"
    );
}

/// Requests wait in a worker's queue while it loads; when that load fails, the ones queued
/// there are answered by another worker, not failed.
#[test]
fn requests_queued_on_a_worker_whose_load_fails_go_to_another() {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let s = Server::in_process_pool(
        &[],
        &checkpoint("tiny"),
        &[0, 1],
        false,
        move |dir, ordinal| {
            if ordinal == 0 {
                let _ = released.lock().unwrap_or_else(|e| e.into_inner()).recv();
                anyhow::bail!("no such GPU");
            }
            Ok(Single::new(
                Agent::load(dir, Recorded::for_checkpoint("tiny"))?,
                None,
            ))
        },
    );
    let alone = Server::tiny(&[]);
    let body = bodies().remove(0);
    // Both workers idle: the first request goes to worker 0, which is still loading.
    let addr = s.addr;
    let sent = body.clone();
    let queued = std::thread::spawn(move || {
        post_fresh(
            addr,
            &[("content-type", "application/json")],
            sent.as_bytes(),
        )
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while gpus(&s)[0].1 != 1 {
        assert!(std::time::Instant::now() < deadline, "{:?}", gpus(&s));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    release.send(()).expect("worker 0 is loading");
    let r = queued.join().expect("the queued request");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), alone.post_json("/v1/systemone", &body).text());
    assert_eq!(gpus(&s), [(0, 0, 0, false), (1, 0, 1, true)]);
}

#[test]
fn one_worker_keeps_upstreams_health() {
    let s = Server::tiny(&[]);
    let health = s.send("GET", "/health", &[], None).text();
    assert!(!health.contains("gpus"), "{health}");
}

/// `--gpus` on MLX, which has one device, is refused with the reason.
#[test]
fn gpus_need_the_cuda_engine() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sys1rust"))
        .args([
            "serve", "--port", "0", "--engine", "mlx", "--gpus", "0,1", "--model",
        ])
        .arg(checkpoint("tiny"))
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--gpus 0,1: one engine per GPU needs the CUDA engine"),
        "{err}"
    );
}

/// A worker whose load failed is out of the pool at once (`alive` false,
/// `sys1_worker_up` 0), not only once a request is sent to it; `/ready` stays 200 while
/// another answers.
#[test]
fn a_worker_that_failed_to_load_is_down_before_any_request() {
    let s = pool_whose_first_worker_fails();
    assert_eq!(gpus(&s), [(0, 0, 0, false), (1, 0, 0, true)]);
    let metrics = s.send("GET", "/metrics", &[], None).text();
    assert!(
        metrics.contains("sys1_worker_up{worker=\"0\",gpu=\"0\"} 0"),
        "{metrics}"
    );
    assert_eq!(s.send("GET", "/ready", &[], None).status, 200);
}

/// When every worker failed to load, `/ready` says why rather than loading forever.
#[test]
fn ready_says_when_no_worker_loaded() {
    let s = Server::in_process_pool(
        &[],
        &checkpoint("tiny"),
        &[0, 1],
        false,
        |_, _| -> anyhow::Result<Single<Recorded>> { anyhow::bail!("no such GPU") },
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let ready = s.send("GET", "/ready", &[], None);
        assert_eq!(ready.status, 503);
        if ready.text() == r#"{"status":"worker stopped"}"# {
            break;
        }
        assert_eq!(ready.text(), r#"{"status":"loading"}"#);
        assert!(std::time::Instant::now() < deadline, "still loading");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A request whose client is answered 504 (`--request-timeout`) while its worker still runs
/// it keeps counting in that worker's load until the worker is done: the next requests go to
/// the free worker, not to the busy one.
#[test]
fn a_decision_counts_on_its_worker_until_the_worker_is_done_with_it() {
    let (slow, quick) = (Arc::new(Gate::default()), Arc::new(Gate::default()));
    quick.open();
    let gates = [slow.clone(), quick.clone()];
    let s = Server::in_process_pool(
        &["--request-timeout", "0.5"],
        &checkpoint("tiny"),
        &[0, 1],
        true,
        move |dir, ordinal| {
            let engine = Gated {
                inner: Recorded::for_checkpoint("tiny"),
                gate: gates[ordinal].clone(),
            };
            Ok(Single::new(Agent::load(dir, engine)?, None))
        },
    );
    let bodies = bodies();
    // Both idle: the first worker takes it, and is still running it past its deadline.
    let r = s.post_json("/v1/systemone", &bodies[0]);
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(slow.calls(), 1);
    assert_eq!(gpus(&s), [(0, 1, 0, true), (1, 0, 0, true)]);
    let metrics = s.send("GET", "/metrics", &[], None).text();
    assert!(
        metrics.contains("sys1_worker_in_flight{worker=\"0\",gpu=\"0\"} 1"),
        "{metrics}"
    );
    // The next ones go to the free worker.
    for body in &bodies[1..3] {
        let r = s.post_json("/v1/systemone", body);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(quick.calls(), 2);
    assert_eq!(gpus(&s), [(0, 1, 0, true), (1, 0, 2, true)]);
    // Once the worker is done with it, it counts no more.
    slow.open();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while gpus(&s)[0].1 != 0 {
        assert!(std::time::Instant::now() < deadline, "{:?}", gpus(&s));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
