//! bench/bindings_bench.py's Rust side: a reservation's grow + shrink pair (4 KiB) through the
//! safe crate, on a group at depth 3, timed over N pairs. Prints "ns_per_pair X".
use memcg::{Controller, OomPolicy, Priority, Reservation};
use std::time::Instant;

fn main() -> memcg::Result<()> {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let ctl = Controller::new()?;
    ctl.create_group("a")?;
    ctl.create_group("a/b")?;
    let leaf = ctl.create_group("a/b/c")?;
    let mut r = Reservation::on_group(&leaf, OomPolicy::Kernel, Priority::Default)?;
    let start = Instant::now();
    for _ in 0..n {
        r.grow(std::hint::black_box(4096))?;
        r.shrink(4096);
    }
    let elapsed = start.elapsed();
    println!("ns_per_pair {:.2}", elapsed.as_nanos() as f64 / n as f64);
    Ok(())
}
