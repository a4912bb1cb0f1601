//! The envelope's cost per seal and per open, in instructions: run it under callgrind.
//!
//! ```sh
//! cargo build --release --workspace --bins    # the README's build
//! for mode in seal open; do
//!   for n in 1 1001; do
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!       target/release/envelope-cost $mode 1024 $n 2>&1 | grep Collected
//!   done
//! done
//! # (Collected at 1001 - Collected at 1) / 1000 = instructions per seal or open of a 1 KiB state.
//! ```
//!
//! The binding and state are those of the `envelope` group of the criterion benches
//! (`crates/mrtr-bench/benches/mrtr.rs`): `tools/call`, target `delete_branch`, principal `alice`,
//! route `backend-a`, a state of `size` bytes.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tower_mrtr::envelope::{Binding, Purpose, Sealed, Sealer};
use tower_mrtr::{Keyring, Route};

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: envelope-cost seal|open SIZE ITERATIONS";
    let mode = args.next().expect(usage);
    let size: usize = args.next().expect(usage).parse().expect(usage);
    let iterations: u64 = args.next().expect(usage).parse().expect(usage);

    let sealer = Sealer::new(Arc::new(Keyring::generate("k1").expect("a key")));
    let binding = Binding::new("tools/call", Some("delete_branch"), Some("alice"));
    let now = SystemTime::now();
    let sealed = Sealed {
        route: Route::new("backend-a"),
        state: Some("s".repeat(size)),
        expires_at: now + Duration::from_secs(600),
        round: 1,
        call_target: None,
    };
    let wire = sealer
        .seal(Purpose::REQUEST_STATE, &binding, &sealed)
        .expect("sealed");
    let mut total = 0usize;
    for _ in 0..iterations {
        total += match mode.as_str() {
            "seal" => sealer
                .seal(Purpose::REQUEST_STATE, black_box(&binding), black_box(&sealed))
                .expect("sealed")
                .len(),
            "open" => sealer
                .open(Purpose::REQUEST_STATE, black_box(&binding), black_box(&wire), now)
                .expect("opened")
                .state
                .map_or(0, |s| s.len()),
            _ => panic!("{usage}"),
        };
    }
    println!("{total}");
}
