//! The identity and memory sections of a run's prompt, from the files now: what a
//! run's assignment carries (`runs::assignment`) and what [`super::Memory::push`]
//! sends live runs. Depends on nothing of the runs, so both may use it.

use std::path::PathBuf;

use chorus_proto::tools::IdentityFile;

use super::files::{self, MemoryDir};
use super::prompt;

/// `[memory] limit_bytes`' default: how large MEMORY.md should stay.
pub const DEFAULT_LIMIT_BYTES: usize = 16 * 1024;

/// Where the files are and how large long-term memory should stay.
#[derive(Debug, Clone)]
pub struct MemorySettings {
    /// `<data_dir>/agents`.
    pub agents_root: PathBuf,
    pub limit_bytes: usize,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            agents_root: PathBuf::new(),
            limit_bytes: DEFAULT_LIMIT_BYTES,
        }
    }
}

/// The identity and memory sections of the agent's prompt, from the files now.
pub async fn render_sections(settings: &MemorySettings, agent: &str) -> (String, String) {
    let dir = MemoryDir::new(&settings.agents_root, agent);
    if settings.agents_root.as_os_str().is_empty() || !dir.exists() {
        return (String::new(), String::new());
    }
    let read = |path: PathBuf| async move { files::read(&path).await.unwrap_or_default() };
    let soul = read(dir.identity(IdentityFile::Soul)).await;
    let user = read(dir.identity(IdentityFile::User)).await;
    let long_term = read(dir.long_term()).await;
    let today = chrono::Utc::now().date_naive();
    let yesterday = today.pred_opt().unwrap_or(today);
    let (today_name, yesterday_name) = (files::daily_name(today), files::daily_name(yesterday));
    let today_text = read(dir.daily(today)).await;
    let yesterday_text = read(dir.daily(yesterday)).await;
    let days = [
        prompt::Day {
            label: "Today's",
            file: &today_name,
            text: &today_text,
        },
        prompt::Day {
            label: "Yesterday's",
            file: &yesterday_name,
            text: &yesterday_text,
        },
    ];
    (
        prompt::identity_section(&soul, &user),
        prompt::memory_section(&long_term, settings.limit_bytes, &days),
    )
}
