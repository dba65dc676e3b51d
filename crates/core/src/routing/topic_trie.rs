//! Topic-exchange matching: a trie over the dot-separated words of binding keys, where `*`
//! matches exactly one word and `#` zero or more.
//!
//! The trie is persistent: nodes are shared (`Arc`) between the routing snapshots that hold
//! them, and a bind or unbind copies only the nodes on its key's path (path copying), each
//! node's children in a `LayeredMap`, so a change costs O(words × √children) instead of a
//! rebuild of the exchange's whole table. A trie being built is owned by one snapshot and
//! changed in place, with no copies.

use std::sync::Arc;

use crate::routing::layered::LayeredMap;

#[derive(Debug, Clone)]
pub struct TopicTrie<T> {
    root: Arc<Node<T>>,
}

impl<T> Default for TopicTrie<T> {
    fn default() -> Self {
        TopicTrie {
            root: Arc::new(Node::default()),
        }
    }
}

#[derive(Debug, Clone)]
struct Node<T> {
    words: LayeredMap<Box<str>, Arc<Node<T>>>,
    /// Entries in `words` (a layered map does not count them).
    word_count: usize,
    star: Option<Arc<Node<T>>>,
    hash: Option<Arc<Node<T>>>,
    /// Values bound with the key that ends here, in the order they were bound.
    values: Vec<T>,
}

impl<T> Default for Node<T> {
    fn default() -> Self {
        Node {
            words: LayeredMap::default(),
            word_count: 0,
            star: None,
            hash: None,
            values: Vec::new(),
        }
    }
}

impl<T> Node<T> {
    /// Holds nothing: no value and no child (an unbind removes such a node).
    fn is_empty(&self) -> bool {
        self.values.is_empty() && self.word_count == 0 && self.star.is_none() && self.hash.is_none()
    }
}

/// `""` has no words, so `#` matches it; `a..b` has an empty middle word, as in RabbitMQ.
fn words(key: &str) -> impl Iterator<Item = &str> {
    let empty = key.is_empty();
    key.split('.').filter(move |_| !empty)
}

impl<T: Clone> TopicTrie<T> {
    /// Adds `value` under `binding_key` (after any value already there).
    pub fn insert(&mut self, binding_key: &str, value: T) {
        let words: Vec<&str> = words(binding_key).collect();
        insert_at(&mut self.root, &words, value);
    }

    /// Removes the first value under `binding_key` that `is_it` picks; whether one was there.
    /// Nodes left empty are removed, so the trie is the one a build of what remains makes.
    pub fn remove(&mut self, binding_key: &str, is_it: &dyn Fn(&T) -> bool) -> bool {
        let words: Vec<&str> = words(binding_key).collect();
        if !self.contains(&words, is_it) {
            return false; // no path is copied for nothing
        }
        let removed = remove_at(&mut self.root, &words, is_it);
        debug_assert!(removed, "invariant: a value found is removed");
        removed
    }

    /// Calls `found` for each value whose binding key matches; a value bound under several
    /// matching keys may be reported more than once (the caller de-duplicates destinations).
    pub fn matches(&self, routing_key: &str, found: &mut dyn FnMut(&T)) {
        let words: Vec<&str> = words(routing_key).collect();
        walk(&self.root, &words, found);
    }

    /// Whether a value `is_it` picks is bound under exactly these binding-key words.
    fn contains(&self, words: &[&str], is_it: &dyn Fn(&T) -> bool) -> bool {
        let mut node = &self.root;
        for word in words {
            let next = match *word {
                "*" => node.star.as_ref(),
                "#" => node.hash.as_ref(),
                _ => node.words.get(*word),
            };
            match next {
                Some(next) => node = next,
                None => return false,
            }
        }
        node.values.iter().any(is_it)
    }
}

fn insert_at<T: Clone>(node: &mut Arc<Node<T>>, words: &[&str], value: T) {
    // Copies the node only when an older snapshot shares it.
    let node = Arc::make_mut(node);
    let Some((word, rest)) = words.split_first() else {
        node.values.push(value);
        return;
    };
    match *word {
        "*" => insert_at(node.star.get_or_insert_with(Arc::default), rest, value),
        "#" => insert_at(node.hash.get_or_insert_with(Arc::default), rest, value),
        _ => {
            let mut added = false;
            let child = node.words.entry_mut(Box::from(*word), || {
                added = true;
                Arc::default()
            });
            insert_at(child, rest, value);
            node.word_count += usize::from(added);
        }
    }
}

/// Removes the value (known to be there) and every node the removal leaves empty.
fn remove_at<T: Clone>(
    node: &mut Arc<Node<T>>,
    words: &[&str],
    is_it: &dyn Fn(&T) -> bool,
) -> bool {
    let node = Arc::make_mut(node);
    let Some((word, rest)) = words.split_first() else {
        let Some(at) = node.values.iter().position(is_it) else {
            return false;
        };
        node.values.remove(at);
        return true;
    };
    let (removed, emptied) = match *word {
        "*" | "#" => {
            let slot = if *word == "*" {
                &mut node.star
            } else {
                &mut node.hash
            };
            let Some(child) = slot.as_mut() else {
                return false;
            };
            let removed = remove_at(child, rest, is_it);
            let emptied = child.is_empty();
            if emptied {
                *slot = None;
            }
            (removed, false)
        }
        _ => {
            if node.words.get(*word).is_none() {
                return false;
            }
            let child = node.words.entry_mut(Box::from(*word), Arc::default);
            let removed = remove_at(child, rest, is_it);
            let emptied = child.is_empty();
            if emptied {
                node.words.set(Box::from(*word), None);
            }
            (removed, emptied)
        }
    };
    if emptied {
        debug_assert!(node.word_count > 0, "invariant: a word child was counted");
        node.word_count -= 1;
    }
    removed
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
#[path = "topic_trie_test.rs"]
mod tests;
