//! Reading the Prometheus text exposition (`GET /metrics` of the admin listener).

/// The value of the sample of `metric` whose labels include every `labels` pair (`name="value"`),
/// summed over the matching samples; `None` without one.
pub fn sample(metrics: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, label_text) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if name != metric {
            continue;
        }
        if labels
            .iter()
            .all(|(k, v)| label_text.split(',').any(|pair| pair == format!("{k}=\"{v}\"")))
        {
            *total.get_or_insert(0.0) += value.parse::<f64>().unwrap();
        }
    }
    total
}
