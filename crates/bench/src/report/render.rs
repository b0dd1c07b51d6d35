//! Rendering sections: Markdown with linked plots, self-contained HTML, and the terminal's plain-text table.

use std::fmt::Write as _;

use crate::results::Results;

use super::{Item, Section, Table};

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

pub fn markdown(r: &Results, sections: &[Section]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", r.experiment.title);
    for s in sections {
        let _ = writeln!(md, "## {}\n", s.title);
        for it in &s.items {
            match it {
                Item::Para(p) => {
                    let _ = writeln!(md, "{p}\n");
                }
                Item::Table(t) => {
                    let _ = writeln!(md, "**{}**\n", t.caption);
                    let _ = writeln!(md, "| {} |", t.headers.iter().map(|h| md_escape(h)).collect::<Vec<_>>().join(" | "));
                    let _ = writeln!(md, "|{}", "---|".repeat(t.headers.len()));
                    for row in &t.rows {
                        let _ = writeln!(md, "| {} |", row.iter().map(|c| md_escape(c)).collect::<Vec<_>>().join(" | "));
                    }
                    md.push('\n');
                }
                Item::Plot(stem, _) => {
                    let _ = writeln!(md, "![{stem}](plots/{stem}.svg)\n");
                }
            }
        }
    }
    md
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}\
main{max-width:1100px;margin:0 auto;padding:24px}\
h1{font-size:1.6em;margin:0 0 8px}h2{font-size:1.25em;border-bottom:2px solid #0072b2;padding-bottom:4px;margin-top:0}\
section{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:16px 20px;margin:18px 0}\
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px;font-variant-numeric:tabular-nums}\
caption{text-align:left;font-weight:600;padding:4px 0}\
th,td{border:1px solid #dde1e6;padding:3px 8px;text-align:right}th{background:#eef2f6}\
td:first-child,th:first-child{text-align:left}tr:nth-child(even) td{background:#fafbfc}\
.plot svg{max-width:100%;height:auto}nav a{margin-right:12px}.meta{color:#57606a}";

pub fn html(r: &Results, sections: &[Section]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head><body><main>",
        html_escape(&r.experiment.title)
    );
    let _ = write!(h, "<h1>{}</h1><p class=\"meta\">rtslice bench · {} · {}</p><nav>", html_escape(&r.experiment.title), html_escape(&r.experiment.name), html_escape(&r.machine.kernel));
    for s in sections {
        let _ = write!(h, "<a href=\"#{}\">{}</a>", html_escape(&s.id), html_escape(&s.title));
    }
    h.push_str("</nav>");
    for s in sections {
        let _ = write!(h, "<section id=\"{}\"><h2>{}</h2>", html_escape(&s.id), html_escape(&s.title));
        for it in &s.items {
            match it {
                Item::Para(p) => {
                    let _ = write!(h, "<p>{}</p>", html_escape(p));
                }
                Item::Table(t) => {
                    let _ = write!(h, "<table><caption>{}</caption><thead><tr>", html_escape(&t.caption));
                    for c in &t.headers {
                        let _ = write!(h, "<th>{}</th>", html_escape(c));
                    }
                    h.push_str("</tr></thead><tbody>");
                    for row in &t.rows {
                        h.push_str("<tr>");
                        for c in row {
                            let _ = write!(h, "<td>{}</td>", html_escape(c));
                        }
                        h.push_str("</tr>");
                    }
                    h.push_str("</tbody></table>");
                }
                Item::Plot(_, svg) => {
                    let _ = write!(h, "<div class=\"plot\">{svg}</div>");
                }
            }
        }
        h.push_str("</section>");
    }
    h.push_str("</main></body></html>\n");
    h
}

/// The headline table as plain text for the terminal.
pub fn terminal_table(t: &Table) -> String {
    let widths: Vec<usize> = (0..t.headers.len())
        .map(|k| t.rows.iter().map(|r| r[k].chars().count()).chain([t.headers[k].chars().count()]).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    let line = |cells: &[String], out: &mut String| {
        for (k, c) in cells.iter().enumerate() {
            let pad = widths[k] - c.chars().count();
            if k == 0 {
                let _ = write!(out, "{c}{}", " ".repeat(pad));
            } else {
                let _ = write!(out, "  {}{c}", " ".repeat(pad));
            }
        }
        out.push('\n');
    };
    let _ = writeln!(out, "{}", t.caption);
    line(&t.headers, &mut out);
    let _ = writeln!(out, "{}", "-".repeat(widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1)));
    for r in &t.rows {
        line(r, &mut out);
    }
    out
}
