//! Agent names: one name is a directory, a Discord channel and a URL segment at once.

/// Longest name Discord accepts for a channel.
pub const MAX_NAME_LEN: usize = 100;

/// Why a name was refused, phrased for the person who chose it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("agent name is empty")]
    Empty,
    #[error("agent name is {0} characters long; the limit is {MAX_NAME_LEN}")]
    TooLong(usize),
    #[error("agent name '{name}' contains {found:?}; use only letters, digits, '-' and '_'")]
    BadCharacter { name: String, found: char },
    #[error("agent name '{0}' must start with a letter or digit")]
    BadStart(String),
}

/// Checks a proposed agent name: `[A-Za-z0-9_-]`, starting with a letter or digit
/// (so it never reads as a command-line flag), at most [`MAX_NAME_LEN`] characters.
pub fn validate(name: &str) -> Result<(), NameError> {
    let Some(first) = name.chars().next() else {
        return Err(NameError::Empty);
    };
    let len = name.chars().count();
    if len > MAX_NAME_LEN {
        return Err(NameError::TooLong(len));
    }
    if let Some(found) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(NameError::BadCharacter {
            name: name.to_string(),
            found,
        });
    }
    if !first.is_ascii_alphanumeric() {
        return Err(NameError::BadStart(name.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_channel_friendly_names() {
        for name in ["a", "frontend-agent", "agent_2", "A1", &"x".repeat(100)] {
            assert_eq!(validate(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn refuses_everything_else() {
        type Expectation = fn(&NameError) -> bool;
        let cases: &[(&str, Expectation)] = &[
            ("", |e| matches!(e, NameError::Empty)),
            ("has space", |e| {
                matches!(e, NameError::BadCharacter { found: ' ', .. })
            }),
            ("../etc", |e| {
                matches!(e, NameError::BadCharacter { found: '.', .. })
            }),
            ("a/b", |e| {
                matches!(e, NameError::BadCharacter { found: '/', .. })
            }),
            ("ünïcode", |e| matches!(e, NameError::BadCharacter { .. })),
            ("nul\0byte", |e| matches!(e, NameError::BadCharacter { .. })),
            ("-rf", |e| matches!(e, NameError::BadStart(_))),
            ("_hidden", |e| matches!(e, NameError::BadStart(_))),
        ];
        for (name, expected) in cases {
            let err = validate(name).unwrap_err();
            assert!(expected(&err), "{name:?} gave {err:?}");
        }
        assert_eq!(validate(&"x".repeat(101)), Err(NameError::TooLong(101)));
    }
}
