//! `load_with_progress` reports the fraction of weight bytes read: on the
//! sharded fixture (one shard nearly all embedding) several increasing values in
//! (0, 1], the last exactly 1.
use std::path::PathBuf;

#[test]
fn load_progress_increases_to_exactly_one() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/fixtures/qwen3-sharded");
    assert!(dir.is_dir(), "{}: run `npm test` (or node scripts/fixtures.js) first", dir.display());
    let mut seen = Vec::new();
    lm::models::load_with_progress(&dir, &Default::default(), &mut |f| seen.push(f)).unwrap();
    assert!(seen.len() >= 3, "only {} reports: {seen:?}", seen.len());
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "not increasing: {seen:?}");
    assert!(seen[0] > 0.0, "{seen:?}");
    assert_eq!(*seen.last().unwrap(), 1.0);
}
