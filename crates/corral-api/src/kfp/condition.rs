//! A KFP condition (`triggerPolicy.condition`, the CEL text the compiler writes for `dsl.If`,
//! `dsl.Elif` and `dsl.Else`) as Corral's `when` conditions, all of which must hold.
//!
//! The compiler writes comparisons of one input with a literal, `&&` between them, and `!()`
//! around the earlier branches' for `Elif` and `Else`:
//! `!(inputs.parameter_values['x'] > 0.5) && int(inputs.parameter_values['n']) >= 2`. A
//! negated comparison is its opposite (`!(a > b)` is `a <= b`), so the whole is a list of
//! comparisons. Anything else (`||`, two inputs compared, a method call) is refused.

use crate::pipeline::WhenCondition;

/// One comparison: the task's input it reads, and the condition without its `value` (the
/// input's reference, filled in by the caller).
pub(super) struct Clause {
    pub input: String,
    pub when: WhenCondition,
}

/// The clauses of `text`, or why it is not a condition Corral runs.
pub(super) fn parse(text: &str) -> Result<Vec<Clause>, String> {
    split_top_level(text, "&&")
        .into_iter()
        .map(|term| {
            let term = term.trim();
            match term.strip_prefix("!(").and_then(|t| t.strip_suffix(')')) {
                Some(inner) if balanced(inner) => comparison(inner, true),
                _ => comparison(term, false),
            }
        })
        .collect()
}

const OPERATORS: [&str; 6] = ["==", "!=", ">=", "<=", ">", "<"];

fn comparison(text: &str, negated: bool) -> Result<Clause, String> {
    let (at, op) = find_operator(text).ok_or_else(|| {
        format!(
            "`{}` compares nothing (==, !=, <, <=, > or >=)",
            text.trim()
        )
    })?;
    let (left, right) = (&text[..at], &text[at + op.len()..]);
    let input = operand(left.trim()).ok_or_else(|| {
        format!(
            "`{}` is not an input (`inputs.parameter_values['<input>']`, or it in int(), \
             float() or double())",
            left.trim()
        )
    })?;
    let right = right.trim();
    let quoted = right
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| right.strip_prefix('"').and_then(|r| r.strip_suffix('"')));
    let literal = quoted.unwrap_or(right).to_string();
    if quoted.is_none() && literal.contains(['(', ')', '\'', '"', ' ', '[']) {
        return Err(format!(
            "`{right}` is not a literal (a string, a number or true/false)"
        ));
    }
    let op = if negated { opposite(op) } else { op };
    let number = || {
        literal
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && quoted.is_none())
            .ok_or_else(|| format!("`{op}` compares numbers; `{right}` is not one"))
    };
    let mut when = WhenCondition::default();
    match op {
        "==" => when.equals = Some(literal),
        "!=" => when.not_equals = Some(literal),
        ">" => when.greater_than = Some(number()?),
        ">=" => when.greater_than_or_equal = Some(number()?),
        "<" => when.less_than = Some(number()?),
        _ => when.less_than_or_equal = Some(number()?),
    }
    Ok(Clause { input, when })
}

/// `!(a op b)` is `a opposite(op) b`.
fn opposite(op: &str) -> &'static str {
    match op {
        "==" => "!=",
        "!=" => "==",
        ">" => "<=",
        ">=" => "<",
        "<" => ">=",
        _ => ">",
    }
}

/// `inputs.parameter_values['x']`, bare or in a cast: `x`.
fn operand(text: &str) -> Option<String> {
    let bare = ["int(", "float(", "double("]
        .iter()
        .find_map(|cast| text.strip_prefix(cast).and_then(|t| t.strip_suffix(')')))
        .unwrap_or(text)
        .trim();
    let name = bare
        .strip_prefix("inputs.parameter_values['")?
        .strip_suffix("']")?;
    (!name.is_empty() && !name.contains(['\'', ']'])).then(|| name.to_string())
}

/// The first operator outside quotes: its byte offset and itself.
fn find_operator(text: &str) -> Option<(usize, &'static str)> {
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, _) => {
                if let Some(op) = OPERATORS.iter().find(|op| text[i..].starts_with(*op)) {
                    return Some((i, op));
                }
            }
        }
    }
    None
}

/// Whether the parentheses outside quotes of `text` balance (so that `!(a) && !(b)` is not
/// read as one negated term).
fn balanced(text: &str) -> bool {
    let mut depth = 0i32;
    let mut quote = None;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => {}
        }
    }
    depth == 0
}

/// `text` split at `sep` outside quotes and parentheses.
fn split_top_level<'t>(text: &'t str, sep: &str) -> Vec<&'t str> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None, 0);
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth -= 1,
            (None, _) if depth == 0 && text[i..].starts_with(sep) => {
                parts.push(&text[start..i]);
                start = i + sep.len();
                for _ in 1..sep.len() {
                    chars.next();
                }
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> WhenCondition {
        let mut c = parse(text).expect("parses");
        assert_eq!(c.len(), 1, "{text}");
        let c = c.remove(0);
        assert_eq!(c.input, "x");
        c.when
    }

    #[test]
    fn comparisons_and_their_negations() {
        let w = one("inputs.parameter_values['x'] == 'heads'");
        assert_eq!(w.equals.as_deref(), Some("heads"));
        let w = one("!(inputs.parameter_values['x'] == 'a && b')");
        assert_eq!(w.not_equals.as_deref(), Some("a && b"));
        let w = one("int(inputs.parameter_values['x']) >= 2");
        assert_eq!(w.greater_than_or_equal, Some(2.0));
        let w = one("!(inputs.parameter_values['x'] > 0.5)");
        assert_eq!(w.less_than_or_equal, Some(0.5));
        let w = one("float(inputs.parameter_values['x']) < -1e3");
        assert_eq!(w.less_than, Some(-1000.0));
        let w = one("inputs.parameter_values['x'] == true");
        assert_eq!(w.equals.as_deref(), Some("true"));
    }

    #[test]
    fn an_elif_is_the_earlier_branches_negated_and_its_own() {
        let c =
            parse("!(inputs.parameter_values['s'] > 0.5) && inputs.parameter_values['s'] > 0.2")
                .expect("parses");
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].when.less_than_or_equal, Some(0.5));
        assert_eq!(c[1].when.greater_than, Some(0.2));
        assert!(c.iter().all(|c| c.input == "s"));
    }

    #[test]
    fn what_is_not_a_comparison_of_an_input_is_refused() {
        for (text, why) in [
            ("inputs.parameter_values['x'] > 'a'", "compares numbers"),
            ("inputs.parameter_values['x'] || true", "compares nothing"),
            ("size(inputs.parameter_values['x']) > 2", "is not an input"),
            (
                "inputs.parameter_values['x'] == inputs.parameter_values['y']",
                "is not a literal",
            ),
        ] {
            let err = parse(text).err().unwrap_or_default();
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
