//! Topic-exchange matching: a trie over the dot-separated words of binding keys, where `*`
//! matches exactly one word and `#` zero or more.

use std::collections::HashMap;

#[derive(Debug, Clone)]
pub struct TopicTrie<T> {
    root: Node<T>,
}

impl<T> Default for TopicTrie<T> {
    fn default() -> Self {
        TopicTrie {
            root: Node::default(),
        }
    }
}

#[derive(Debug, Clone)]
struct Node<T> {
    words: HashMap<Box<str>, Node<T>>,
    star: Option<Box<Node<T>>>,
    hash: Option<Box<Node<T>>>,
    values: Vec<T>,
}

impl<T> Default for Node<T> {
    fn default() -> Self {
        Node {
            words: HashMap::new(),
            star: None,
            hash: None,
            values: Vec::new(),
        }
    }
}

/// `""` has no words, so `#` matches it; `a..b` has an empty middle word, as in RabbitMQ.
fn words(key: &str) -> impl Iterator<Item = &str> {
    let empty = key.is_empty();
    key.split('.').filter(move |_| !empty)
}

impl<T: Clone> TopicTrie<T> {
    pub fn insert(&mut self, binding_key: &str, value: T) {
        let mut node = &mut self.root;
        for word in words(binding_key) {
            node = match word {
                "*" => node.star.get_or_insert_with(Box::default),
                "#" => node.hash.get_or_insert_with(Box::default),
                _ => node.words.entry(word.into()).or_default(),
            };
        }
        node.values.push(value);
    }

    /// Calls `found` for each value whose binding key matches; a value bound under several
    /// matching keys may be reported more than once (the caller de-duplicates destinations).
    pub fn matches(&self, routing_key: &str, found: &mut dyn FnMut(&T)) {
        let words: Vec<&str> = words(routing_key).collect();
        walk(&self.root, &words, found);
    }
}

fn walk<T>(node: &Node<T>, words: &[&str], found: &mut dyn FnMut(&T)) {
    if let Some(hash) = &node.hash {
        // `#` swallows zero, one, ... all of the remaining words.
        for skip in 0..=words.len() {
            walk(hash, words.get(skip..).unwrap_or_default(), found);
        }
    }
    let Some((first, rest)) = words.split_first() else {
        for value in &node.values {
            found(value);
        }
        return;
    };
    if let Some(child) = node.words.get(*first) {
        walk(child, rest, found);
    }
    if let Some(star) = &node.star {
        walk(star, rest, found);
    }
}

#[cfg(test)]
mod tests {
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
}
