//! Prompt lines that tell the model to retry, where a side-effecting tool could be meant.
//!
//! Models follow their prompts: "if the refund fails, call refund_order again" is how one
//! refund becomes two. A line with retry advice (`retry`, `try again`, `keep trying`,
//! `repeat the call`, `call ... again`; case-insensitive, whole words) is an error when it,
//! or failing that a line next to it, names a side-effecting tool of the config, and a
//! warning when no tool is named (generic advice reaches every tool). Advice in a clause that
//! says not to (`do not retry`, `never call it again`) is what a prompt should say, and is
//! left alone.
//!
//! The walk is bounded: regular files only (symlinks are not followed, so nothing outside
//! the folder is read), at most [`PROMPT_FILES_MAX`] files of at most [`PROMPT_BYTES_MAX`]
//! bytes, [`PROMPT_DEPTH_MAX`] folders deep.

use std::path::{Path, PathBuf};

use anyhow::Context;
use intentgate_config::ToolConfig;
use intentgate_core::Effect;

use super::{Finding, Severity, display_path};

/// Larger files are not prompts (a model's context could not hold them); skipped with a note.
const PROMPT_BYTES_MAX: u64 = 1024 * 1024;
/// Most files read; beyond it the folder is probably not a prompts folder.
const PROMPT_FILES_MAX: usize = 10_000;
/// Deepest folder nesting walked.
const PROMPT_DEPTH_MAX: usize = 32;
/// The extensions of prompt files.
const PROMPT_EXTENSIONS: &[&str] = &["txt", "md", "markdown", "yaml", "yml", "json"];
/// Phrases that advise a retry, lowercase, matched as whole words. `call ... again` is
/// matched separately.
const RETRY_PHRASES: &[&str] = &[
    "retry",
    "re-try",
    "keep retrying",
    "try again",
    "try it again",
    "keep trying",
    "repeat the call",
    "repeat the request",
];
/// Words that make the rest of their clause a prohibition.
const NEGATIONS: &[&str] = &[
    "not",
    "don't",
    "dont",
    "never",
    "no",
    "avoid",
    "without",
    "instead",
    "nor",
    "cannot",
    "can't",
    "shouldn't",
    "mustn't",
    "doesn't",
];
/// Most characters between `call` and `again` for one piece of advice.
const CALL_AGAIN_SPAN_MAX: usize = 60;

/// Scans `path` (a folder, or one file) and adds a finding per line of retry advice.
pub fn scan(path: &Path, tools: &[ToolConfig], findings: &mut Vec<Finding>) -> anyhow::Result<()> {
    let metadata =
        std::fs::metadata(path).with_context(|| format!("--prompts {}", path.display()))?;
    let files = if metadata.is_file() {
        vec![path.to_path_buf()]
    } else {
        walk(path, findings).with_context(|| format!("--prompts {}", path.display()))?
    };
    for file in files {
        let shown = display_path(&file);
        let length = std::fs::symlink_metadata(&file)
            .map(|m| m.len())
            .unwrap_or(0);
        if length > PROMPT_BYTES_MAX {
            findings.push(Finding::new(
                Severity::Note,
                "prompt-skipped",
                &shown,
                (0, 0),
                format!("not read: {length} bytes, over the {PROMPT_BYTES_MAX}-byte limit"),
                None,
            ));
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            findings.push(Finding::new(
                Severity::Note,
                "prompt-skipped",
                &shown,
                (0, 0),
                "not read: not UTF-8 text",
                None,
            ));
            continue;
        };
        scan_text(&text, &shown, tools, findings);
    }
    Ok(())
}

/// The prompt files under `folder`, in name order, within the limits.
fn walk(folder: &Path, findings: &mut Vec<Finding>) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![(folder.to_path_buf(), 0)];
    while let Some((current, depth)) = stack.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&current)?
            .map(|entry| entry.map(|entry| entry.path()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        let mut folders = Vec::new();
        for entry in entries {
            let kind = std::fs::symlink_metadata(&entry)?.file_type();
            if kind.is_dir() && depth < PROMPT_DEPTH_MAX {
                folders.push(entry);
            } else if kind.is_file() && is_prompt(&entry) {
                if files.len() == PROMPT_FILES_MAX {
                    findings.push(Finding::new(
                        Severity::Note,
                        "prompt-skipped",
                        &display_path(folder),
                        (0, 0),
                        format!("only the first {PROMPT_FILES_MAX} prompt files were read"),
                        None,
                    ));
                    return Ok(files);
                }
                files.push(entry);
            }
        }
        // Reversed, so that the stack pops folders in name order.
        stack.extend(folders.into_iter().rev().map(|folder| (folder, depth + 1)));
    }
    Ok(files)
}

fn is_prompt(path: &Path) -> bool {
    path.extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| {
            PROMPT_EXTENSIONS.contains(&extension.to_ascii_lowercase().as_str())
        })
}

/// Adds a finding per line of `text` with retry advice a side-effecting tool could follow.
pub fn scan_text(text: &str, file: &str, tools: &[ToolConfig], findings: &mut Vec<Finding>) {
    let lines: Vec<String> = text.lines().map(normalise).collect();
    for (index, line) in lines.iter().enumerate() {
        let Some(offset) = retry_advice(line) else {
            continue;
        };
        // The line's own tools decide; failing that, a side-effecting tool named on a line
        // next to it ("If the refund fails, try again." under "Use refund_order to ...").
        let mut named = named_tools(line, tools);
        if named.is_empty() {
            let before = index.checked_sub(1).map(|i| lines[i].as_str());
            let after = lines.get(index + 1).map(String::as_str);
            for neighbour in [before, after].into_iter().flatten() {
                for tool in named_tools(neighbour, tools) {
                    let new = !named.iter().any(|known| known.name == tool.name);
                    if new && tool.effect == Effect::SideEffect {
                        named.push(tool);
                    }
                }
            }
        }
        let column = line[..offset].chars().count() as u64 + 1;
        let at = (index as u64 + 1, column);
        let status_tool = tools
            .iter()
            .find(|tool| tool.effect == Effect::Read && tool.name.contains("status"))
            .map(|tool| format!("`{}`", tool.name))
            .unwrap_or_else(|| "a read tool that shows the status".to_owned());
        let side_effects: Vec<&str> = named
            .iter()
            .filter(|tool| tool.effect == Effect::SideEffect)
            .map(|tool| tool.name.as_str())
            .collect();
        let quoted = excerpt(text.lines().nth(index).unwrap_or_default());
        if let Some(first) = side_effects.first() {
            let names = side_effects
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", ");
            findings.push(
                Finding::new(
                    Severity::Error,
                    "prompt-retry-side-effect",
                    file,
                    at,
                    format!(
                        "the prompt tells the model to retry, and names side-effecting {names}: \
                         \"{quoted}\""
                    ),
                    Some(format!(
                        "tell the model not to call {names} again after an error or an unclear \
                         answer, and to check the status with {status_tool} instead; the \
                         gateway returns the original result to a repeat, and \
                         `pending_unknown` means it is being confirmed"
                    )),
                )
                .tool(first),
            );
        } else if named.is_empty() {
            findings.push(Finding::new(
                Severity::Warning,
                "prompt-retry-generic",
                file,
                at,
                format!(
                    "the prompt tells the model to retry without naming a tool, so the advice \
                     reaches side-effecting tools too: \"{quoted}\""
                ),
                Some(format!(
                    "limit the advice to read tools by name, and tell the model never to call a \
                     side-effecting tool again after an error but to check the status with \
                     {status_tool}; the gateway returns the original result to a repeat"
                )),
            ));
        }
    }
}

/// Lowercase, with typographic apostrophes made plain, so that byte offsets still match
/// the original line for ASCII text.
fn normalise(line: &str) -> String {
    line.replace('\u{2019}', "'").to_lowercase()
}

/// The byte offset of the first piece of retry advice in a normalised line that no
/// negation in its clause turns into a prohibition.
fn retry_advice(line: &str) -> Option<usize> {
    let mut candidates: Vec<usize> = RETRY_PHRASES
        .iter()
        .flat_map(|phrase| word_matches(line, phrase))
        .collect();
    for call in word_matches(line, "call") {
        let rest = &line[call..];
        let clause_end = rest
            .find(['.', ';', ',', '!', '?', ':'])
            .unwrap_or(rest.len());
        let span = &rest[..clause_end.min(CALL_AGAIN_SPAN_MAX)];
        if !word_matches(span, "again").is_empty() {
            candidates.push(call);
        }
    }
    candidates.sort_unstable();
    candidates
        .into_iter()
        .find(|&offset| !negated(line, offset))
}

/// True when the clause that holds `offset` says not to, before it.
fn negated(line: &str, offset: usize) -> bool {
    let before = &line[..offset];
    let clause_start = before
        .rfind(['.', ';', ',', '!', '?', ':', '(', '"'])
        .map(|at| at + 1)
        .unwrap_or(0);
    before[clause_start..]
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .any(|word| NEGATIONS.contains(&word))
}

/// Byte offsets where `phrase` occurs in `text` as whole words.
fn word_matches(text: &str, phrase: &str) -> Vec<usize> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(phrase)
        .filter(|(at, _)| {
            let before = text[..*at].chars().next_back();
            let after = text[at + phrase.len()..].chars().next();
            !before.is_some_and(is_word) && !after.is_some_and(|c| is_word(c) || c == '-')
        })
        .map(|(at, _)| at)
        .collect()
}

/// The config's tools a normalised line names, as whole words.
fn named_tools<'t>(line: &str, tools: &'t [ToolConfig]) -> Vec<&'t ToolConfig> {
    tools
        .iter()
        .filter(|tool| !word_matches(line, &tool.name.to_lowercase()).is_empty())
        .collect()
}

/// The line, trimmed and cut to a readable length.
fn excerpt(line: &str) -> String {
    const EXCERPT_CHARS_MAX: usize = 120;
    let line = line.trim();
    if line.chars().count() <= EXCERPT_CHARS_MAX {
        line.to_owned()
    } else {
        let cut: String = line.chars().take(EXCERPT_CHARS_MAX).collect();
        format!("{cut}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advice(line: &str) -> Option<usize> {
        retry_advice(&normalise(line))
    }

    #[test]
    fn retry_advice_is_found_and_prohibitions_are_not() {
        assert_eq!(advice("If it fails, call refund_order again."), Some(13));
        assert_eq!(advice("Retry on errors."), Some(0));
        assert_eq!(advice("Please try again later"), Some(7));
        assert_eq!(advice("Keep trying until it works"), Some(0));
        assert_eq!(advice("If the order is not found, retry."), Some(27));
        assert_eq!(advice("Do not retry refund_order."), None);
        assert_eq!(advice("Don’t call refund_order again."), None);
        assert_eq!(
            advice("Never retry a refund; check its status instead."),
            None
        );
        assert_eq!(advice("retry_budget: 3"), None);
        assert_eq!(advice("Call get_order first. Then it works again."), None);
    }
}
