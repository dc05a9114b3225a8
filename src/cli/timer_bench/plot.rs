//! `timer-bench --plot FILE.svg`: a latency histogram like the gnuplot pictures people draw from
//! cyclictest's `-h` output, written by hand as SVG so the benchmark needs no plotting tool.
//!
//! Bucket k holds the samples with floor(ns / 1000) == k. The count axis is logarithmic, as
//! cyclictest plots are, because the tail that matters is a few samples beside thousands.

use backoffd::stats::Summary;

use super::cyclic::Histogram;

/// Canvas size in pixels; the `viewBox` matches, so viewers can scale it.
const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 540.0;
/// The plot area's edges: room on the left for the count labels, at the bottom for the
/// latency labels and axis title, at the top for the title.
const LEFT: f64 = 80.0;
const RIGHT: f64 = WIDTH - 40.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = HEIGHT - 60.0;
/// At most this many bins, so that none is narrower than a pixel of the 840 px plot area.
const MAX_BINS: u64 = 800;
/// The x range never shrinks below nor grows beyond these (µs).
const MIN_RANGE_US: u64 = 10;
const MAX_RANGE_US: u64 = 10_000;
/// The count axis starts half a count below 1 (10^-0.3), so that a bin of one sample, often
/// the tail that matters, stands above an empty one.
const FLOOR_EXP: f64 = -0.3;
/// Okabe-Ito, the colour-blind-safe palette, yellow last because it is faint on white.
const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

/// One series of the plot: a wake-up source and its lateness samples.
pub struct Series<'a> {
    /// The source's name, e.g. "timerfd" or "nanosleep".
    pub name: &'a str,
    /// Lateness of every sample in nanoseconds (dispatch time minus deadline; negative = early).
    pub lateness_ns: &'a [i64],
}

/// One series' samples sorted into the plot's bins. Every sample lands in exactly one of
/// `counts`, `overflow` or `early`, so the legend can account for what the picture leaves out.
#[derive(Debug, PartialEq)]
struct Bins {
    counts: Vec<u64>,
    overflow: u64,
    early: u64,
}

/// The plot's scales: what the axes span, and the mapping from data to pixels.
struct Frame {
    range_us: u64,
    bin_us: u64,
    /// The count axis runs from 10^0 to 10^top_exp.
    top_exp: u32,
}

/// An SVG document: a latency histogram in 1 µs buckets with a logarithmic count axis, one
/// step line per series, a legend, and the title given.
pub fn svg(title: &str, series: &[Series<'_>]) -> String {
    let summaries: Vec<Summary> = series
        .iter()
        .map(|s| Summary::from_nanos(&mut s.lateness_ns.to_vec()))
        .collect();
    let range_us = x_range_us(&summaries);
    let bin_us = bin_width_us(range_us);
    let binned: Vec<Bins> = series
        .iter()
        .map(|s| bins(s.lateness_ns, range_us, bin_us))
        .collect();
    let largest = binned.iter().flat_map(|b| b.counts.iter()).copied().max();
    let frame = Frame {
        range_us,
        bin_us,
        top_exp: top_exp(largest.unwrap_or(0)),
    };
    let mut out = header(title);
    out.push_str(&y_axis(&frame));
    out.push_str(&x_axis(&frame));
    for (i, b) in binned.iter().enumerate() {
        out.push_str(&step_path(&frame, &b.counts, PALETTE[i % PALETTE.len()]));
    }
    if summaries.iter().all(|s| s.samples == 0) {
        out.push_str(&note("no samples"));
    }
    out.push_str(&legend(&frame, series, &summaries, &binned));
    out.push_str("</svg>\n");
    out
}

/// The x range: the smallest 1-2-5 value above every series' p99.9 bucket, so that each
/// series is drawn up to its p99.9 while one outlier cannot squash the picture.
fn x_range_us(summaries: &[Summary]) -> u64 {
    let p999_bucket = summaries
        .iter()
        .map(|s| s.p999_us.floor().max(0.0) as u64)
        .max()
        .unwrap_or(0);
    // Clamped before rounding so that an absurd outlier cannot overflow the search.
    nice_at_least(p999_bucket.saturating_add(1).min(MAX_RANGE_US)).clamp(MIN_RANGE_US, MAX_RANGE_US)
}

/// How many µs one bin spans: 1 if the range fits in `MAX_BINS`, else the smallest 1-2-5
/// width that does. Every such width divides every 1-2-5 range of at least 10, so the last bin
/// is never partial.
fn bin_width_us(range_us: u64) -> u64 {
    nice_at_least(range_us.div_ceil(MAX_BINS))
}

/// The smallest value of the series 1, 2, 5, 10, 20, 50, ... that is at least `x` (saturating
/// at `u64::MAX`, so the search always ends).
fn nice_at_least(x: u64) -> u64 {
    let mut decade: u64 = 1;
    loop {
        for m in [1, 2, 5] {
            let v = decade.saturating_mul(m);
            if v >= x {
                return v;
            }
        }
        decade = decade.saturating_mul(10);
    }
}

/// Sorts samples into bins of `bin_us` over `0..range_us`; the rest are counted, not dropped.
/// The 1 µs buckets are cyclictest's histogram's, merged `bin_us` at a time.
fn bins(lateness_ns: &[i64], range_us: u64, bin_us: u64) -> Bins {
    let fine = Histogram::of(lateness_ns, usize::try_from(range_us).unwrap_or(0));
    let width = usize::try_from(bin_us).unwrap_or(1).max(1);
    Bins {
        counts: fine.counts.chunks(width).map(|c| c.iter().sum()).collect(),
        overflow: fine.overflow,
        early: lateness_ns.iter().filter(|&&ns| ns < 0).count() as u64,
    }
}

/// The count axis' top exponent: the first power of ten above the largest bin (at least 10),
/// so the highest peak never touches the frame.
fn top_exp(largest: u64) -> u32 {
    let mut exp = 1;
    while 10u64.checked_pow(exp).is_some_and(|p| p <= largest) {
        exp += 1;
    }
    exp
}

impl Frame {
    /// The pixel column of a latency.
    fn x(&self, us: u64) -> f64 {
        LEFT + (RIGHT - LEFT) * us as f64 / self.range_us as f64
    }

    /// The pixel row of a count on the log axis; an empty bin sits on the floor.
    fn count_y(&self, count: u64) -> f64 {
        match count {
            0 => BOTTOM,
            c => self.decade_y((c as f64).log10()),
        }
    }

    /// The pixel row of 10^exp: the count axis is linear in the exponent.
    fn decade_y(&self, exp: f64) -> f64 {
        let span = f64::from(self.top_exp) - FLOOR_EXP;
        BOTTOM - (BOTTOM - TOP) * (exp - FLOOR_EXP) / span
    }
}

/// A number for SVG: at most two decimals, no trailing zeros, so output is short and stable.
fn num(x: f64) -> String {
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Escapes text and attribute values; names and titles come from the user. Control characters
/// become spaces, since XML 1.0 cannot carry most of them even escaped.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The root element, a white background and the title.
fn header(title: &str) -> String {
    let (w, h) = (num(WIDTH), num(HEIGHT));
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"30\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n",
        num(WIDTH / 2.0),
        escape(title)
    )
}

/// Gridlines and labels at every power of ten, the axis title and the frame round the plot.
fn y_axis(frame: &Frame) -> String {
    let mut out = String::new();
    for exp in 0..=frame.top_exp {
        let y = num(frame.decade_y(f64::from(exp)));
        let label = if exp <= 6 {
            10u64.pow(exp).to_string()
        } else {
            format!("1e{exp}")
        };
        out.push_str(&format!(
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/>\n\
             <text x=\"{}\" y=\"{y}\" dy=\"4\" text-anchor=\"end\">{label}</text>\n",
            num(LEFT),
            num(RIGHT),
            num(LEFT - 6.0)
        ));
    }
    let mid = num((TOP + BOTTOM) / 2.0);
    out.push_str(&format!(
        "<text x=\"20\" y=\"{mid}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {mid})\">\
         count (log scale)</text>\n<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" \
         fill=\"none\" stroke=\"#888\"/>\n",
        num(LEFT),
        num(TOP),
        num(RIGHT - LEFT),
        num(BOTTOM - TOP)
    ));
    out
}

/// Ten ticks at multiples of a tenth of the range (a 1-2-5 value itself, so labels are round)
/// and the axis title, which names the bin width when bins were merged.
fn x_axis(frame: &Frame) -> String {
    let mut out = String::new();
    let step = frame.range_us / 10;
    for i in 0..=10 {
        let x = num(frame.x(i * step));
        out.push_str(&format!(
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#888\"/>\n\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            num(BOTTOM),
            num(BOTTOM + 5.0),
            num(BOTTOM + 18.0),
            i * step
        ));
    }
    let title = match frame.bin_us {
        1 => "latency (µs)".to_string(),
        w => format!("latency (µs, {w} µs bins)"),
    };
    out.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{title}</text>\n",
        num((LEFT + RIGHT) / 2.0),
        num(HEIGHT - 20.0)
    ));
    out
}

/// One series as a step line: up or down at each bin edge where the count changes, and back
/// to the floor at the end, so empty bins and the last bin read as such.
fn step_path(frame: &Frame, counts: &[u64], colour: &str) -> String {
    let floor = num(BOTTOM);
    let mut d = format!("M{} {floor}", num(LEFT));
    // Comparing integer counts, not pixel rows, avoids comparing floats.
    let mut level = 0;
    for (i, &c) in counts.iter().enumerate() {
        if c != level {
            level = c;
            if i > 0 {
                d.push_str(&format!("H{}", num(frame.x(i as u64 * frame.bin_us))));
            }
            d.push_str(&format!("V{}", num(frame.count_y(c))));
        }
    }
    d.push_str(&format!("H{}", num(RIGHT)));
    if level > 0 {
        d.push_str(&format!("V{floor}"));
    }
    format!("<path d=\"{d}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"/>\n")
}

/// A centred remark in the plot area, for a chart with nothing to draw.
fn note(text: &str) -> String {
    format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" fill=\"#666\">{}</text>\n",
        num((LEFT + RIGHT) / 2.0),
        num((TOP + BOTTOM) / 2.0),
        escape(text)
    )
}

/// One legend line: name, sample count, p50 and p99, and what the picture leaves out.
fn legend_text(frame: &Frame, name: &str, s: &Summary, b: &Bins) -> String {
    let mut text = format!("{name}: {} samples", s.samples);
    if s.samples > 0 {
        text.push_str(&format!(", p50 {:.1} µs, p99 {:.1} µs", s.p50_us, s.p99_us));
    }
    if b.overflow > 0 {
        text.push_str(&format!(", {} beyond {} µs", b.overflow, frame.range_us));
    }
    if b.early > 0 {
        text.push_str(&format!(", {} early", b.early));
    }
    text
}

/// The legend in the plot's top right corner, where a latency histogram's tail is lowest, on a
/// translucent box sized from an estimate of the text width (SVG cannot measure text for us).
fn legend(frame: &Frame, series: &[Series<'_>], summaries: &[Summary], b: &[Bins]) -> String {
    let texts: Vec<String> = series
        .iter()
        .zip(summaries.iter().zip(b))
        .map(|(s, (sum, bins))| legend_text(frame, s.name, sum, bins))
        .collect();
    let Some(widest) = texts.iter().map(|t| t.chars().count()).max() else {
        return String::new();
    };
    let text_end = RIGHT - 40.0;
    let box_w = widest as f64 * 6.5 + 48.0;
    let mut out = format!(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"white\" fill-opacity=\"0.85\" \
         stroke=\"#ccc\"/>\n",
        num(RIGHT - 8.0 - box_w),
        num(TOP + 8.0),
        num(box_w),
        num(texts.len() as f64 * 18.0 + 8.0)
    );
    for (i, text) in texts.iter().enumerate() {
        let y = TOP + 26.0 + i as f64 * 18.0;
        out.push_str(&format!(
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
            num(RIGHT - 32.0),
            num(y - 4.0),
            num(RIGHT - 14.0),
            num(y - 4.0),
            PALETTE[i % PALETTE.len()],
            num(text_end),
            num(y),
            escape(text)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that every opened tag is closed in order and that one `<svg>` holds everything;
    /// a stray `<` or `&` from unescaped text fails it too. Returns the element names seen.
    fn assert_well_formed(doc: &str) -> Vec<String> {
        let body = doc.strip_prefix("<?xml").map_or(doc, |rest| {
            rest.split_once("?>").map_or("", |(_, after)| after)
        });
        let (mut open, mut seen) = (Vec::<String>::new(), Vec::new());
        let mut rest = body.trim();
        assert!(rest.starts_with("<svg "), "the root is <svg>");
        while let Some(start) = rest.find('<') {
            let text = &rest[..start];
            assert!(
                !open.is_empty() || text.trim().is_empty(),
                "text outside the root"
            );
            assert_entities_only(text);
            let end = rest[start..].find('>').expect("every tag ends") + start;
            let tag = &rest[start + 1..end];
            assert!(!tag.contains('<'), "no `<` inside a tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop().as_deref(), Some(name), "closing tag matches");
            } else {
                let name = tag.split([' ', '/']).next().unwrap_or("").to_string();
                assert!(!name.is_empty(), "a tag has a name: <{tag}>");
                seen.push(name.clone());
                if !tag.ends_with('/') {
                    open.push(name);
                }
            }
            assert!(
                !open.is_empty() || rest[end + 1..].trim().is_empty(),
                "one root"
            );
            rest = &rest[end + 1..];
        }
        assert!(open.is_empty(), "unclosed tags: {open:?}");
        seen
    }

    /// Every `&` in text starts one of the entities `escape` writes.
    fn assert_entities_only(text: &str) {
        for (i, _) in text.match_indices('&') {
            let tail = &text[i..];
            let ok = ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"];
            assert!(
                ok.iter().any(|e| tail.starts_with(e)),
                "bare `&` in {text:?}"
            );
        }
    }

    fn conserved(b: &Bins, samples: usize) -> bool {
        b.counts.iter().sum::<u64>() + b.overflow + b.early == samples as u64
    }

    /// A reproducible long-tailed sample set without a random number generator: a base
    /// latency, a spread from a multiplicative hash, and one sample in 500 far out.
    fn synthetic(n: usize, base_ns: i64, spread_ns: i64) -> Vec<i64> {
        (0..n as i64)
            .map(|i| {
                let h = (i.wrapping_mul(2_654_435_761) % 1000 + 1000) % 1000;
                let tail = if i % 500 == 499 { 40 * spread_ns } else { 0 };
                base_ns + h * h * spread_ns / 1_000_000 + tail
            })
            .collect()
    }

    #[test]
    fn one_path_per_series_and_legend_names() {
        let (a, b) = (
            synthetic(1000, 3_000, 20_000),
            synthetic(1000, 8_000, 5_000),
        );
        let series = [
            Series {
                name: "timerfd",
                lateness_ns: &a,
            },
            Series {
                name: "nanosleep",
                lateness_ns: &b,
            },
        ];
        let doc = svg("wake-up lateness", &series);
        let tags = assert_well_formed(&doc);
        assert_eq!(tags.iter().filter(|t| *t == "path").count(), 2);
        assert!(doc.contains("timerfd: 1000 samples, p50 "));
        assert!(doc.contains("nanosleep: 1000 samples, p50 "));
        assert!(doc.contains(">wake-up lateness</text>"));
        assert!(doc.contains(PALETTE[0]) && doc.contains(PALETTE[1]));
        assert!(!doc.contains("no samples"));
    }

    #[test]
    fn names_and_title_are_escaped() {
        let samples = [1_000, 2_000];
        let series = [Series {
            name: "a<b & \"c\" 'd'\u{0}",
            lateness_ns: &samples,
        }];
        let doc = svg("<script>&</script>", &series);
        assert_well_formed(&doc);
        assert!(doc.contains("a&lt;b &amp; &quot;c&quot; &apos;d&apos; : 2 samples"));
        assert!(doc.contains("&lt;script&gt;&amp;&lt;/script&gt;"));
        assert!(!doc.contains("<script"));
    }

    #[test]
    fn bins_conserve_every_sample() {
        let samples = [
            -5,
            -1_000_000,
            0,
            999,
            1_000,
            9_999,
            10_000,
            123_456_789,
            i64::MAX,
        ];
        let b = bins(&samples, 10, 1);
        assert_eq!(b.early, 2);
        assert_eq!(b.overflow, 3, "10 µs and beyond are outside a 10 µs range");
        assert_eq!(b.counts, [2, 1, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert!(conserved(&b, samples.len()));
    }

    #[test]
    fn early_and_overflow_are_said_in_the_legend() {
        let mut samples = vec![-3, -4];
        samples.extend(std::iter::repeat_n(5_000, 2000));
        samples.push(900_000_000);
        let doc = svg(
            "t",
            &[Series {
                name: "x",
                lateness_ns: &samples,
            }],
        );
        assert_well_formed(&doc);
        assert!(doc.contains("x: 2003 samples, p50 5.0 µs, p99 5.0 µs, 1 beyond 10 µs, 2 early"));
    }

    #[test]
    fn range_is_a_round_value_above_the_largest_p999() {
        let range_for = |ns: &[i64]| {
            let s = Summary::from_nanos(&mut ns.to_vec());
            x_range_us(&[s])
        };
        assert_eq!(range_for(&[]), 10, "never below 10 µs");
        assert_eq!(range_for(&[-7_000]), 10);
        assert_eq!(range_for(&[9_999]), 10);
        assert_eq!(range_for(&[10_000]), 20, "bucket 10 needs a range past it");
        assert_eq!(range_for(&[37_500]), 50);
        assert_eq!(range_for(&[150_000]), 200);
        assert_eq!(range_for(&[i64::MAX]), 10_000, "never beyond 10 ms");
        // One outlier in 1000 is above p99.9, so it does not stretch the range.
        let mut tail = vec![4_000; 999];
        tail.push(5_000_000);
        assert_eq!(range_for(&tail), 10);
        let both = [1_000, 300_000].map(|ns| Summary::from_nanos(&mut [ns]));
        assert_eq!(x_range_us(&both), 500, "the largest p99.9 over all series");
    }

    #[test]
    fn log_scale_puts_ten_halfway_between_one_and_hundred() {
        for top_exp in 2..6 {
            let f = Frame {
                range_us: 10,
                bin_us: 1,
                top_exp,
            };
            let halfway = (f.count_y(1) + f.count_y(100)) / 2.0;
            assert!((f.count_y(10) - halfway).abs() < 1e-9, "top 10^{top_exp}");
            assert_eq!(f.count_y(0), BOTTOM, "an empty bin sits on the floor");
            assert!(
                f.count_y(1) < BOTTOM - 10.0,
                "a single sample stands above it"
            );
            assert!((f.count_y(10u64.pow(top_exp)) - TOP).abs() < 1e-9);
            assert!(
                (f.decade_y(1.0) - f.count_y(10)).abs() < 1e-9,
                "gridlines match counts"
            );
        }
        assert_eq!(top_exp(0), 1);
        assert_eq!(top_exp(9), 1);
        assert_eq!(
            top_exp(10),
            2,
            "the top is a power of ten above the largest bin"
        );
        assert_eq!(top_exp(u64::MAX), 20);
        assert_eq!(
            nice_at_least(u64::MAX),
            u64::MAX,
            "saturates rather than overflows"
        );
    }

    #[test]
    fn wide_ranges_merge_bins_without_losing_counts() {
        assert_eq!(
            [500, 1000, 2000, 5000, 10_000].map(bin_width_us),
            [1, 2, 5, 10, 20]
        );
        let samples: Vec<i64> = (0..20_000).map(|i| i * 777_777 % 9_000_000_000).collect();
        let range_us = x_range_us(&[Summary::from_nanos(&mut samples.clone())]);
        assert_eq!(range_us, 10_000);
        let merged = bins(&samples, range_us, bin_width_us(range_us));
        assert_eq!(merged.counts.len(), 500);
        assert!(conserved(&merged, samples.len()));
        let fine = bins(&samples, range_us, 1);
        let sums: Vec<u64> = fine.counts.chunks(20).map(|c| c.iter().sum()).collect();
        assert_eq!(
            merged.counts, sums,
            "a wide bin is the sum of its 1 µs buckets"
        );
        let doc = svg(
            "huge outliers",
            &[Series {
                name: "s",
                lateness_ns: &samples,
            }],
        );
        assert_well_formed(&doc);
        assert!(doc.contains("latency (µs, 20 µs bins)"));
    }

    #[test]
    fn all_samples_in_one_bucket() {
        let samples = [42_000; 100];
        let b = bins(&samples, 50, 1);
        assert_eq!(b.counts[42], 100);
        assert!(conserved(&b, samples.len()));
        let doc = svg(
            "one bucket",
            &[Series {
                name: "s",
                lateness_ns: &samples,
            }],
        );
        assert_well_formed(&doc);
        assert!(doc.contains("s: 100 samples, p50 42.0 µs, p99 42.0 µs<"));
        assert!(doc.contains(">latency (µs)</text>"));
    }

    #[test]
    fn zero_series_is_an_empty_chart_with_a_note() {
        let doc = svg("nothing", &[]);
        let tags = assert_well_formed(&doc);
        assert!(!tags.iter().any(|t| t == "path"));
        assert!(doc.contains(">no samples</text>"));
        assert!(doc.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    }

    #[test]
    fn a_series_without_samples_is_drawn_on_the_floor() {
        let doc = svg(
            "empty",
            &[Series {
                name: "idle",
                lateness_ns: &[],
            }],
        );
        let tags = assert_well_formed(&doc);
        assert_eq!(tags.iter().filter(|t| *t == "path").count(), 1);
        assert!(doc.contains(">idle: 0 samples</text>"));
        assert!(doc.contains(">no samples</text>"));
        assert!(doc.contains(&format!("d=\"M80 480H{}\"", num(RIGHT))));
    }

    #[test]
    fn output_is_deterministic_and_numbers_short() {
        let a = synthetic(3000, 1_234, 33_333);
        let series = [Series {
            name: "a",
            lateness_ns: &a,
        }];
        let doc = svg("t", &series);
        assert_eq!(doc, svg("t", &series));
        for n in doc.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
            let decimals = n.split_once('.').map_or(0, |(_, d)| d.len());
            assert!(decimals <= 2, "{n} has more than two decimals");
        }
        assert_eq!(
            [num(1.0), num(2.5), num(1.005), num(-0.001)],
            ["1", "2.5", "1", "0"]
        );
    }
}
