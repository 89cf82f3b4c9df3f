//! Where every value of the config file was written.
//!
//! The typed parse (`file.rs`) gives values; most checks are about values the parser found
//! well-formed but wrong (an owner that does not exist, a key that names a per-attempt
//! value), and each error must point at the line of the offending field. Rather than wrap
//! every field of every type in `Spanned` (the HTTP spec types belong to another crate and
//! can't carry spans), the file is read a second time into this tree of positions, and a
//! check asks for the position of a path such as `tools[3].call.upstream`.
//!
//! The tree is also what reports YAML syntax errors: it accepts any well-formed YAML, so its
//! errors are about syntax, not about types.

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// A 1-based line and column in the config file; 0 when unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    pub line: u64,
    pub column: u64,
}

impl Position {
    fn of(location: &serde_saphyr::Location) -> Position {
        Position {
            line: location.line(),
            column: location.column(),
        }
    }
}

/// One step of a path into the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

impl<'a> From<&'a str> for Segment<'a> {
    fn from(key: &'a str) -> Self {
        Segment::Key(key)
    }
}

impl<'a> From<&'a String> for Segment<'a> {
    fn from(key: &'a String) -> Self {
        Segment::Key(key)
    }
}

impl From<usize> for Segment<'_> {
    fn from(index: usize) -> Self {
        Segment::Index(index)
    }
}

/// `Segment`s for a path of strings (a JSON pointer's tokens, a path from
/// [`SourceMap::path_at`]): numbers index sequences. Where the file has a mapping with a
/// numeric key instead, the position falls back to the mapping, which is close enough for an
/// error.
pub fn segments(path: &[String]) -> Vec<Segment<'_>> {
    path.iter()
        .map(|segment| match segment.parse::<usize>() {
            Ok(index) => Segment::Index(index),
            Err(_) => Segment::Key(segment),
        })
        .collect()
}

/// Builds a `[Segment]` path: `at!["tools", index, "key"]`.
#[macro_export]
macro_rules! at {
    ($($segment:expr),* $(,)?) => {
        [$($crate::source_map::Segment::from($segment)),*]
    };
}

/// The positions of every node of one YAML document.
#[derive(Debug)]
pub struct SourceMap {
    root: Node,
}

#[derive(Debug)]
struct Node {
    position: Position,
    /// The text of a string scalar (used to name a tool in errors found before the typed
    /// parse); numbers, booleans and collections have none.
    text: Option<String>,
    children: Children,
}

#[derive(Debug)]
enum Children {
    /// `~`, `null` or nothing after the colon.
    Null,
    Scalar,
    Sequence(Vec<Node>),
    Mapping(Vec<Entry>),
}

#[derive(Debug)]
struct Entry {
    key: String,
    key_position: Position,
    value: Node,
}

impl SourceMap {
    /// Reads the positions of `text`, or the YAML syntax error that prevents it.
    pub fn parse(
        text: &str,
        options: serde_saphyr::Options,
    ) -> Result<SourceMap, serde_saphyr::Error> {
        let root: Node = serde_saphyr::from_str_with_options(text, options)?;
        Ok(SourceMap { root })
    }

    fn node(&self, path: &[Segment<'_>]) -> (&Node, usize) {
        let mut node = &self.root;
        for (depth, segment) in path.iter().enumerate() {
            let next = match (segment, &node.children) {
                (Segment::Key(key), Children::Mapping(entries)) => entries
                    .iter()
                    .find(|entry| entry.key == *key)
                    .map(|entry| &entry.value),
                (Segment::Index(index), Children::Sequence(items)) => items.get(*index),
                _ => None,
            };
            match next {
                Some(next) => node = next,
                None => return (node, depth),
            }
        }
        (node, path.len())
    }

    /// True when the document is a mapping (a config is one).
    pub fn is_mapping(&self) -> bool {
        matches!(self.root.children, Children::Mapping(_))
    }

    /// The position of the value at `path`, or of its deepest ancestor that exists (the
    /// tool, for a field that the tool lacks).
    pub fn value(&self, path: &[Segment<'_>]) -> Position {
        self.node(path).0.position
    }

    /// True when every step of `path` exists and the value is not null (`effect:` with
    /// nothing after it is as missing as no `effect` at all).
    pub fn has_value(&self, path: &[Segment<'_>]) -> bool {
        let (node, depth) = self.node(path);
        depth == path.len() && !matches!(node.children, Children::Null)
    }

    /// True when every step of `path` exists, whatever its value: `approval:` with nothing
    /// after it is written, although it holds nothing.
    pub fn has_key(&self, path: &[Segment<'_>]) -> bool {
        self.node(path).1 == path.len()
    }

    /// The position of the last key of `path` (`efect` in `efect: read`); the value's
    /// position when the path does not end in a key that exists.
    pub fn key(&self, path: &[Segment<'_>]) -> Position {
        if let Some((Segment::Key(key), parent)) = path.split_last() {
            let (node, depth) = self.node(parent);
            if depth == parent.len()
                && let Children::Mapping(entries) = &node.children
                && let Some(entry) = entries.iter().find(|entry| entry.key == *key)
            {
                return entry.key_position;
            }
        }
        self.value(path)
    }

    /// The string at `path`, if there is one.
    pub fn text(&self, path: &[Segment<'_>]) -> Option<&str> {
        let (node, depth) = self.node(path);
        (depth == path.len())
            .then_some(node.text.as_deref())
            .flatten()
    }

    /// The number of items of the sequence at `path` (0 when it is not a sequence).
    pub fn len(&self, path: &[Segment<'_>]) -> usize {
        match self.node(path) {
            (
                Node {
                    children: Children::Sequence(items),
                    ..
                },
                depth,
            ) if depth == path.len() => items.len(),
            _ => 0,
        }
    }

    /// The path (as keys and indexes, outermost first) of the deepest value or key written
    /// at `position`, used to name the field a parser error is about.
    pub fn path_at(&self, position: Position) -> Vec<String> {
        fn walk(node: &Node, position: Position, path: &mut Vec<String>) -> bool {
            let children_match = match &node.children {
                Children::Null | Children::Scalar => false,
                Children::Sequence(items) => items.iter().enumerate().any(|(index, item)| {
                    path.push(index.to_string());
                    let found = walk(item, position, path);
                    if !found {
                        path.pop();
                    }
                    found
                }),
                Children::Mapping(entries) => entries.iter().any(|entry| {
                    path.push(entry.key.clone());
                    // A key's own position: the parser reports unknown fields there.
                    let found =
                        walk(&entry.value, position, path) || entry.key_position == position;
                    if !found {
                        path.pop();
                    }
                    found
                }),
            };
            children_match || node.position == position
        }
        let mut path = Vec::new();
        walk(&self.root, position, &mut path);
        path
    }
    /// The path of the innermost mapping that starts at `position` or has a key or value
    /// there: where a field the parser found missing belongs.
    pub fn mapping_at(&self, position: Position) -> Vec<String> {
        fn walk(node: &Node, position: Position, path: &mut Vec<String>, best: &mut Vec<String>) {
            match &node.children {
                Children::Mapping(entries) => {
                    let holds = node.position == position
                        || entries.iter().any(|entry| {
                            entry.key_position == position || entry.value.position == position
                        });
                    if holds {
                        // Deeper mappings are visited later and win.
                        *best = path.clone();
                    }
                    for entry in entries {
                        path.push(entry.key.clone());
                        walk(&entry.value, position, path, best);
                        path.pop();
                    }
                }
                Children::Sequence(items) => {
                    for (index, item) in items.iter().enumerate() {
                        path.push(index.to_string());
                        walk(item, position, path, best);
                        path.pop();
                    }
                }
                Children::Null | Children::Scalar => {}
            }
        }
        let mut best = Vec::new();
        walk(&self.root, position, &mut Vec::new(), &mut best);
        best
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<Content>::deserialize(deserializer)?;
        let Content(text, children) = spanned.value;
        Ok(Node {
            // Where the value is used, not where an anchor defined it: the error is about
            // this use.
            position: Position::of(&spanned.referenced),
            text,
            children,
        })
    }
}

/// A mapping key as text; keys that are not scalars (YAML allows them) become empty text,
/// which no path of the config names.
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (text, _) = deserializer.deserialize_any(NodeVisitor)?;
        Ok(KeyText(text.unwrap_or_default()))
    }
}

/// Reads any YAML value as (text of a scalar, children).
struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = (Option<String>, Children);

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("any YAML value")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
        Ok((Some(value.to_owned()), Children::Scalar))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Self::Value, E> {
        Ok((Some(value.to_string()), Children::Scalar))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
        Ok((Some(value.to_string()), Children::Scalar))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
        Ok((Some(value.to_string()), Children::Scalar))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Self::Value, E> {
        Ok((Some(value.to_string()), Children::Scalar))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Self::Value, E> {
        Ok((Some(value.to_string()), Children::Scalar))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
        Ok((Some(value.to_string()), Children::Scalar))
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Self::Value, E> {
        Ok((None, Children::Scalar))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((None, Children::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((None, Children::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut sequence: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = sequence.next_element::<Node>()? {
            items.push(item);
        }
        Ok((None, Children::Sequence(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut mapping: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = mapping.next_key::<Spanned<KeyText>>()? {
            let value = mapping.next_value::<Node>()?;
            entries.push(Entry {
                key: key.value.0,
                key_position: Position::of(&key.referenced),
                value,
            });
        }
        Ok((None, Children::Mapping(entries)))
    }
}

/// A node without its position: what `Spanned` wraps.
struct Content(Option<String>, Children);

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (text, children) = deserializer.deserialize_any(NodeVisitor)?;
        Ok(Content(text, children))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> SourceMap {
        SourceMap::parse(text, serde_saphyr::Options::default()).unwrap()
    }

    #[test]
    fn paths_find_values_keys_and_the_nearest_ancestor() {
        let map =
            map("tools:\n  - name: a\n    effect: read\n  - name: b\n    call: {upstream: x}\n");
        assert_eq!(
            map.value(&at!["tools", 1, "name"]),
            Position {
                line: 4,
                column: 11
            }
        );
        assert_eq!(
            map.key(&at!["tools", 0, "effect"]),
            Position { line: 3, column: 5 }
        );
        assert_eq!(
            map.value(&at!["tools", 1, "call", "upstream"]),
            Position {
                line: 5,
                column: 22
            }
        );
        // A field the tool lacks points at the tool.
        assert_eq!(
            map.value(&at!["tools", 1, "effect"]),
            Position { line: 4, column: 5 }
        );
        assert!(!map.has_value(&at!["tools", 1, "effect"]));
        assert!(map.has_value(&at!["tools", 0, "effect"]));
        assert!(map.has_key(&at!["tools", 0, "effect"]));
        assert!(!map.has_key(&at!["tools", 1, "effect"]));
        assert_eq!(map.text(&at!["tools", 1, "name"]), Some("b"));
        assert_eq!(map.len(&at!["tools"]), 2);
        assert_eq!(
            map.path_at(Position {
                line: 5,
                column: 22
            }),
            ["tools", "1", "call", "upstream"]
        );
        // A missing field belongs to the mapping that has a key at the reported place.
        let at_call = Position { line: 5, column: 5 };
        assert_eq!(map.mapping_at(at_call), ["tools", "1"]);
    }

    #[test]
    fn a_key_without_a_value_is_written_but_holds_nothing() {
        let map = map("approval:\nbudgets: []\n");
        assert!(map.has_key(&at!["approval"]));
        assert!(!map.has_value(&at!["approval"]));
        assert!(map.has_key(&at!["budgets"]) && map.has_value(&at!["budgets"]));
        assert!(!map.has_key(&at!["tools"]));
    }
}
