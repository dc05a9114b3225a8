//! A strict reader of the Prometheus text exposition format (0.0.4), for checking /metrics.

use std::collections::HashMap;
use std::net::SocketAddr;

/// `GET /metrics` from the endpoint at `addr`, parsed (200 required).
pub fn scrape(addr: SocketAddr) -> Exposition {
    let answer = super::http::get(addr, "/metrics");
    assert_eq!(answer.status, 200, "GET /metrics");
    Exposition::parse(&answer.body)
}

/// A parsed document: samples by `name{labels}` as written, and each family's TYPE.
#[derive(Debug, Default)]
pub struct Exposition {
    pub samples: HashMap<String, f64>,
    pub types: HashMap<String, String>,
}

impl Exposition {
    /// Parses `text`, panicking with the offending line on any violation: a sample that is not
    /// `name{labels} value`, a family without HELP and TYPE before its samples, a family
    /// described twice, a counter (or histogram count) that is not a non-negative integer.
    pub fn parse(text: &str) -> Exposition {
        let mut doc = Exposition::default();
        let mut helped = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(valid_name(name), "bad name in {line:?}");
                assert!(!helped.contains(&name), "second HELP: {line:?}");
                helped.push(name);
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
                assert!(helped.contains(&name), "TYPE before HELP: {line:?}");
                let known = ["counter", "gauge", "histogram", "summary", "untyped"];
                assert!(known.contains(&kind), "unknown type: {line:?}");
                let prev = doc.types.insert(name.to_string(), kind.to_string());
                assert!(prev.is_none(), "second TYPE: {line:?}");
            } else if !line.starts_with('#') {
                doc.sample(line);
            }
        }
        doc
    }

    fn sample(&mut self, line: &str) {
        let (series, value) = line.rsplit_once(' ').expect("`series value`");
        let name = series.split('{').next().unwrap();
        assert!(valid_name(name), "bad name in {line:?}");
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            assert!(valid_labels(labels), "bad labels in {line:?}");
        }
        let value = parse_value(value).unwrap_or_else(|| panic!("bad value in {line:?}"));
        let (family, kind) = self.family_of(name).unwrap_or_else(|| {
            panic!("sample without HELP and TYPE before it: {line:?}");
        });
        let countlike =
            kind == "counter" || (kind == "histogram" && name != format!("{family}_sum"));
        if countlike {
            assert!(
                value >= 0.0 && value.fract() == 0.0,
                "counter not a non-negative integer: {line:?}"
            );
        }
        let prev = self.samples.insert(series.to_string(), value);
        assert!(prev.is_none(), "series twice: {line:?}");
    }

    /// The described family a sample belongs to (histograms add _bucket, _sum and _count).
    fn family_of(&self, name: &str) -> Option<(String, String)> {
        if let Some(kind) = self.types.get(name) {
            return Some((name.to_string(), kind.clone()));
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
            let base = name.strip_suffix(suffix)?;
            let kind = self
                .types
                .get(base)
                .filter(|k| *k == "histogram" || *k == "summary")?;
            Some((base.to_string(), kind.clone()))
        })
    }

    /// The value of one series, e.g. `backoffd_coap_answers_total{code="2.xx"}`.
    pub fn get(&self, series: &str) -> f64 {
        *self
            .samples
            .get(series)
            .unwrap_or_else(|| panic!("no series {series}"))
    }

    /// A histogram's cumulative buckets, `(upper bound, count)` sorted by bound (`+Inf` last);
    /// panics if there is none.
    pub fn histogram(&self, name: &str) -> Vec<(f64, f64)> {
        let prefix = format!("{name}_bucket{{le=\"");
        let mut buckets: Vec<(f64, f64)> = (self.samples.iter())
            .filter_map(|(series, &count)| {
                let le = series.strip_prefix(&prefix)?.strip_suffix("\"}")?;
                let le = match le {
                    "+Inf" => f64::INFINITY,
                    v => v.parse().ok()?,
                };
                Some((le, count))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(!buckets.is_empty(), "no histogram {name}");
        buckets
    }

    /// Whether any family's name starts with `prefix`.
    pub fn has_family_prefix(&self, prefix: &str) -> bool {
        self.types.keys().any(|k| k.starts_with(prefix))
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `{name="value",...}` with `\\`, `\"` and `\n` the only escapes.
fn valid_labels(labels: &str) -> bool {
    let Some(inner) = labels.strip_prefix('{').and_then(|l| l.strip_suffix('}')) else {
        return false;
    };
    let mut rest = inner;
    while !rest.is_empty() {
        let Some((name, after)) = rest.split_once("=\"") else {
            return false;
        };
        if !valid_name(name) || name.contains(':') {
            return false;
        }
        let Some(end) = closing_quote(after) else {
            return false;
        };
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    true
}

fn closing_quote(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match (escaped, c) {
            (true, '\\' | '"' | 'n') => escaped = false,
            (true, _) => return None,
            (false, '\\') => escaped = true,
            (false, '"') => return Some(i),
            (false, _) => {}
        }
    }
    None
}

/// A Go `ParseFloat` value as Prometheus writes it, including `+Inf`, `-Inf` and `NaN`.
fn parse_value(v: &str) -> Option<f64> {
    match v {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => v.parse().ok(),
    }
}
