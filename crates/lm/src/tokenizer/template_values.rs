//! JSON to template values, keeping object key order (Python dicts keep
//! insertion order, and `tojson` output depends on it).

use minijinja::value::Value;

pub fn from_json(json: &serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(items) => Value::from(items.iter().map(from_json).collect::<Vec<_>>()),
        serde_json::Value::Object(map) => Value::from_pairs(map.iter().map(|(k, v)| (Value::from(k.as_str()), from_json(v)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_key_order_and_number_kinds() {
        let v = from_json(&serde_json::json!({"z": 1, "a": 1.0, "m": [null, true]}));
        let keys: Vec<String> = v.try_iter().unwrap().map(|k| k.to_string()).collect();
        assert_eq!(keys, ["z", "a", "m"]);
        assert!(v.get_attr("z").unwrap().is_integer());
        assert!(!v.get_attr("a").unwrap().is_integer());
    }
}
