//! Docs that can't drift: every YAML snippet in the README, the book (`docs/`) and the Python
//! client's README passes `intentgate config check`, the README's quick start runs as
//! written against a real gateway and the real mock provider, and every relative link in the
//! READMEs and ARCHITECTURE.md names a file that exists. (The book's own links and headings
//! are checked by `mkdocs build --strict` in `.ci/run`.)
//!
//! A YAML snippet is a whole config unless the line before its fence says otherwise:
//!
//! - `<!-- config-check: fragment of examples/quickstart.yaml -->` merges it into that file
//!   at the top level (mappings merged key by key, `tools` by name, a top-level list is
//!   taken as `tools`);
//! - `<!-- config-check: fragment of examples/quickstart.yaml, tool refund_order -->` merges
//!   it into that tool, and `..., tool refund_order, call` into the tool's `call`.
//!
//! Text that is not a config (a side-by-side comparison, a schema excerpt) is fenced as
//! `text`, not `yaml`.

mod support;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use support::{intentgate, success, without_settings_from_the_environment};

/// The repository's folder.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fenced block of a Markdown file: its language, its text, the line its fence opens on,
/// and the line just before the fence.
struct Block {
    language: String,
    text: String,
    line: usize,
    before: String,
}

/// The fenced blocks of `markdown`, in order.
fn blocks(markdown: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    let mut previous = "";
    for (index, line) in markdown.lines().enumerate() {
        match open.take() {
            None => {
                if let Some(language) = line.strip_prefix("```") {
                    open = Some(Block {
                        language: language.trim().to_owned(),
                        text: String::new(),
                        line: index + 1,
                        before: previous.trim().to_owned(),
                    });
                }
            }
            Some(mut block) => {
                if line.trim_start() == "```" {
                    found.push(block);
                } else {
                    block.text.push_str(line);
                    block.text.push('\n');
                    open = Some(block);
                }
            }
        }
        previous = line;
    }
    assert!(open.is_none(), "a fence is never closed");
    found
}

/// The Markdown files whose YAML snippets are checked.
fn documents() -> Vec<PathBuf> {
    let root = repository();
    let mut files = vec![
        root.join("README.md"),
        root.join("clients/python/README.md"),
        root.join("clients/typescript/README.md"),
    ];
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|extension| extension == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Where a fragment goes: the base config and, optionally, a tool and a member of it.
struct Placement {
    base: PathBuf,
    tool: Option<String>,
    member: Option<String>,
}

/// Reads a `<!-- config-check: fragment of FILE[, tool NAME[, MEMBER]] -->` line.
fn placement(line: &str) -> Option<Placement> {
    let directive = line
        .strip_prefix("<!-- config-check: fragment of ")?
        .strip_suffix("-->")?
        .trim();
    let mut parts = directive.split(',').map(str::trim);
    let base = repository().join(parts.next()?);
    let tool = parts.next().map(|part| {
        part.strip_prefix("tool ")
            .unwrap_or_else(|| panic!("`{part}` should be `tool NAME`"))
            .to_owned()
    });
    let member = parts.next().map(str::to_owned);
    Some(Placement { base, tool, member })
}

/// `from` merged into `into`: mappings key by key, anything else replaced.
fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (name, value) in from {
                if name == "tools" {
                    merge_tools(into.entry("tools").or_insert(Value::Array(vec![])), value);
                } else {
                    match into.get_mut(&name) {
                        Some(existing) => merge(existing, value),
                        None => {
                            into.insert(name, value);
                        }
                    }
                }
            }
        }
        (into, from) => *into = from,
    }
}

/// Tools merged by name; a new name is appended.
fn merge_tools(into: &mut Value, from: Value) {
    let Value::Array(from) = from else {
        panic!("`tools` should be a list")
    };
    let into = into.as_array_mut().expect("`tools` is a list");
    for tool in from {
        let name = tool["name"].clone();
        match into.iter_mut().find(|existing| existing["name"] == name) {
            Some(existing) => merge(existing, tool),
            None => into.push(tool),
        }
    }
}

/// The whole config a snippet stands for, as JSON (which YAML reads as it is).
fn whole_config(snippet: &str, placement: Option<Placement>, at: &str) -> String {
    let parse = |text: &str| -> Value {
        serde_saphyr::from_str(text).unwrap_or_else(|error| panic!("{at}: not YAML: {error}"))
    };
    let Some(placement) = placement else {
        return snippet.to_owned();
    };
    let mut config = parse(&std::fs::read_to_string(&placement.base).unwrap());
    let mut fragment = parse(snippet);
    if fragment.is_array() && placement.tool.is_none() {
        fragment = serde_json::json!({ "tools": fragment });
    }
    match placement.tool {
        None => merge(&mut config, fragment),
        Some(name) => {
            let tool = config["tools"]
                .as_array_mut()
                .unwrap()
                .iter_mut()
                .find(|tool| tool["name"] == name.as_str())
                .unwrap_or_else(|| panic!("{at}: the base config has no tool {name}"));
            match placement.member {
                None => merge(tool, fragment),
                Some(member) => merge(&mut tool[member.as_str()], fragment),
            }
        }
    }
    serde_json::to_string_pretty(&config).unwrap()
}

#[test]
fn every_yaml_snippet_in_the_docs_passes_config_check() {
    let folder = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut failures = Vec::new();
    for document in documents() {
        let markdown = std::fs::read_to_string(&document).unwrap();
        let name = document.strip_prefix(repository()).unwrap().display();
        for block in blocks(&markdown) {
            if block.language != "yaml" {
                continue;
            }
            let at = format!("{name}:{}", block.line);
            let config = whole_config(&block.text, placement(&block.before), &at);
            let file = folder.path().join(format!("snippet-{checked}.yaml"));
            std::fs::write(&file, config).unwrap();
            let output = intentgate()
                .args(["config", "check"])
                .arg(&file)
                .output()
                .unwrap();
            if !output.status.success() {
                failures.push(format!(
                    "{at}:\n{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            checked += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} YAML snippets fail `config check`:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
    // A scan that found nothing would pass by finding nothing.
    assert!(checked >= 10, "only {checked} YAML snippets found");
}

/// The section of `markdown` under the heading `heading`, up to the next heading of its level.
fn section<'a>(markdown: &'a str, heading: &str) -> &'a str {
    let start = markdown
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no `{heading}` section"));
    let rest = &markdown[start + heading.len() + 2..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    &rest[..end]
}

/// A process of the quick start, killed when the test ends.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `bash -c SCRIPT` in `folder`, with the built `intentgate` first on the `PATH`.
fn shell(folder: &Path, bin: &Path, script: &str) -> Command {
    let mut command = Command::new("bash");
    without_settings_from_the_environment(&mut command);
    let path = std::env::var("PATH").unwrap_or_default();
    command
        .current_dir(folder)
        .env("PATH", format!("{}:{path}", bin.display()))
        .args(["-euo", "pipefail", "-c", script]);
    command
}

/// Every field the expected answer names (other than those written `"…"` or `{…}`) has that
/// value in the answer.
fn assert_answer_matches(expected: &str, answer: &Value, at: &str) {
    let expected: Value = serde_json::from_str(
        &expected
            .trim()
            .replace("\"…\"", "null")
            .replace("{…}", "null"),
    )
    .unwrap_or_else(|error| panic!("{at}: the expected answer is not JSON: {error}"));
    for (name, value) in expected.as_object().unwrap() {
        let got = answer.get(name);
        if value.is_null() {
            assert!(got.is_some(), "{at}: the answer has no `{name}`: {answer}");
        } else {
            assert_eq!(got, Some(value), "{at}: `{name}` differs in {answer}");
        }
    }
    assert_eq!(
        answer
            .as_object()
            .unwrap()
            .keys()
            .next()
            .map(String::as_str),
        Some("status"),
        "{at}: `status` comes first in {answer}"
    );
}

/// The quick start of the README, run as a reader runs it: the two servers in the
/// background (they use the ports the example config names), then each command, with every
/// answer compared with the one the README shows after it.
#[test]
fn the_quick_start_runs_as_written() {
    for port in [8080, 8090] {
        assert!(
            TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "the quick start serves on 127.0.0.1:{port}, as written, and something listens there \
             already: stop it and run this test again"
        );
    }
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let quick_start = section(&readme, "## Five minutes to your own API");
    let folder = tempfile::tempdir().unwrap();
    std::fs::create_dir(folder.path().join("examples")).unwrap();
    std::fs::copy(
        repository().join("examples/quickstart.yaml"),
        folder.path().join("examples/quickstart.yaml"),
    )
    .unwrap();
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_intentgate"),
        bin.path().join("intentgate"),
    )
    .unwrap();

    let mut servers = Vec::new();
    let mut last_answer: Option<(Value, String)> = None;
    let mut commands = 0;
    for block in blocks(quick_start) {
        let at = format!("README.md, quick start block {}", block.text.trim());
        match block.language.as_str() {
            "sh" if block.text.trim().starts_with("intentgate mock-provider")
                || block.text.trim().starts_with("intentgate serve") =>
            {
                let mut child = shell(folder.path(), bin.path(), &format!("exec {}", block.text))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                let mut line = String::new();
                BufReader::new(child.stdout.take().unwrap())
                    .read_line(&mut line)
                    .unwrap();
                assert!(line.contains("listening on"), "{at}: printed {line:?}");
                servers.push(Background(child));
            }
            "sh" => {
                let output = shell(folder.path(), bin.path(), &block.text)
                    .output()
                    .unwrap();
                let stdout = success(&output);
                // The last JSON value printed is the answer the next block shows.
                last_answer = serde_json::Deserializer::from_str(&stdout)
                    .into_iter::<Value>()
                    .filter_map(Result::ok)
                    .last()
                    .map(|answer| (answer, at));
                commands += 1;
            }
            "text" => {
                let (answer, at) = last_answer
                    .take()
                    .expect("an expected answer follows the command that prints it");
                assert_answer_matches(&block.text, &answer, &at);
            }
            other => panic!("{at}: a `{other}` block in the quick start"),
        }
    }
    assert_eq!(servers.len(), 2, "the mock provider and the gateway");
    assert!(commands >= 5, "only {commands} command blocks found");
    // What the README says the ledger then holds.
    assert!(
        folder
            .path()
            .join("examples/intentgate-quickstart.db")
            .exists()
    );
}

/// Each relative link `[text](target)` of `markdown` whose target is not a file.
fn broken_links(markdown: &str, folder: &Path) -> Vec<String> {
    let mut broken = Vec::new();
    let mut rest = markdown;
    while let Some(start) = rest.find("](") {
        rest = &rest[start + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        let file = target.split('#').next().unwrap_or_default();
        if !file.is_empty() && !target.contains("://") && !folder.join(file).exists() {
            broken.push(target.to_owned());
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_readmes_names_a_file() {
    let root = repository();
    for document in [
        "README.md",
        "ARCHITECTURE.md",
        "clients/python/README.md",
        "clients/typescript/README.md",
    ] {
        let path = root.join(document);
        let markdown = std::fs::read_to_string(&path).unwrap();
        let broken = broken_links(&markdown, path.parent().unwrap());
        assert!(broken.is_empty(), "{document} links to {broken:?}");
    }
}
