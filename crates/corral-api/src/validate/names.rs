//! Names as Kubernetes takes them: DNS labels (with a suggested fix), label keys and
//! values, and the metadata of an object that holds them.

use std::collections::BTreeMap;

use crate::meta::ObjectMeta;

use super::{MAX_DNS_LABEL, ValidationErrors};

/// `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63: a name that can be a hostname (DNS-1035).
pub fn check_dns1035_label(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > MAX_DNS_LABEL {
        return Err(format!(
            "`{value}` is {} characters; at most {MAX_DNS_LABEL} are allowed",
            value.len()
        ));
    }
    let bytes = value.as_bytes();
    let ok_chars = bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if !ok_chars || !bytes[0].is_ascii_lowercase() || bytes[bytes.len() - 1] == b'-' {
        let fixed = suggest_dns_name(value);
        return Err(format!(
            "`{value}` cannot be a hostname: use lowercase letters, digits and '-', starting with a letter and ending with a letter or digit{}",
            if fixed.is_empty() || fixed == value {
                String::new()
            } else {
                format!(" (e.g. `{fixed}`)")
            }
        ));
    }
    Ok(())
}

/// DNS-1123 label: like DNS-1035 but may start with a digit (namespaces, queues).
pub fn check_dns1123_label(value: &str) -> Result<(), String> {
    match value.as_bytes().first() {
        Some(b) if b.is_ascii_digit() => check_dns1035_label(&format!("a{}", &value[1..]))
            .map_err(|e| e.replacen(&format!("a{}", &value[1..]), value, 1)),
        _ => check_dns1035_label(value),
    }
}

fn suggest_dns_name(value: &str) -> String {
    let mut s: String = value
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let s = s.trim_start_matches(|c: char| c.is_ascii_digit() || c == '-');
    s.chars()
        .take(MAX_DNS_LABEL)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

/// Kubernetes label keys (`prefix/name`) and values.
pub(super) fn check_labels(
    path: &str,
    labels: &BTreeMap<String, String>,
    errs: &mut ValidationErrors,
) {
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    for (k, v) in labels {
        let (prefix, name) = match k.rsplit_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        let prefix_ok = prefix
            .is_none_or(|p| p.len() <= 253 && p.split('.').all(|l| check_dns1123_label(l).is_ok()));
        if !name_ok(name) || !prefix_ok {
            errs.push(
                format!("{path}.{k}"),
                "is not a valid label key: use an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            );
        }
        if !v.is_empty() && !name_ok(v) {
            errs.push(
                format!("{path}.{k}"),
                format!("`{v}` is not a valid label value: up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"),
            );
        }
    }
}

pub(super) fn check_meta(meta: &ObjectMeta, namespaced: bool, errs: &mut ValidationErrors) {
    if meta.generate_name.is_some() {
        errs.push(
            "metadata.generateName",
            "is supported for PipelineRuns only; give metadata.name",
        );
    }
    if meta.name.is_empty() {
        errs.push(
            "metadata.name",
            "is required: a lowercase name such as `mnist-ddp`",
        );
    } else if let Err(e) = check_dns1035_label(&meta.name) {
        errs.push("metadata.name", e);
    }
    if let Some(ns) = &meta.namespace {
        if !namespaced {
            errs.push(
                "metadata.namespace",
                "this kind is cluster-wide and has no namespace; remove the field",
            );
        } else if let Err(e) = check_dns1123_label(ns) {
            errs.push("metadata.namespace", e);
        }
    }
    check_labels("metadata.labels", &meta.labels, errs);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert!(check_dns1035_label("mnist-ddp").is_ok());
        assert!(check_dns1035_label("a").is_ok());
        let e = check_dns1035_label("MNIST_ddp").unwrap_err();
        assert!(e.contains("`mnist-ddp`"), "{e}");
        assert!(check_dns1035_label("1job").is_err());
        assert!(check_dns1035_label("job-").is_err());
        assert!(
            check_dns1035_label(&"a".repeat(64))
                .unwrap_err()
                .contains("64 characters")
        );
        assert!(check_dns1123_label("1team").is_ok());
        assert!(check_dns1123_label("Team").is_err());
    }
}
