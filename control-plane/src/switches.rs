//! An agent's closed settings: what an ASK does when nobody is asked (`on_ask`) and
//! whether its tool processes may use the network (`network`). Each is an enum with
//! its one text form, used by the store's column, the API and the settings files;
//! a value outside the set is refused where it enters (a request, a stored row) with
//! the allowed values named.

use serde::Serialize;

/// What a tool call its profile says to ASK about does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnAsk {
    /// A person is asked (an approval).
    #[default]
    Prompt,
    /// Allowed without a person: amounts to granting the `open` preset.
    Allow,
    /// Denied without a person.
    Deny,
}

impl OnAsk {
    pub const ALL: [OnAsk; 3] = [OnAsk::Prompt, OnAsk::Allow, OnAsk::Deny];

    pub fn as_str(self) -> &'static str {
        match self {
            OnAsk::Prompt => "prompt",
            OnAsk::Allow => "allow",
            OnAsk::Deny => "deny",
        }
    }

    /// Reads the text form; the error names the allowed values.
    pub fn parse(text: &str) -> Result<OnAsk, String> {
        OnAsk::ALL
            .into_iter()
            .find(|v| v.as_str() == text)
            .ok_or_else(|| {
                format!(
                    "on_ask must be one of {}, not '{text}'",
                    OnAsk::ALL.map(OnAsk::as_str).join(", ")
                )
            })
    }
}

/// May an agent's tool processes connect and bind TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    #[default]
    On,
    Off,
}

impl Network {
    pub fn as_str(self) -> &'static str {
        match self {
            Network::On => "on",
            Network::Off => "off",
        }
    }

    pub fn allowed(self) -> bool {
        self == Network::On
    }

    /// Reads the text form; the error names the allowed values.
    pub fn parse(text: &str) -> Result<Network, String> {
        match text {
            "on" => Ok(Network::On),
            "off" => Ok(Network::Off),
            other => Err(format!("network must be \"on\" or \"off\", not '{other}'")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_reads_back_from_its_text_and_others_are_refused_by_name() {
        for v in OnAsk::ALL {
            assert_eq!(OnAsk::parse(v.as_str()), Ok(v));
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
        assert_eq!(
            OnAsk::parse("ALLOW").unwrap_err(),
            "on_ask must be one of prompt, allow, deny, not 'ALLOW'"
        );
        for v in [Network::On, Network::Off] {
            assert_eq!(Network::parse(v.as_str()), Ok(v));
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
        assert_eq!(
            Network::parse("yes").unwrap_err(),
            "network must be \"on\" or \"off\", not 'yes'"
        );
    }
}
