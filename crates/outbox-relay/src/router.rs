//! Topic routing: which destinations a message's topic goes to.
//!
//! Patterns are dot-separated: `*` matches exactly one segment, `#` (only as the last segment)
//! matches one or more remaining segments, anything else matches literally. `order.*` matches
//! `order.paid` but not `order.paid.eu`; `order.#` matches both. A topic goes to the union of the
//! destinations of every route that matches it (fan-out), each destination once.

/// One route: a topic pattern and the destinations it sends to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Topic pattern.
    pub pattern: String,
    /// Destination names.
    pub destinations: Vec<String>,
}

impl Route {
    /// A route from `pattern` to `destinations`.
    pub fn new(
        pattern: impl Into<String>,
        destinations: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Route { pattern: pattern.into(), destinations: destinations.into_iter().map(Into::into).collect() }
    }
}

/// Checks a pattern's syntax, naming the problem.
pub fn validate_pattern(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err("a topic pattern must not be empty".into());
    }
    let segs: Vec<&str> = pattern.split('.').collect();
    for (i, s) in segs.iter().enumerate() {
        if s.is_empty() {
            return Err(format!("pattern {pattern:?} has an empty segment"));
        }
        if *s == "#" && i + 1 != segs.len() {
            return Err(format!("pattern {pattern:?}: `#` may only be the last segment"));
        }
        if s.len() > 1 && (s.contains('*') || s.contains('#')) {
            return Err(format!("pattern {pattern:?}: `*` and `#` must be whole segments"));
        }
    }
    Ok(())
}

/// True when `topic` matches `pattern`.
pub fn matches(pattern: &str, topic: &str) -> bool {
    let mut p = pattern.split('.');
    let mut t = topic.split('.');
    loop {
        match (p.next(), t.next()) {
            (Some("#"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Resolves topics to destination indexes.
#[derive(Debug, Clone)]
pub(crate) struct Router {
    routes: Vec<(String, Vec<usize>)>,
}

impl Router {
    pub(crate) fn new(routes: Vec<(String, Vec<usize>)>) -> Self {
        Router { routes }
    }

    /// Destination indexes for `topic`, in route order, each once; empty = no route.
    pub(crate) fn resolve(&self, topic: &str) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for (pattern, dests) in &self.routes {
            if matches(pattern, topic) {
                for d in dests {
                    if !out.contains(d) {
                        out.push(*d);
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        for (pattern, topic, matched) in [
            ("order.paid", "order.paid", true),
            ("order.paid", "order.paid.eu", false),
            ("order.*", "order.paid", true),
            ("order.*", "order.paid.eu", false),
            ("order.*", "order", false),
            ("order.#", "order.paid.eu", true),
            ("order.#", "order", false),
            ("#", "anything.at.all", true),
            ("*.paid", "order.paid", true),
        ] {
            assert_eq!(matches(pattern, topic), matched, "{pattern} ~ {topic}");
        }
    }

    #[test]
    fn pattern_validation() {
        assert!(validate_pattern("order.*").is_ok());
        for bad in ["", "a..b", "a.#.b", "ord*"] {
            assert!(validate_pattern(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fan_out_is_the_union_without_repeats() {
        let r = Router::new(vec![("order.*".into(), vec![0, 1]), ("order.paid".into(), vec![1, 2])]);
        assert_eq!(r.resolve("order.paid"), vec![0, 1, 2]);
        assert_eq!(r.resolve("order.created"), vec![0, 1]);
        assert!(r.resolve("user.created").is_empty());
    }
}
