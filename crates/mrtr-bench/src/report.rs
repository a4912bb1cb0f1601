//! The printed report: Markdown tables of what each hop did, the gateway/bare ratios against the
//! targets of issue 9, the gateway against each peer gateway (issue 25), peak RSS, and the
//! instruction counts.

use std::fmt::Write;

use crate::driver::{Count, Sample, Timings, hops_for};
use crate::workload::{Cell, Hop};

/// The targets for the gateway with one backend against the bare proxy: (lowest req/s ratio,
/// highest hop-CPU ratio), if the cell has any.
pub fn target(cell: Cell) -> Option<(f64, Option<f64>)> {
    match cell {
        Cell::Call { .. } => Some((0.90, Some(1.15))),
        Cell::Round1 { .. } | Cell::Round2 { .. } => Some((0.85, Some(1.25))),
        Cell::Sse => Some((0.95, None)),
        _ => None,
    }
}

/// Issue 40's targets for a path beside the modern call: the highest ratio of its gateway
/// instructions per request over its [`Cell::reference`]'s, if the cell has one.
pub fn path_target(cell: Cell) -> Option<f64> {
    match cell {
        Cell::LegacyHttp { .. } => Some(1.3),
        Cell::LegacyClient => Some(1.5),
        _ => None,
    }
}

/// The gateway hop that serves `cell` (the first hop of ours that is not the bare proxy nor the
/// backend reached directly).
fn gateway_hop(cell: Cell) -> Option<Hop> {
    hops_for(cell, &[])
        .into_iter()
        .find(|hop| !matches!(hop, Hop::Direct | Hop::Bare | Hop::Pipe { .. }))
}

/// Issue 40's target for a stdio backend: the lowest ratio of its req/s through the gateway over
/// the same process's driven over its pipes.
pub const STDIO_TARGET: f64 = 0.9;

/// Peak RSS of the gateway may be at most this many times the bare proxy's.
pub const RSS_TARGET: f64 = 2.0;

fn median(mut values: Vec<f64>) -> f64 {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn spread(values: &[f64]) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if values.len() < 2 {
        String::new()
    } else {
        format!(" [{min:.2}..{max:.2}]")
    }
}

/// Per-round ratios `a / b` of one metric between two hops (same round, same cell).
fn ratios(a: &[Sample], b: &[Sample], metric: impl Fn(&Sample) -> Option<f64>) -> Vec<f64> {
    a.iter()
        .filter_map(|x| {
            let y = b.iter().find(|y| y.round == x.round)?;
            Some(metric(x)? / metric(y)?)
        })
        .filter(|r| r.is_finite())
        .collect()
}

/// The table a reader compares with other gateways' published figures (issue 40, Deliver 3):
/// per cell and hop, the clients, req/s, latency percentiles, error rate, the cores the hop and
/// the backend kept busy, and the hop's memory. Medians over rounds; errors summed over them.
pub fn users(cells: &[Cell], timings: &Timings) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### In the shape users compare (median over rounds)\n\n\
         | cell | through | clients | req/s | p50 ms | p95 ms | p99 ms | errors | hop cores | backend cores | hop peak RSS |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let ms = |us: f64| format!("{:.2}", us / 1000.0);
    for &cell in cells {
        for hop in hops_for(cell, &timings.peers) {
            let Some(samples) = timings.samples.get(&(cell, hop)) else {
                continue;
            };
            let of = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
            let answered: u64 = samples.iter().map(|s| s.answered).sum();
            let failed: u64 = samples.iter().map(|s| s.failed).sum();
            let hop_cores = median(samples.iter().filter_map(|s| s.hop_cores).collect());
            // A pipe's process is the backend; straight to the backend there is no hop.
            let rss = match hop {
                Hop::Direct | Hop::Pipe { .. } => None,
                hop => peak_rss(timings, &hop.file_name()),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.0} | {} | {} | {} | {:.2} % ({failed} of {answered}) | {} | {:.2} | {} |",
                cell.name(),
                hop.name(),
                timings.clients,
                of(|s| s.rate),
                ms(of(|s| s.p50_us)),
                ms(of(|s| s.p95_us)),
                ms(of(|s| s.p99_us)),
                100.0 * failed as f64 / answered.max(1) as f64,
                if hop_cores.is_nan() {
                    "-".to_owned()
                } else {
                    format!("{hop_cores:.2}")
                },
                of(|s| s.backend_cores),
                rss.map_or("-".to_owned(), |kib| format!("{:.1} MiB", kib / 1024.0)),
            );
        }
    }
    out
}

/// Peak RSS of the process named `name`, KiB.
fn peak_rss(timings: &Timings, name: &str) -> Option<f64> {
    timings
        .peak_rss_kib
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, k)| *k as f64)
}

/// The timing report.
pub fn timings(cells: &[Cell], timings: &Timings) -> String {
    let mut out = users(cells, timings);
    hops_table(&mut out, cells, timings);
    bare_ratios(&mut out, cells, timings);
    paths_timed(&mut out, cells, timings);
    stdio_timed(&mut out, cells, timings);
    for &peer in &timings.peers {
        peer_table(&mut out, cells, timings, peer);
    }
    rss_table(&mut out, timings);
    out
}

/// Each hop's figures, cell by cell: medians over rounds.
fn hops_table(out: &mut String, cells: &[Cell], timings: &Timings) {
    let _ = writeln!(
        out,
        "\n### Each hop (median over rounds)\n\n| cell | hop | req/s | p50 µs | p99 µs | hop CPU µs/req | hop kernel share | hop context switches/req | hop reads and writes/req | backend CPU µs/req |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for &cell in cells {
        for hop in hops_for(cell, &timings.peers) {
            let Some(samples) = timings.samples.get(&(cell, hop)) else {
                continue;
            };
            let of = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
            let hop_cpu = median(samples.iter().filter_map(|s| s.hop_cpu_us).collect());
            let system = median(samples.iter().filter_map(|s| s.hop_system_share).collect());
            let switches = median(samples.iter().filter_map(|s| s.hop_switches).collect());
            let io_calls = median(samples.iter().filter_map(|s| s.hop_io_calls).collect());
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {:.1} |",
                cell.name(),
                hop.name(),
                of(|s| s.rate),
                of(|s| s.p50_us),
                of(|s| s.p99_us),
                if hop_cpu.is_nan() {
                    "-".to_owned()
                } else {
                    format!("{hop_cpu:.1}")
                },
                if system.is_nan() {
                    "-".to_owned()
                } else {
                    format!("{:.0} %", system * 100.0)
                },
                if switches.is_nan() {
                    "-".to_owned()
                } else {
                    format!("{switches:.2}")
                },
                if io_calls.is_nan() {
                    "-".to_owned()
                } else {
                    format!("{io_calls:.2}")
                },
                of(|s| s.backend_cpu_us),
            );
        }
    }
}

/// The gateway with one backend over the bare proxy, per round, against the targets.
fn bare_ratios(out: &mut String, cells: &[Cell], timings: &Timings) {
    let _ = writeln!(
        out,
        "\n### Gateway (one backend) / bare proxy, per-round ratios: median [min..max]\n\n| cell | req/s | p50 | p99 | hop CPU per request | CPU the gateway adds | target (req/s, CPU) | met |\n|---|---|---|---|---|---:|---|---|"
    );
    for &cell in cells {
        let (Some(gateway), Some(bare)) = (
            timings.samples.get(&(cell, Hop::Gateway)),
            timings.samples.get(&(cell, Hop::Bare)),
        ) else {
            continue;
        };
        let rate = ratios(gateway, bare, |s| Some(s.rate));
        let p50 = ratios(gateway, bare, |s| Some(s.p50_us));
        let p99 = ratios(gateway, bare, |s| Some(s.p99_us));
        let cpu = ratios(gateway, bare, |s| s.hop_cpu_us);
        let added = median(gateway.iter().filter_map(|s| s.hop_cpu_us).collect())
            - median(bare.iter().filter_map(|s| s.hop_cpu_us).collect());
        let (target_text, met) = match target(cell) {
            None => ("-".to_owned(), "-"),
            Some((min_rate, max_cpu)) => {
                let rate_ok = median(rate.clone()) >= min_rate;
                let cpu_ok = max_cpu.is_none_or(|m| median(cpu.clone()) <= m);
                (
                    match max_cpu {
                        Some(m) => format!("≥ {min_rate:.2}, ≤ {m:.2}"),
                        None => format!("≥ {min_rate:.2}"),
                    },
                    if rate_ok && cpu_ok { "yes" } else { "no" },
                )
            }
        };
        let _ = writeln!(
            out,
            "| {} | {:.2}{} | {:.2}{} | {:.2}{} | {:.2}{} | {:+.1} µs | {} | {} |",
            cell.describe(),
            median(rate.clone()),
            spread(&rate),
            median(p50.clone()),
            spread(&p50),
            median(p99.clone()),
            spread(&p99),
            median(cpu.clone()),
            spread(&cpu),
            added,
            target_text,
            met,
        );
    }
    if let (Some(two), Some(bare)) = (
        timings.samples.get(&(Cell::List, Hop::Gateway2)),
        timings.samples.get(&(Cell::List, Hop::Bare)),
    ) {
        let rate = ratios(two, bare, |s| Some(s.rate));
        let _ = writeln!(
            out,
            "\n`tools/list` through the gateway with two backends (fan-out and merge) / the bare proxy to one backend: req/s {:.2}{}.",
            median(rate.clone()),
            spread(&rate)
        );
    }
}

/// Every process's peak RSS, and the gateway's over the bare proxy's and each peer's.
fn rss_table(out: &mut String, timings: &Timings) {
    let _ = writeln!(
        out,
        "\n### Peak RSS (VmHWM, whole run)\n\n| process | peak RSS |\n|---|---:|"
    );
    for (name, kib) in &timings.peak_rss_kib {
        let _ = writeln!(out, "| {name} | {:.1} MiB |", *kib as f64 / 1024.0);
    }
    let rss = |name: &str| peak_rss(timings, name);
    if let (Some(gateway), Some(bare)) = (rss("gateway"), rss("bare-proxy")) {
        let ratio = gateway / bare;
        let _ = writeln!(
            out,
            "\ngateway / bare proxy peak RSS: {ratio:.2} (target ≤ {RSS_TARGET:.1}: {})",
            if ratio <= RSS_TARGET { "met" } else { "not met" }
        );
    }
    for peer in &timings.peers {
        if let (Some(gateway), Some(other)) = (rss("gateway"), rss(peer.name())) {
            let _ = writeln!(out, "gateway / {} peak RSS: {:.2}", peer.name(), gateway / other);
        }
    }
}

/// The gateway with one backend against one peer gateway, cell by cell, beside the bare proxy:
/// medians over rounds and per-round ratios (gateway / peer, so above 1 the gateway serves more).
fn peer_table(out: &mut String, cells: &[Cell], timings: &Timings, peer: Hop) {
    let name = peer.name();
    let _ = writeln!(
        out,
        "\n### Gateway (one backend) / {name}, same rounds: medians, and per-round ratios median [min..max]\n\n\
         | cell | bare proxy req/s | gateway req/s | {name} req/s | gateway / {name} req/s | hop CPU µs/req, gateway / {name} | gateway / {name} hop CPU | p50 µs, gateway / {name} | p99 µs, gateway / {name} | hop kernel share, gateway / {name} |\n\
         |---|---:|---:|---:|---|---:|---|---:|---:|---:|"
    );
    for &cell in cells {
        let (Some(gateway), Some(other)) = (
            timings.samples.get(&(cell, Hop::Gateway)),
            timings.samples.get(&(cell, peer)),
        ) else {
            continue;
        };
        let of = |samples: &[Sample], metric: fn(&Sample) -> Option<f64>| {
            median(samples.iter().filter_map(metric).collect())
        };
        let bare = timings
            .samples
            .get(&(cell, Hop::Bare))
            .map_or(f64::NAN, |s| of(s, |s| Some(s.rate)));
        let rate = ratios(gateway, other, |s| Some(s.rate));
        let cpu = ratios(gateway, other, |s| s.hop_cpu_us);
        let percent = |v: f64| {
            if v.is_nan() {
                "-".to_owned()
            } else {
                format!("{:.0} %", v * 100.0)
            }
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} | {:.2}{} | {:.1} / {:.1} | {:.2}{} | {:.0} / {:.0} | {:.0} / {:.0} | {} / {} |",
            cell.describe(),
            bare,
            of(gateway, |s| Some(s.rate)),
            of(other, |s| Some(s.rate)),
            median(rate.clone()),
            spread(&rate),
            of(gateway, |s| s.hop_cpu_us),
            of(other, |s| s.hop_cpu_us),
            median(cpu.clone()),
            spread(&cpu),
            of(gateway, |s| Some(s.p50_us)),
            of(other, |s| Some(s.p50_us)),
            of(gateway, |s| Some(s.p99_us)),
            of(other, |s| Some(s.p99_us)),
            percent(of(gateway, |s| s.hop_system_share)),
            percent(of(other, |s| s.hop_system_share)),
        );
    }
}

/// The paths beside the modern call (legacy backends and clients, stdio, merges) against their
/// reference cell through the gateway with one modern backend, in the same rounds.
fn paths_timed(out: &mut String, cells: &[Cell], timings: &Timings) {
    let mut header = false;
    for &cell in cells {
        let (Some(reference), Some(hop)) = (cell.reference(), gateway_hop(cell)) else {
            continue;
        };
        let (Some(path), Some(base)) = (
            timings.samples.get(&(cell, hop)),
            timings.samples.get(&(reference, Hop::Gateway)),
        ) else {
            continue;
        };
        if !header {
            header = true;
            let _ = writeln!(
                out,
                "\n### Paths beside the modern call: per-round ratios over the reference cell through the gateway, median [min..max]\n\n| cell | through | reference | req/s | hop CPU per request | p50 |\n|---|---|---|---|---|---|"
            );
        }
        let rate = ratios(path, base, |s| Some(s.rate));
        let cpu = ratios(path, base, |s| s.hop_cpu_us);
        let p50 = ratios(path, base, |s| Some(s.p50_us));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2}{} | {:.2}{} | {:.2}{} |",
            cell.describe(),
            hop.name(),
            reference.name(),
            median(rate.clone()),
            spread(&rate),
            median(cpu.clone()),
            spread(&cpu),
            median(p50.clone()),
            spread(&p50),
        );
    }
}

/// The stdio cells through the gateway against the same process driven over its pipes, in the
/// same rounds.
fn stdio_timed(out: &mut String, cells: &[Cell], timings: &Timings) {
    let mut header = false;
    for &cell in cells {
        let Cell::Stdio { legacy } = cell else { continue };
        let (Some(hop), pipe) = (gateway_hop(cell), Hop::Pipe { legacy }) else {
            continue;
        };
        let (Some(through), Some(direct)) = (
            timings.samples.get(&(cell, hop)),
            timings.samples.get(&(cell, pipe)),
        ) else {
            continue;
        };
        if !header {
            header = true;
            let _ = writeln!(
                out,
                "\n### stdio: through the gateway over the same process driven on its pipes, per-round ratios, median [min..max]\n\n| cell | req/s | p50 | process CPU per request | target | met |\n|---|---|---|---|---|---|"
            );
        }
        let rate = ratios(through, direct, |s| Some(s.rate));
        let p50 = ratios(through, direct, |s| Some(s.p50_us));
        let median_rate = median(rate.clone());
        let _ = writeln!(
            out,
            "| {} | {:.2}{} | {:.2}{} | {} | ≥ {STDIO_TARGET:.2} | {} |",
            cell.describe(),
            median_rate,
            spread(&rate),
            median(p50.clone()),
            spread(&p50),
            // The process is the gateway's child through the gateway, not measured there.
            format_args!(
                "{:.1} µs direct",
                median(direct.iter().map(|s| s.backend_cpu_us).collect())
            ),
            if median_rate >= STDIO_TARGET { "yes" } else { "no" },
        );
    }
}

/// The instruction-count report.
pub fn counts(cells: &[Cell], counts: &[Count]) -> String {
    let mut out = String::from(
        "\n### Instructions per request of the hop process (callgrind)\n\n| cell | bare proxy | gateway | gateway / bare | gateway adds |\n|---|---:|---:|---:|---:|\n",
    );
    for &cell in cells {
        let of = |hop| {
            counts
                .iter()
                .find(|c| c.cell == cell && c.hop == hop)
                .map(|c| c.per_request)
        };
        let (Some(bare), Some(gateway)) = (of(Hop::Bare), of(Hop::Gateway)) else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.2} | {:+.0} |",
            cell.describe(),
            bare,
            gateway,
            gateway / bare,
            gateway - bare
        );
    }
    let of = |cell: Cell, hop: Hop| {
        counts
            .iter()
            .find(|c| c.cell == cell && c.hop == hop)
            .map(|c| c.per_request)
    };
    let mut header = false;
    for &cell in cells {
        let (Some(reference), Some(hop)) = (cell.reference(), gateway_hop(cell)) else {
            continue;
        };
        let Some(path) = of(cell, hop) else { continue };
        if !header {
            header = true;
            out.push_str(
                "\n### Paths beside the modern call: gateway instructions per request over the reference cell's (same run)\n\n| cell | through | instructions | reference | its instructions | ratio | target | met |\n|---|---|---:|---|---:|---:|---|---|\n",
            );
        }
        let base = of(reference, Hop::Gateway);
        let ratio = base.map(|b| path / b);
        let (target, met) = match (path_target(cell), ratio) {
            (Some(t), Some(r)) => (format!("≤ {t:.2}"), if r <= t { "yes" } else { "no" }),
            (Some(t), None) => (format!("≤ {t:.2}"), "-"),
            (None, _) => ("-".to_owned(), "-"),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} |",
            cell.describe(),
            hop.name(),
            path,
            reference.name(),
            base.map_or("(not in this run)".to_owned(), |b| format!("{b:.0}")),
            ratio.map_or("-".to_owned(), |r| format!("{r:.3}")),
            target,
            met
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(round: usize, rate: f64, failed: u64) -> Sample {
        Sample {
            round,
            rate,
            p50_us: 1_000.0,
            p95_us: 2_500.0,
            p99_us: 4_000.0,
            answered: 1_000,
            failed,
            hop_cpu_us: Some(25.0),
            hop_system_share: Some(0.4),
            hop_switches: Some(1.0),
            hop_io_calls: Some(2.0),
            backend_cpu_us: 5.0,
            hop_cores: Some(0.75),
            backend_cores: 0.15,
        }
    }

    #[test]
    fn the_users_table_sums_errors_and_names_each_hops_memory() {
        let call = Cell::Call { size: 256 };
        let mut timings = Timings {
            clients: 64,
            peak_rss_kib: vec![("gateway".to_owned(), 18_432)],
            ..Timings::default()
        };
        timings.samples.insert(
            (call, Hop::Gateway),
            vec![sample(0, 30_000.0, 0), sample(1, 32_000.0, 3)],
        );
        let direct = Sample {
            hop_cpu_us: None,
            hop_cores: None,
            ..sample(0, 50_000.0, 0)
        };
        timings.samples.insert((call, Hop::Direct), vec![direct]);
        let table = users(&[call], &timings);
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("| cell | through | clients | req/s |")),
            "{table}"
        );
        let row = |hop: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("| call-256 | {hop} |")))
                .unwrap_or_else(|| panic!("no {hop} row in {table}"))
                .to_owned()
        };
        assert_eq!(
            row("gateway"),
            "| call-256 | gateway | 64 | 31000 | 1.00 | 2.50 | 4.00 | 0.15 % (3 of 2000) | 0.75 | 0.15 | 18.0 MiB |"
        );
        // Straight to the backend: no hop, so no hop cores nor hop memory.
        assert_eq!(
            row("direct"),
            "| call-256 | direct | 64 | 50000 | 1.00 | 2.50 | 4.00 | 0.00 % (0 of 1000) | - | 0.15 | - |"
        );
    }
}
