//! How long the gradient pipeline takes to end once the stop flag goes up, at points spread
//! over its run: a chain of `N` sines (default 10^7) is built once; the pipeline Python's
//! `Graph.gradient` runs (`grad`, resolve, materialize, compile) is timed whole, then run
//! again with the flag raised from another thread after 1/24, 2/24, … of that time. Each
//! line gives the delay and the time from the raise to the call's return, with what the
//! call had built dropped on the way (the latency Ctrl-C sees).
//!
//! `cargo run --release -p tidu --example stop_latency -- [N] [DELAY_MS]` (a delay runs that
//! one point only).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use computegraph::{
    Graph, GraphBuilder, KeyInterner, LocalValueId, OperationRole, ValueRef, stop, try_compile, try_materialize_merge,
    try_resolve,
};
use scalar::{ScalarKey, ScalarOp};

/// The gradient pipeline of `y` in `f`; with `log`, the time at the end of each phase.
fn pipeline(f: &Arc<Graph<ScalarOp>>, y: LocalValueId, log: bool) -> Result<usize, String> {
    let t = Instant::now();
    let phase = |name: &str| {
        if log {
            eprintln!("{name:<12} ends at {:.3} s", t.elapsed().as_secs_f64());
        }
    };
    let view = try_resolve(vec![f.clone()]).map_err(|e| e.to_string())?;
    let key = f.global_key(y);
    let lin = tidu::grad(&view, &key, &[ScalarKey::var(0)]).map_err(|e| e.to_string())?;
    phase("grad");
    let mut keys = vec![key];
    keys.extend(lin.tangent_output_keys().into_iter().flatten());
    let view = try_resolve(vec![lin.graph().clone(), f.clone()]).map_err(|e| e.to_string())?;
    let m = try_materialize_merge(&view, &keys).map_err(|e| e.to_string())?;
    phase("materialize");
    let p = try_compile(&m).map_err(|e| e.to_string())?;
    phase("compile");
    Ok(p.output_keys().len())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000_000);
    let one: Option<f64> = args.next().and_then(|s| s.parse().ok());
    let mut b = GraphBuilder::<ScalarOp>::with_interner(KeyInterner::new());
    let mut y = b.add_input(ScalarKey::var(0));
    for _ in 0..n {
        y = b.add_operation(ScalarOp::Sin, vec![ValueRef::Local(y)], OperationRole::Primary)[0];
    }
    b.set_outputs(vec![y]);
    let f = Arc::new(b.build());
    let delays: Vec<Duration> = match one {
        Some(ms) => vec![Duration::from_secs_f64(ms / 1000.0)],
        None => {
            let t = Instant::now();
            let done = stop::with_stop(Arc::new(AtomicBool::new(false)), || pipeline(&f, y, true));
            let total = t.elapsed();
            eprintln!("whole call   {:.3} s ({})", total.as_secs_f64(), if done.is_ok() { "ok" } else { "failed" });
            (1..24).map(|i| total.mul_f64(i as f64 / 24.0)).collect()
        }
    };
    for d in delays {
        let flag = Arc::new(AtomicBool::new(false));
        let raised = Arc::new(Mutex::new(None));
        let timer = {
            let (flag, raised) = (flag.clone(), raised.clone());
            std::thread::spawn(move || {
                std::thread::sleep(d);
                *raised.lock().expect("not poisoned") = Some(Instant::now());
                flag.store(true, Ordering::Relaxed);
            })
        };
        let r = stop::with_stop(flag, || pipeline(&f, y, false));
        let end = Instant::now();
        timer.join().expect("the timer does not panic");
        let latency = raised.lock().expect("not poisoned").map(|s| end.duration_since(s));
        match latency {
            Some(l) => println!("delay {:8.3} s: stopped {} ms after the raise", d.as_secs_f64(), l.as_millis()),
            None => {
                println!("delay {:8.3} s: ended first ({})", d.as_secs_f64(), if r.is_ok() { "ok" } else { "failed" })
            }
        }
    }
}
