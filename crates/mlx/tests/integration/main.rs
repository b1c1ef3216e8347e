//! The mlx crate's integration tests, one module per file, in one test binary: each binary links the
//! crate again (thin LTO), so one binary instead of one per file saves minutes of CI's build.
//! `tests/in_place.rs` stays a binary of its own: it reads MLX's process-wide memory counters,
//! so nothing may run beside it.
mod attention_cpu;
mod causal_weights_cpu;
mod cpu_math;
mod decode_attention_cpu;
mod distributed;
mod exact_attention_cpu;
mod gemv_cpu;
mod greedy_cpu;
mod ops;
mod qmm_cpu;
mod row_ops;
mod rows_cpu;

/// A test's name as the harness lists it (its module path without the crate's name), for a
/// test that runs this binary again as a child process with `--exact`.
pub fn test_name(module_path: &str, test: &str) -> String {
    let module = module_path.split_once("::").map_or("", |(_, rest)| rest);
    format!("{module}::{test}")
}

/// Runs this binary's ignored test `test` of the module at `module_path` in a child process with
/// `env` set (for switches read once per process), asserts that it passed, and returns its stdout.
pub fn run_child(module_path: &str, test: &str, env: &[(&str, &str)]) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .arg(test_name(module_path, test))
        .args(["--exact", "--nocapture", "--ignored"])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{env:?}: {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}
