//! The part of a tool process's environment that keeps git from running a program the
//! agent wrote.
//!
//! The `standard` preset lets `git status|diff|log|show|branch` run without asking, and
//! git runs programs named in its configuration (`core.fsmonitor` even for `git
//! status`). So for every git a tool process starts:
//!
//! - system and global configuration are ignored (`GIT_CONFIG_NOSYSTEM`,
//!   `GIT_CONFIG_GLOBAL=/dev/null`): a `.gitconfig` or `.config/git/config` written into
//!   `HOME` counts for nothing;
//! - every key that names a program and can be overridden is pinned at command-line
//!   scope (`GIT_CONFIG_COUNT`/`_KEY_n`/`_VALUE_n`), which git reads after the
//!   repository's own `.git/config`, so the pin wins there too ([`PINNED`]);
//! - the pager is `cat` through `GIT_PAGER`, which beats `pager.<command>` (no config
//!   key can); the `git://` proxy command is empty, which makes git skip `core.gitProxy`;
//! - git never walks up out of the workspace to find a repository
//!   (`GIT_CEILING_DIRECTORIES`), and never treats a directory of plain files as a bare
//!   repository (`safe.bareRepository=explicit`), so its configuration comes from the
//!   workspace's `.git/` or from nowhere.
//!
//! What cannot be pinned (`diff.external`: an empty value makes `git diff` fail;
//! `diff.<driver>.command|textconv`, `filter.<driver>.*`, `merge.<driver>.driver`:
//! their names are free; remote and submodule commands; aliases, which never shadow the
//! built-in commands the preset allows) is defined only in `.git/config` or a file it
//! includes, which the `standard` preset does not let an agent write without asking
//! (`control-plane/src/permissions/presets.rs`). The rest of that list:
//! `interactive.diffFilter`, `core.alternateRefsCommand`, `gpg.ssh.defaultKeyCommand`,
//! `remote.<r>.uploadpack|receivepack|vcs`, `submodule.<s>.update`. So once a person
//! approves a write to `.git/config`, `git diff` may run the external diff or textconv
//! it names: the approval is the boundary. Hooks stay off for every git, approved or
//! not (a `git commit` runs no `pre-commit`); `git config --global` fails; a bare
//! repository is used with `--git-dir`. `uploadpack.packObjectsHook` and `trace2.*` are
//! read only from system, global or command-line config, all out of an agent's reach.

use std::ffi::OsString;
use std::path::Path;

/// Configuration pinned for every git a tool starts: `(key, value)`, each the harmless
/// value (or git's own default) of a key that would otherwise run a program.
pub const PINNED: &[(&str, &str)] = &[
    // The fsmonitor hook runs on `git status`, `diff`, `add`…
    ("core.fsmonitor", "false"),
    // Every hook, including `post-index-change`, which `git status` runs when it
    // refreshes the index. No hook file exists under /dev/null.
    ("core.hooksPath", "/dev/null"),
    // The pager runs only on a terminal; `GIT_PAGER` below covers `pager.<command>`.
    ("core.pager", "cat"),
    // `:` is git's "leave the text as it is": no editor runs (a merge keeps its message).
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    // Empty: no askpass program, and no fallback to `SSH_ASKPASS` either.
    ("core.askPass", ""),
    // An empty helper empties the list, including `credential.<url>.helper` entries
    // read before it.
    ("credential.helper", ""),
    // git's defaults, so a repository cannot name its own programs.
    ("core.sshCommand", "ssh"),
    ("gpg.program", "gpg"),
    ("gpg.openpgp.program", "gpg"),
    ("gpg.x509.program", "gpgsm"),
    ("gpg.ssh.program", "ssh-keygen"),
    // `ext::<command>` remote URLs run the command.
    ("protocol.ext.allow", "never"),
    // A directory holding `HEAD`, `objects/`, `refs/` and `config` (plain files any
    // file tool can write) would otherwise be a repository with its own config.
    ("safe.bareRepository", "explicit"),
    // Global attributes (`~/.config/git/attributes`) are ignored like global config.
    ("core.attributesFile", "/dev/null"),
];

/// The variable names for [`PINNED`], spelt out because environment names here are
/// `&'static str`.
const KEY_VARS: &[&str] = &[
    "GIT_CONFIG_KEY_0",
    "GIT_CONFIG_KEY_1",
    "GIT_CONFIG_KEY_2",
    "GIT_CONFIG_KEY_3",
    "GIT_CONFIG_KEY_4",
    "GIT_CONFIG_KEY_5",
    "GIT_CONFIG_KEY_6",
    "GIT_CONFIG_KEY_7",
    "GIT_CONFIG_KEY_8",
    "GIT_CONFIG_KEY_9",
    "GIT_CONFIG_KEY_10",
    "GIT_CONFIG_KEY_11",
    "GIT_CONFIG_KEY_12",
    "GIT_CONFIG_KEY_13",
    "GIT_CONFIG_KEY_14",
    "GIT_CONFIG_KEY_15",
];
const VALUE_VARS: &[&str] = &[
    "GIT_CONFIG_VALUE_0",
    "GIT_CONFIG_VALUE_1",
    "GIT_CONFIG_VALUE_2",
    "GIT_CONFIG_VALUE_3",
    "GIT_CONFIG_VALUE_4",
    "GIT_CONFIG_VALUE_5",
    "GIT_CONFIG_VALUE_6",
    "GIT_CONFIG_VALUE_7",
    "GIT_CONFIG_VALUE_8",
    "GIT_CONFIG_VALUE_9",
    "GIT_CONFIG_VALUE_10",
    "GIT_CONFIG_VALUE_11",
    "GIT_CONFIG_VALUE_12",
    "GIT_CONFIG_VALUE_13",
    "GIT_CONFIG_VALUE_14",
    "GIT_CONFIG_VALUE_15",
];
const _: () = assert!(PINNED.len() <= KEY_VARS.len() && KEY_VARS.len() == VALUE_VARS.len());

/// The variables [`git_safety_env`] sets besides the numbered `GIT_CONFIG_*` pairs.
pub const FIXED_VARS: &[&str] = &[
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_COUNT",
    "GIT_PAGER",
    "GIT_PROXY_COMMAND",
    "GIT_CEILING_DIRECTORIES",
];

/// The git part of a tool process's environment in the workspace `root`.
pub fn git_safety_env(root: &Path) -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> = vec![
        ("GIT_CONFIG_NOSYSTEM", "1".into()),
        ("GIT_CONFIG_GLOBAL", "/dev/null".into()),
        ("GIT_CONFIG_COUNT", PINNED.len().to_string().into()),
        ("GIT_PAGER", "cat".into()),
        // Set but empty: git then reads no `core.gitProxy` and uses no proxy.
        ("GIT_PROXY_COMMAND", "".into()),
    ];
    // The workspace's parent: git may look in the workspace (and below), never above.
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
        env.push(("GIT_CEILING_DIRECTORIES", parent.as_os_str().to_owned()));
    }
    for (i, (key, value)) in PINNED.iter().enumerate() {
        env.push((KEY_VARS[i], (*key).into()));
        env.push((VALUE_VARS[i], (*value).into()));
    }
    env
}

/// Whether `name` is a variable [`git_safety_env`] may set.
pub fn is_git_safety_var(name: &str) -> bool {
    FIXED_VARS.contains(&name) || KEY_VARS.contains(&name) || VALUE_VARS.contains(&name)
}

#[cfg(test)]
#[path = "safe_env_tests.rs"]
mod tests;
