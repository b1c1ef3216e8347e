//! Inputs of the parity tests: texts to encode, conversations to render,
//! id sequences to stream.

use lm::tokenizer::Tokenizer;
use serde_json::{json, Value};

pub fn encode_texts() -> Vec<String> {
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

pub fn chat_cases() -> Vec<Value> {
    let user = |c: &str| json!({"role": "user", "content": c});
    let assistant = |c: &str| json!({"role": "assistant", "content": c});
    let system = |c: &str| json!({"role": "system", "content": c});
    let tool_call_turn = json!({"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
        {"type": "function", "function": {"name": "search", "arguments": "{\"query\": \"Paris events\"}"}}
    ]});
    let tool_result = |c: &str| json!({"role": "tool", "content": c});
    let case = |messages: Vec<Value>, gen: bool, thinking: Value, tools: Value| json!({"messages": messages, "add_generation_prompt": gen, "enable_thinking": thinking, "tools": tools});
    vec![
        case(vec![user("Hi there!")], true, Value::Null, Value::Null),
        case(vec![system("You are terse."), user("What is 2+2?")], true, Value::Null, Value::Null),
        case(vec![system("Be kind."), user("Hello"), assistant("Hi! How can I help?"), user("Tell me a joke.")], true, Value::Null, Value::Null),
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
        case(vec![system("You can call tools."), user("Weather in Paris?")], true, Value::Null, json!([weather_tool(), search_tool()])),
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
            vec![user("Solve it"), json!({"role": "assistant", "content": "The answer is 5.", "reasoning_content": "\nLet me think... 2+3.\n"})],
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
            vec![
                user("a"),
                json!({"role": "assistant", "content": Value::Null, "tool_calls": [
                {"function": {"name": "search", "arguments": {"query": "q"}}}]}),
            ],
            false,
            Value::Null,
            Value::Null,
        ),
        // tojson of numbers and strings that Python and serde print differently.
        case(
            vec![
                user("Compute"),
                json!({"role": "assistant", "content": "Calling.", "tool_calls": [{"function": {"name": "calc",
                    "arguments": {"big": 12345678901234567890u64, "neg": -42, "f": 1e20, "g": 0.1, "h": -0.0,
                                  "i": 1.5e-7, "j": 100.0, "s": "tab\tbell\u{7}nul\u{0}\u{2028}é\\\"",
                                  "nested": [[], {}, [1, [2.5]], {"k": null, "t": true}]}}}]}),
                tool_result("42"),
            ],
            true,
            Value::Null,
            Value::Null,
        ),
        case(vec![json!({"role": "user", "content": [{"type": "text", "text": "parts"}]})], true, Value::Null, Value::Null),
        case(vec![], true, Value::Null, Value::Null),
    ]
}

/// Deterministic ids without a rand dependency (xorshift64*).
pub fn random_ids(seed: u64, len: usize, below: u32) -> Vec<u32> {
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

pub fn stream_cases(tok: &Tokenizer) -> Vec<Vec<u32>> {
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
