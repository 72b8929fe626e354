//! A figure in Corey's form: one line per configuration against the number of cores, every
//! point marked and labelled "model" (these are model times, not measurements).

use std::fmt::Write;

/// One line of a plot: its name and (cores, value) points; a missing point is left out.
pub struct Series {
    pub name: String,
    pub points: Vec<(u32, f64)>,
}

const COLORS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// An SVG line plot over the core counts `xs` (evenly spaced, as Corey's 1-16 axes are
/// read), y from 0 to the largest value.
pub fn lines(title: &str, ylabel: &str, xs: &[u32], series: &[Series]) -> String {
    let (w, h, l, r, t, b) = (720.0, 420.0, 80.0, 200.0, 40.0, 50.0);
    let pw = w - l - r;
    let ph = h - t - b;
    let ymax = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).filter(|v| v.is_finite()).fold(0.0f64, f64::max);
    let ymax = if ymax > 0.0 { nice_ceiling(ymax) } else { 1.0 };
    let n = xs.len().max(1);
    let xpos = |c: u32| -> f64 {
        let i = xs.iter().position(|&x| x == c).unwrap_or(0);
        if n == 1 {
            l + pw / 2.0
        } else {
            l + pw * i as f64 / (n - 1) as f64
        }
    };
    let ypos = |v: f64| t + ph * (1.0 - v / ymax);
    let mut s = String::new();
    let _ = writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#);
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#, w / 2.0, esc(title));
    let _ = writeln!(s, r#"<line x1="{l}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#, t + ph, l + pw, t + ph);
    let _ = writeln!(s, r#"<line x1="{l}" y1="{t}" x2="{l}" y2="{}" stroke="black"/>"#, t + ph);
    for i in 0..=4 {
        let v = ymax * i as f64 / 4.0;
        let y = ypos(v);
        let _ = writeln!(s, r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="lightgray"/><text x="{}" y="{}" text-anchor="end">{}</text>"#, l, l + pw, l - 6.0, y + 4.0, fmt_tick(v));
    }
    for &c in xs {
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{c}</text>"#, xpos(c), t + ph + 18.0);
    }
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">cores</text>"#, l + pw / 2.0, h - 8.0);
    let _ = writeln!(s, r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#, t + ph / 2.0, t + ph / 2.0, esc(ylabel));
    for (k, se) in series.iter().enumerate() {
        let col = COLORS[k % COLORS.len()];
        let pts: Vec<(f64, f64)> = se.points.iter().filter(|p| p.1.is_finite()).map(|&(c, v)| (xpos(c), ypos(v))).collect();
        if pts.len() > 1 {
            let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = writeln!(s, r#"<polyline fill="none" stroke="{col}" stroke-width="2" points="{}"/>"#, path.join(" "));
        }
        for (x, y) in &pts {
            let _ = writeln!(s, r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{col}"/><text x="{:.1}" y="{:.1}" font-size="9" fill="{col}">model</text>"#, x + 4.0, y - 5.0);
        }
        let ly = t + 14.0 + 18.0 * k as f64;
        let _ = writeln!(s, r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{col}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#, l + pw + 12.0, l + pw + 32.0, l + pw + 38.0, ly + 4.0, esc(&se.name));
    }
    let _ = writeln!(s, r#"<text x="{l}" y="{}" font-size="10" fill="dimgray">every point: model time (exact counts + amd16 cache model), not a measurement</text>"#, t - 6.0);
    s.push_str("</svg>\n");
    s
}

/// The smallest of 1, 2, 5 × 10^k at or above `v`.
fn nice_ceiling(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_is_labelled_model() {
        let s = lines("t", "y", &[1, 2, 4], &[Series { name: "a".into(), points: vec![(1, 1.0), (2, 2.0), (4, f64::NAN)] }, Series { name: "b<".into(), points: vec![(1, 3.0)] }]);
        assert_eq!(s.matches(">model</text>").count(), 3, "one label per finite point");
        assert!(s.contains("b&lt;"));
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
    }
}
