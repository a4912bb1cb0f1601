//! Triage of an answer-target input: `cargo run --example explain -- json|sse FILE` prints the
//! answer the scripted backend sends and what the oracle reads in it.

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = match args.next().as_deref() {
        Some("sse") => tower_mrtr_fuzz::answer::Mode::Sse,
        _ => tower_mrtr_fuzz::answer::Mode::Json,
    };
    let path = args.next().expect("usage: explain json|sse FILE");
    let input = std::fs::read(path).expect("readable input");
    println!("{}", tower_mrtr_fuzz::answer::explain(&input, mode));
}
