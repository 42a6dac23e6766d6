//! "Did you mean" for misspelled field names, roles and enum values.

/// The closest candidate to `word`, if one is close enough to be a likely typo.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    let mut best: Option<(f64, &'a str)> = None;
    for c in candidates {
        if c.eq_ignore_ascii_case(word) {
            return Some(c);
        }
        let score = strsim::jaro_winkler(&lower, &c.to_ascii_lowercase());
        if score >= 0.8 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn suggests_close_names_only() {
        let roles = ["master", "worker", "ps"];
        assert_eq!(did_you_mean("wokrer", roles), Some("worker"));
        assert_eq!(did_you_mean("Worker", roles), Some("worker"));
        assert_eq!(
            did_you_mean("replicsa", ["replicas", "framework"]),
            Some("replicas")
        );
        assert_eq!(did_you_mean("zebra", roles), None);
    }
}
