//! `${VAR}` interpolation: secrets come from the environment, never from the file.

/// Why a value could not be interpolated: a message and a hint.
pub(super) type Problem = (String, String);

/// Replace every `${NAME}` in `raw` with `env(NAME)`. Returns every problem found (an unset
/// variable, an unterminated `${`, a bad name), not just the first.
pub(super) fn interpolate(
    raw: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Vec<Problem>> {
    let mut out = String::with_capacity(raw.len());
    let mut problems = Vec::new();
    let mut rest = raw;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            problems.push((
                "unterminated `${` in value".to_owned(),
                "write an environment reference as ${NAME}".to_owned(),
            ));
            rest = "";
            break;
        };
        let name = &after[..end];
        rest = &after[end + 1..];
        if !valid_name(name) {
            problems.push((
                format!("invalid environment variable name `{name}`"),
                "names are letters, digits and underscores, not starting with a digit".to_owned(),
            ));
            continue;
        }
        match env(name) {
            Some(value) => out.push_str(&value),
            None => problems.push((
                format!("environment variable {name} is not set"),
                format!("export {name}=... before starting switchyard, or remove the key"),
            )),
        }
    }
    out.push_str(rest);
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "KEY" => Some("sk-123".into()),
            "X" => Some("x".into()),
            _ => None,
        }
    }

    #[test]
    fn replaces_whole_and_embedded_references() {
        assert_eq!(interpolate("${KEY}", &env).unwrap(), "sk-123");
        assert_eq!(interpolate("Bearer-${X}-y", &env).unwrap(), "Bearer-x-y");
        assert_eq!(interpolate("${X}${X}", &env).unwrap(), "xx");
        assert_eq!(interpolate("plain $X {X}", &env).unwrap(), "plain $X {X}");
    }

    #[test]
    fn reports_every_problem() {
        let problems = interpolate("${A}-${KEY}-${B}", &env).unwrap_err();
        let messages: Vec<_> = problems.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(
            messages,
            [
                "environment variable A is not set",
                "environment variable B is not set"
            ]
        );
        assert!(interpolate("${1BAD}", &env).unwrap_err()[0]
            .0
            .contains("invalid"));
        assert!(interpolate("x ${KEY", &env).unwrap_err()[0]
            .0
            .contains("unterminated"));
    }
}
