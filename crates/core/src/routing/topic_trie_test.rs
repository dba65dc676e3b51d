//! The topic trie: matching rules, and bind/unbind changes checked against a fresh build of
//! the same bindings (the oracle), older copies included.

use proptest::prelude::*;

use super::*;

fn matching(bindings: &[&str], routing_key: &str) -> Vec<String> {
    let mut trie = TopicTrie::default();
    for key in bindings {
        trie.insert(key, key.to_string());
    }
    let mut found = Vec::new();
    trie.matches(routing_key, &mut |value: &String| found.push(value.clone()));
    found.sort();
    found.dedup();
    found
}

#[test]
fn star_matches_exactly_one_word() {
    assert_eq!(matching(&["a.*.c"], "a.b.c"), ["a.*.c"]);
    assert!(matching(&["a.*.c"], "a.c").is_empty());
    assert!(matching(&["a.*"], "a.b.c").is_empty());
}

#[test]
fn hash_matches_zero_or_more_words() {
    assert_eq!(matching(&["a.#"], "a"), ["a.#"]);
    assert_eq!(matching(&["a.#"], "a.b.c"), ["a.#"]);
    assert_eq!(matching(&["#.c"], "c"), ["#.c"]);
    assert_eq!(matching(&["a.#.c"], "a.c"), ["a.#.c"]);
    assert_eq!(matching(&["a.#.c"], "a.x.y.c"), ["a.#.c"]);
    assert_eq!(matching(&["#"], ""), ["#"]);
    assert!(matching(&["a.#.c"], "a.x.y").is_empty());
}

#[test]
fn exact_words_and_empty_keys() {
    assert_eq!(matching(&["a.b", "a.c"], "a.b"), ["a.b"]);
    assert_eq!(matching(&[""], ""), [""]);
    assert!(matching(&[""], "a").is_empty());
    assert_eq!(matching(&["*.#", "#.*"], "x"), ["#.*", "*.#"]);
}

/// Every value each routing key matches, sorted (a multiset: a value bound twice counts twice).
fn routes(trie: &TopicTrie<u32>, routing_keys: &[String]) -> Vec<Vec<u32>> {
    routing_keys
        .iter()
        .map(|key| {
            let mut found = Vec::new();
            trie.matches(key, &mut |v: &u32| found.push(*v));
            found.sort_unstable();
            found
        })
        .collect()
}

fn build(bindings: &[(String, u32)]) -> TopicTrie<u32> {
    let mut trie = TopicTrie::default();
    for (key, value) in bindings {
        trie.insert(key, *value);
    }
    trie
}

/// Every routing key of up to three words over `a`, `b`, `c`, and a few with empty words.
fn routing_keys() -> Vec<String> {
    let mut keys = vec![
        String::new(),
        ".".into(),
        "a.".into(),
        ".a".into(),
        "a..b".into(),
    ];
    let mut level = vec![String::new()];
    for _ in 0..3 {
        let mut next = Vec::new();
        for prefix in &level {
            for word in ["a", "b", "c"] {
                next.push(if prefix.is_empty() {
                    word.to_string()
                } else {
                    format!("{prefix}.{word}")
                });
            }
        }
        keys.extend(next.iter().cloned());
        level = next;
    }
    keys
}

#[derive(Debug, Clone)]
enum Op {
    Bind(String, u32),
    /// Unbinds the binding at this index (modulo the number of bindings).
    Unbind(usize),
    /// Unbinds a key and value that may not be bound at all.
    UnbindAny(String, u32),
}

fn binding_key() -> impl Strategy<Value = String> {
    let word = prop_oneof![Just("a"), Just("b"), Just("*"), Just("#"), Just("")];
    proptest::collection::vec(word, 0..4).prop_map(|words| words.join("."))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (binding_key(), 0..6u32).prop_map(|(key, value)| Op::Bind(key, value)),
        3 => any::<usize>().prop_map(Op::Unbind),
        1 => (binding_key(), 0..6u32).prop_map(|(key, value)| Op::UnbindAny(key, value)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random binds and unbinds, each on a copy of the previous trie (as the routing snapshot
    /// does): every version routes as a fresh build of its bindings, and the previous
    /// version still routes as before the change.
    #[test]
    fn incremental_changes_route_as_a_fresh_build(ops in proptest::collection::vec(op(), 1..40)) {
        let keys = routing_keys();
        let mut bindings: Vec<(String, u32)> = Vec::new();
        let mut trie: TopicTrie<u32> = TopicTrie::default();
        for op in ops {
            let before = trie.clone();
            let before_routes = routes(&before, &keys);
            match op {
                Op::Bind(key, value) => {
                    trie.insert(&key, value);
                    bindings.push((key, value));
                }
                Op::Unbind(index) if !bindings.is_empty() => {
                    let (key, value) = bindings.remove(index % bindings.len());
                    prop_assert!(trie.remove(&key, &|v| *v == value));
                }
                Op::Unbind(_) => {}
                Op::UnbindAny(key, value) => {
                    let at = bindings.iter().position(|(k, v)| *k == key && *v == value);
                    if let Some(at) = at {
                        bindings.remove(at);
                    }
                    prop_assert_eq!(trie.remove(&key, &|v| *v == value), at.is_some());
                }
            }
            prop_assert_eq!(routes(&trie, &keys), routes(&build(&bindings), &keys));
            prop_assert_eq!(routes(&before, &keys), before_routes);
        }
        // Removing everything leaves an empty root, as a build of nothing.
        for (key, value) in bindings.drain(..) {
            prop_assert!(trie.remove(&key, &|v| *v == value));
        }
        prop_assert!(trie.root.is_empty());
    }
}

/// Thousands of distinct first words: the root's children change through their layered
/// map's delta, and older copies and the oracle still agree.
#[test]
fn a_wide_trie_changes_incrementally_like_a_build() {
    let mut trie: TopicTrie<u32> = TopicTrie::default();
    let mut bindings: Vec<(String, u32)> = Vec::new();
    let mut copies = Vec::new();
    for i in 0..3_000u32 {
        let key = format!("k{}.{}", i % 2_000, if i % 3 == 0 { "#" } else { "*" });
        trie.insert(&key, i);
        bindings.push((key, i));
        if i % 7 == 0 {
            let (key, value) = bindings.remove(bindings.len() / 2);
            assert!(trie.remove(&key, &|v| *v == value));
        }
        if i % 500 == 0 {
            copies.push((trie.clone(), bindings.clone()));
        }
    }
    copies.push((trie, bindings));
    let keys: Vec<String> = (0..2_100).map(|i| format!("k{i}.x")).collect();
    for (trie, bindings) in &copies {
        assert_eq!(routes(trie, &keys), routes(&build(bindings), &keys));
    }
}
