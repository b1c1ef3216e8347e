//! Python-compatible text forms of template values: `json.dumps` (what
//! transformers' `tojson` filter calls) and `str()` (what Jinja2 prints for
//! `{{ value }}`). Byte-identical output matters because the rendered prompt
//! is tokenized.

use std::fmt::Write;

use minijinja::value::{Value, ValueKind};

/// Options of Python's `json.dumps` that transformers' `tojson` exposes.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    pub ensure_ascii: bool,
    /// `None`: single line. `Some(s)`: newline plus `s` per nesting level.
    pub indent: Option<String>,
    /// `(item_separator, key_separator)`; Python's default depends on indent.
    pub separators: Option<(String, String)>,
    pub sort_keys: bool,
}

pub fn dumps(value: &Value, opts: &DumpOptions) -> Result<String, String> {
    let (item_sep, key_sep) = match &opts.separators {
        Some((i, k)) => (i.clone(), k.clone()),
        None if opts.indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let mut out = String::new();
    let mut w = Dumper { opts, item_sep, key_sep, out: &mut out };
    w.value(value, 0)?;
    Ok(out)
}

struct Dumper<'a> {
    opts: &'a DumpOptions,
    item_sep: String,
    key_sep: String,
    out: &'a mut String,
}

impl Dumper<'_> {
    fn newline(&mut self, level: usize) {
        if let Some(indent) = &self.opts.indent {
            self.out.push('\n');
            for _ in 0..level {
                self.out.push_str(indent);
            }
        }
    }

    fn value(&mut self, v: &Value, level: usize) -> Result<(), String> {
        match v.kind() {
            ValueKind::None | ValueKind::Undefined => self.out.push_str("null"),
            ValueKind::Bool => self.out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => self.out.push_str(&number(v, true)),
            ValueKind::String => json_string(v.as_str().unwrap_or_default(), self.opts.ensure_ascii, self.out),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter().map_err(|e| e.to_string())?.collect();
                self.container('[', ']', items.len(), level, |d, i, lvl| d.value(&items[i], lvl))?;
            }
            ValueKind::Map => {
                let mut entries = Vec::new();
                for key in v.try_iter().map_err(|e| e.to_string())? {
                    let item = v.get_item(&key).map_err(|e| e.to_string())?;
                    entries.push((key_string(&key)?, item));
                }
                if self.opts.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.container('{', '}', entries.len(), level, |d, i, lvl| {
                    json_string(&entries[i].0, d.opts.ensure_ascii, d.out);
                    d.out.push_str(&d.key_sep.clone());
                    d.value(&entries[i].1, lvl)
                })?;
            }
            other => return Err(format!("Object of type {other} is not JSON serializable")),
        }
        Ok(())
    }

    fn container(
        &mut self,
        open: char,
        close: char,
        len: usize,
        level: usize,
        mut item: impl FnMut(&mut Self, usize, usize) -> Result<(), String>,
    ) -> Result<(), String> {
        self.out.push(open);
        if len == 0 {
            self.out.push(close);
            return Ok(());
        }
        for i in 0..len {
            if i > 0 {
                let sep = self.item_sep.clone();
                self.out.push_str(&sep);
            }
            self.newline(level + 1);
            item(self, i, level + 1)?;
        }
        self.newline(level);
        self.out.push(close);
        Ok(())
    }
}

/// `json.dumps` turns int, float, bool and None keys into strings.
fn key_string(key: &Value) -> Result<String, String> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Number => Ok(number(key, true)),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.to_string()),
        ValueKind::None => Ok("null".to_string()),
        other => Err(format!("keys must be str, int, float, bool or None, not {other}")),
    }
}

/// Python's number text: ints as is, floats by `float.__repr__`. `json_names`
/// selects `NaN`/`Infinity` (json) over `nan`/`inf` (repr).
pub fn number(v: &Value, json_names: bool) -> String {
    if v.is_integer() {
        return v.to_string();
    }
    match f64::try_from(v.clone()) {
        Ok(x) => float_repr(x, json_names),
        Err(_) => v.to_string(),
    }
}

/// `repr(float)`: shortest round-trip digits, positional for exponents in
/// [-4, 16), scientific (`1e+16`, `1e-05`) otherwise, `.0` on integral values.
pub fn float_repr(x: f64, json_names: bool) -> String {
    if x.is_nan() {
        return if json_names { "NaN" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        let s = if json_names { "Infinity" } else { "inf" };
        return if x < 0.0 { format!("-{s}") } else { s.to_string() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.to_string();
    }
    // `{:e}` gives the shortest round-trip digits, e.g. "1.5e-7".
    let sci = format!("{:e}", x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let body = if exp < 0 {
            format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
        } else if exp + 1 >= n {
            format!("{}{}.0", digits, "0".repeat((exp + 1 - n) as usize))
        } else {
            let (a, b) = digits.split_at((exp + 1) as usize);
            format!("{a}.{b}")
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1);
        let mant = if rest.is_empty() { first.to_string() } else { format!("{first}.{rest}") };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mant}e{esign}{:02}", exp.abs())
    }
}

fn json_string(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", unit);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python `str(value)`, which Jinja2 prints for `{{ value }}`.
pub fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => py_repr(v),
    }
}

/// Python `repr(value)` for JSON-like values.
pub fn py_repr(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".to_string(),
        ValueKind::Bool => if v.is_true() { "True" } else { "False" }.to_string(),
        ValueKind::Number => number(v, false),
        ValueKind::String => str_repr(v.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<String> = match v.try_iter() {
                Ok(it) => it.map(|x| py_repr(&x)).collect(),
                Err(_) => Vec::new(),
            };
            format!("[{}]", items.join(", "))
        }
        ValueKind::Map => {
            let mut parts = Vec::new();
            if let Ok(keys) = v.try_iter() {
                for k in keys {
                    let item = v.get_item(&k).unwrap_or_default();
                    parts.push(format!("{}: {}", py_repr(&k), py_repr(&item)));
                }
            }
            format!("{{{}}}", parts.join(", "))
        }
        _ => v.to_string(),
    }
}

/// `repr(str)`: single quotes unless the text has `'` and no `"`.
fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            // Not printable in Python: C0/C1 controls, DEL and a few
            // separators; other non-printables are rare in chat data.
            c if (c as u32) < 0x20 || (0x7f..=0xa0).contains(&(c as u32)) || c == '\u{ad}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: serde_json::Value) -> Value {
        super::super::template_values::from_json(&json)
    }

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789.125, "123456789.125"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (x, s) in cases {
            assert_eq!(float_repr(x, true), s, "{x}");
        }
    }

    #[test]
    fn dumps_matches_python_defaults() {
        let value = v(serde_json::json!({"a": [1, 2.5, true, null], "é": "\"x\"\n\u{1}<>&'"}));
        let compact = dumps(&value, &DumpOptions::default()).unwrap();
        assert_eq!(compact, r#"{"a": [1, 2.5, true, null], "é": "\"x\"\n\u0001<>&'"}"#);
        let ascii = DumpOptions { ensure_ascii: true, ..Default::default() };
        assert_eq!(dumps(&v(serde_json::json!("é😀")), &ascii).unwrap(), r#""\u00e9\ud83d\ude00""#);
        let pretty = DumpOptions { indent: Some("  ".into()), ..Default::default() };
        assert_eq!(dumps(&v(serde_json::json!({"a": [1], "b": {}})), &pretty).unwrap(), "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
    }

    #[test]
    fn str_matches_python() {
        let value = v(serde_json::json!([{"type": "text", "text": "it's"}, 1.0, null, false]));
        assert_eq!(py_str(&value), r#"[{'type': 'text', 'text': "it's"}, 1.0, None, False]"#);
    }
}
