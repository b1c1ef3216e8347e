//! A minijinja environment that renders like transformers' chat template
//! environment: Jinja2 `ImmutableSandboxedEnvironment(trim_blocks=True,
//! lstrip_blocks=True, extensions=[loopcontrols, AssistantTracker])` plus the
//! `tojson` filter, `raise_exception` and `strftime_now`.

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind};

use super::pyjson::{dumps, py_str, DumpOptions};

/// Marks errors raised by the template itself, so they are reported as the
/// template's own words.
pub const RAISED_PREFIX: &str = "raise_exception: ";

pub fn new_environment() -> Environment<'static> {
    let mut env = Environment::new();
    // The builder only fails on bad custom delimiters; the defaults are fine.
    if let Ok(syntax) = SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).keep_trailing_newline(false).build() {
        env.set_syntax(syntax);
    }
    env.set_auto_escape_callback(|_| AutoEscape::None);
    // Python string/dict/list methods (`startswith`, `split`, `items`, ...).
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    // Jinja2 prints values with Python's str(): True, None, ['a'], 1.0.
    env.set_formatter(|out, _state, value| out.write_str(&py_str(value)).map_err(Error::from));
    env.add_filter("tojson", tojson);
    env.add_filter("string", |v: Value| py_str(&v));
    env.add_function("raise_exception", |message: Value| -> Result<Value, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, format!("{RAISED_PREFIX}{}", py_str(&message))))
    });
    env.add_function("strftime_now", strftime_now);
    env
}

/// transformers: `json.dumps(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`. minijinja passes at most five
/// arguments, so `sort_keys` is keyword-only here.
fn tojson(value: &Value, ensure_ascii: Option<Value>, indent: Option<Value>, separators: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let pick = |positional: Option<Value>, name: &str| -> Result<Option<Value>, Error> {
        match kwargs.get::<Option<Value>>(name)? {
            Some(v) => Ok(Some(v)),
            None => Ok(positional),
        }
    };
    let ensure_ascii = pick(ensure_ascii, "ensure_ascii")?;
    let indent = pick(indent, "indent")?;
    let separators = pick(separators, "separators")?;
    let sort_keys = pick(None, "sort_keys")?;
    kwargs.assert_all_used()?;
    let opts = DumpOptions {
        ensure_ascii: ensure_ascii.is_some_and(|v| v.is_true()),
        indent: indent.and_then(|v| match v.kind() {
            ValueKind::None | ValueKind::Undefined => None,
            ValueKind::String => Some(v.as_str().unwrap_or_default().to_string()),
            // Python: an int indent means that many spaces (negative: none).
            _ => Some(" ".repeat(i64::try_from(v).unwrap_or(0).max(0) as usize)),
        }),
        separators: match separators {
            Some(v) if !v.is_none() && !v.is_undefined() => {
                let parts: Vec<String> = v.try_iter()?.map(|p| py_str(&p)).collect();
                match <[String; 2]>::try_from(parts) {
                    Ok([item, key]) => Some((item, key)),
                    Err(_) => return Err(Error::new(ErrorKind::InvalidOperation, "tojson separators must be an (item, key) pair")),
                }
            }
            _ => None,
        },
        sort_keys: sort_keys.is_some_and(|v| v.is_true()),
    };
    dumps(value, &opts).map(Value::from).map_err(|e| Error::new(ErrorKind::InvalidOperation, e))
}

/// `datetime.now().strftime(format)`. chrono's specifiers follow C strftime
/// like Python's; an unknown specifier is an error, not a panic.
fn strftime_now(format: String) -> Result<Value, Error> {
    use chrono::format::{Item, StrftimeItems};
    let items: Vec<Item> = StrftimeItems::new(&format).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(Error::new(ErrorKind::InvalidOperation, format!("strftime_now: unsupported format {format:?}")));
    }
    let now = chrono::Local::now();
    Ok(Value::from(now.format_with_items(items.into_iter()).to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, ctx: Value) -> String {
        let env = new_environment();
        env.render_str(src, ctx).unwrap()
    }

    #[test]
    fn trims_blocks_like_transformers() {
        let src = "{% for x in xs %}\n  {% if x %}\n{{ x }}\n  {% endif %}\n{% endfor %}\n";
        let ctx = Value::from_pairs([("xs", Value::from(vec![1, 0, 2]))]);
        assert_eq!(render(src, ctx), "1\n2\n");
    }

    #[test]
    fn prints_like_python() {
        let ctx = Value::from_pairs([("t", Value::from(true)), ("n", Value::from(())), ("f", Value::from(2.0)), ("l", Value::from(vec!["a", "b"]))]);
        assert_eq!(render("{{ t }} {{ n }} {{ f }} {{ l }} {{ u }}|", ctx), "True None 2.0 ['a', 'b'] |");
    }

    #[test]
    fn tojson_forms() {
        let ctx = Value::from_pairs([("d", Value::from_pairs([("a", Value::from("<é>"))]))]);
        assert_eq!(render("{{ d | tojson }}", ctx.clone()), r#"{"a": "<é>"}"#);
        assert_eq!(render("{{ d | tojson(indent=2) }}", ctx.clone()), "{\n  \"a\": \"<é>\"\n}");
        assert_eq!(render("{{ d | tojson(true) }}", ctx.clone()), r#"{"a": "<\u00e9>"}"#);
        assert_eq!(render("{{ d | tojson(separators=(',', ':')) }}", ctx), r#"{"a":"<é>"}"#);
    }

    #[test]
    fn python_methods_loop_controls_and_namespace() {
        let src = "{% set ns = namespace(n=0) %}{% for x in xs[::-1] %}{% if x == 2 %}{% continue %}{% endif %}\
                   {% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }} {{ 'a</t>b'.split('</t>')[-1] }} \
                   {{ '\\nx\\n'.strip('\\n') }} {{ 'abc'.startswith('ab') }}";
        let ctx = Value::from_pairs([("xs", Value::from(vec![1, 2, 3]))]);
        assert_eq!(render(src, ctx), "4 b x True");
    }

    #[test]
    fn raise_exception_and_strftime() {
        let env = new_environment();
        let err = env.render_str("{{ raise_exception('bad roles') }}", ()).unwrap_err();
        assert!(err.to_string().contains("bad roles"));
        let year = render("{{ strftime_now('%Y') }}", Value::from(()));
        assert_eq!(year.len(), 4);
        assert!(env.render_str("{{ strftime_now('%Q') }}", ()).is_err());
    }
}
