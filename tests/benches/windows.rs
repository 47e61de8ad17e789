//! Per-question cost on a realistic large configuration: 20 windows in several
//! zones with durations 30m..8h, and 10 blackouts.

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{criterion_group, criterion_main, Criterion};
use rollboot::windows::{Blackout, Schedule, Window};
use std::hint::black_box;

fn schedule() -> Schedule {
    let specs: [(&str, i64, &str); 20] = [
        ("0 2 * * *", 120, "Europe/Berlin"),
        ("30 2 * * *", 60, "Europe/Berlin"),
        ("0 22 * * sat", 480, "Europe/Berlin"),
        ("*/30 3 * * mon-fri", 30, "Europe/London"),
        ("0 1 * * *", 240, "America/New_York"),
        ("30 1 * * sun", 90, "America/New_York"),
        ("0 23 * * fri", 360, "America/Chicago"),
        ("15 4 1,15 * *", 45, "America/Los_Angeles"),
        ("0 3 * jan,jul mon", 180, "America/Sao_Paulo"),
        ("0 0 * * *", 60, "Asia/Tokyo"),
        ("0 9 * * 6,0", 300, "Asia/Tokyo"),
        ("45 2 * * tue-thu", 75, "Asia/Kolkata"),
        ("0 */6 * * *", 30, "UTC"),
        ("0 12 1 * mon", 120, "UTC"),
        ("0 20 * * wed", 240, "Australia/Sydney"),
        ("30 1 * * *", 60, "Australia/Lord_Howe"),
        ("0 5 10-20 * *", 150, "Africa/Cairo"),
        ("0 2 * 3-10 sun", 480, "Europe/Paris"),
        ("0 4 * * 1-5", 45, "Pacific/Auckland"),
        ("10 0 * * *", 30, "America/Anchorage"),
    ];
    let windows = specs
        .iter()
        .map(|(s, m, z)| Window::new(s, TimeDelta::minutes(*m), z.parse().unwrap()).unwrap())
        .collect();
    let base: DateTime<Utc> = "2026-01-10T00:00:00Z".parse().unwrap();
    let blackouts = (0..10)
        .map(|i| {
            let from = base + TimeDelta::days(i * 37) + TimeDelta::hours(i * 5);
            Blackout::new(from, from + TimeDelta::hours(6 + i * 7)).unwrap()
        })
        .collect();
    Schedule::new(windows, blackouts)
}

fn bench(c: &mut Criterion) {
    let s = schedule();
    // A spread of instants over 2026 (every 7h13m) so no single lucky
    // instant decides the figure; each iteration asks about the next one.
    let base: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
    let instants: Vec<DateTime<Utc>> = (0..1000)
        .map(|i| base + TimeDelta::minutes(i * 433))
        .collect();
    let mut g = c.benchmark_group("windows_20w_10b");
    for (name, f) in [
        ("is_allowed", 0usize),
        ("opening_at", 1),
        ("next_opening", 2),
        ("openings_5", 3),
    ] {
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                let now = instants[i % instants.len()];
                i += 1;
                match f {
                    0 => {
                        black_box(s.is_allowed(black_box(now)));
                    }
                    1 => {
                        black_box(s.opening_at(black_box(now)));
                    }
                    2 => {
                        black_box(s.next_opening(black_box(now)));
                    }
                    _ => {
                        black_box(s.openings(black_box(now), 5));
                    }
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
