//! The Prometheus text exposition as the tests read it: a family's samples, with their labels.

use std::collections::BTreeMap;

/// The samples of `family` in the exposition `text`: each sample's labels and value.
pub fn samples(text: &str, family: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(family) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(inner) => {
                let (labels, value) = inner.rsplit_once("} ").expect("a closing brace");
                (parse_labels(labels), value)
            }
            None => match rest.strip_prefix(' ') {
                Some(value) => (BTreeMap::new(), value),
                None => continue,
            },
        };
        out.push((labels, value.trim().parse().expect("a sample value")));
    }
    out
}

/// `a="x",b="y"` (with `\\`, `\"` and `\n` escapes) as a map.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "a quoted value in {text}");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => panic!("a dangling escape in {text}"),
                },
                c => value.push(c),
            }
        }
        labels.insert(name.trim_start_matches(',').to_string(), value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    labels
}
