//! Blanks the secrets in this process's own environment block.
//!
//! `/proc/<pid>/environ` shows the block the process was started with, whatever it
//! did to its variables since (`remove_var` only drops pointers). Being non-dumpable
//! closes that file to other users and to unprivileged processes of ours, but not to
//! root: a tool process of a control plane run as root could still read it (Landlock
//! does not refuse it). So once the settings have been read, the values of secret
//! variables are overwritten in place, through `/proc/self/mem` (no unsafe code).
//!
//! A variable is secret by its name (`*_KEY`, `*_TOKEN` …, below) or by its value:
//! one that contains any [`KnownSecrets`] value (the API token under a name of the
//! operator's choosing, a URL with the database's password in it) is blanked too.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use crate::secrets::KnownSecrets;

/// Whether a variable holds a secret by its name.
pub fn is_secret_name(name: &[u8]) -> bool {
    // DATABASE_URL holds the database's password; PGPASSWORD is libpq's own.
    if name == b"DATABASE_URL" || name == b"PGPASSWORD" {
        return true;
    }
    // `_HEADERS`: OTEL_EXPORTER_OTLP_HEADERS carries a collector's API key.
    const ENDINGS: &[&[u8]] = &[b"_KEY", b"_TOKEN", b"_SECRET", b"_PASSWORD", b"_HEADERS"];
    ENDINGS.iter().any(|end| name.ends_with(end))
}

/// The byte ranges (within `block`) of the values of secret variables, by name or
/// by value. Pure.
pub fn secret_values(block: &[u8], known: &KnownSecrets) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    for entry in block.split(|b| *b == 0) {
        if let Some(eq) = entry.iter().position(|b| *b == b'=')
            && eq + 1 < entry.len()
            && (is_secret_name(&entry[..eq]) || known.found_in(&entry[eq + 1..]))
        {
            ranges.push(start + eq + 1..start + entry.len());
        }
        start += entry.len() + 1;
    }
    ranges
}

/// `/proc/self/mem`, read-write. A non-dumpable process's `/proc` files belong to
/// root, so a chorus that is not root cannot open its own: it is dumpable for the
/// open only (the checks are made at open; the descriptor keeps working), which at
/// start, before any worker or tool process exists, exposes nothing new.
fn open_own_mem() -> std::io::Result<std::fs::File> {
    use nix::sys::prctl::{get_dumpable, set_dumpable};
    let was_dumpable = get_dumpable().map_err(std::io::Error::from)?;
    if !was_dumpable {
        set_dumpable(true).map_err(std::io::Error::from)?;
    }
    let mem = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem");
    if !was_dumpable {
        set_dumpable(false).map_err(std::io::Error::from)?;
    }
    mem
}

/// Overwrites the values of secret variables in our environment block with `*`;
/// returns how many were blanked.
pub fn blank_own_secrets(known: &KnownSecrets) -> std::io::Result<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name: state is field 3; env_start and env_end are 50, 51.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| -> std::io::Result<u64> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| std::io::Error::other("/proc/self/stat has no environment range"))
    };
    let (start, end) = (field(50)?, field(51)?);
    if end <= start || end - start > 16 << 20 {
        return Ok(0);
    }
    let mem = open_own_mem()?;
    let mut block = vec![0u8; (end - start) as usize];
    mem.read_exact_at(&mut block, start)?;
    let ranges = secret_values(&block, known);
    for range in &ranges {
        let stars = vec![b'*'; range.len()];
        mem.write_all_at(&stars, start + range.start as u64)?;
    }
    Ok(ranges.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_secret_values_are_found() {
        let block =
            b"PATH=/bin\0CHORUS_API_TOKEN=abc\0OPENAI_API_KEY=sk-1\0EMPTY_TOKEN=\0HOME=/h\0";
        let ranges = secret_values(block, &KnownSecrets::default());
        let values: Vec<&[u8]> = ranges.iter().map(|r| &block[r.clone()]).collect();
        assert_eq!(values, [&b"abc"[..], &b"sk-1"[..]]);
        assert!(is_secret_name(b"OTEL_EXPORTER_OTLP_HEADERS"));
        assert!(!is_secret_name(b"OTEL_EXPORTER_OTLP_ENDPOINT"));
        assert!(is_secret_name(b"DATABASE_URL"));
        assert!(is_secret_name(b"PGPASSWORD"));
    }

    #[test]
    fn a_known_secret_is_found_under_any_name_and_inside_a_longer_value() {
        let known = KnownSecrets::new([
            "tok-0123456789abcdef".to_string(),
            "pg-pass-word-42".to_string(),
        ]);
        let block = b"TOKEN=tok-0123456789abcdef\0MY_SECRET_VALUE=tok-0123456789abcdef\0\
                      PATH=/bin\0DSN=postgres://u:pg-pass-word-42@db/x\0SHORT=tok-0123\0\
                      EDITOR=vi\0";
        let values: Vec<String> = secret_values(block, &known)
            .into_iter()
            .map(|r| String::from_utf8_lossy(&block[r]).to_string())
            .collect();
        assert_eq!(
            values,
            [
                "tok-0123456789abcdef",
                "tok-0123456789abcdef",
                "postgres://u:pg-pass-word-42@db/x"
            ]
        );
    }

    #[test]
    fn our_own_environ_loses_its_secrets() {
        // A child of ours, so its block is its own: check through /proc what it shows.
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "environ::tests::child_blanks_itself",
                "--nocapture",
            ])
            .env("CHORUS_TEST_CHILD", "1")
            .env("SOME_API_KEY", "sk-very-secret")
            .env("CHORUS_TEST_KNOWN", "known-by-value-only")
            .env("ANY_NAME", "known-by-value-only")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("blanked="), "{text}");
        assert!(!text.contains("sk-very-secret"), "{text}");
        assert!(text.contains("SOME_API_KEY=**************"), "{text}");
        assert!(!text.contains("known-by-value-only"), "{text}");
        assert!(text.contains("ANY_NAME=*******************"), "{text}");
    }

    #[test]
    fn child_blanks_itself() {
        if std::env::var_os("CHORUS_TEST_CHILD").is_none() {
            return;
        }
        let known = KnownSecrets::new(std::env::var("CHORUS_TEST_KNOWN"));
        let blanked = blank_own_secrets(&known).unwrap();
        let environ = std::fs::read("/proc/self/environ").unwrap();
        let environ = String::from_utf8_lossy(&environ).replace('\0', "\n");
        println!("blanked={blanked}\n{environ}");
    }
}
