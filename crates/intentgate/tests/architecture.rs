//! ARCHITECTURE.md is a map, and a map that names files which moved sends a newcomer to the
//! wrong place. Every file or folder it names in backticks must exist: a name under a crate's
//! heading (`### \`crates/<crate>\``) is looked up in that crate's `src/` (or from the
//! repository's root when it is a whole path), and every crate of the workspace has a heading.
//! The code map's numbered list of crates is their dependency order: each crate depends only
//! on crates listed before it.

use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The backticked words of `line` that name a file or folder: a `.rs`, `.md`, `.py` or
/// `.yaml` file, or a word ending in `/` (not a URL path such as `/v1/admin/`).
fn named_paths(line: &str) -> Vec<&str> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| !word.contains(' ') && !word.contains("://") && !word.starts_with('/'))
        .filter(|word| {
            word.ends_with(".rs")
                || word.ends_with(".md")
                || word.ends_with(".py")
                || word.ends_with(".yaml")
                || (word.ends_with('/') && word.len() > 1)
        })
        .collect()
}

/// The crate folders a heading names: `### \`crates/a\`, \`crates/b\``.
fn crates_of_heading(line: &str) -> Vec<String> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| word.starts_with("crates/"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_file_the_architecture_map_names_exists() {
    let root = repository();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut section: Vec<String> = Vec::new();
    let mut missing = Vec::new();
    for line in map.lines() {
        if line.starts_with('#') {
            section = crates_of_heading(line);
            continue;
        }
        for name in named_paths(line) {
            let from_root = root.join(name);
            let in_section = section
                .iter()
                .any(|folder| root.join(folder).join("src").join(name).exists());
            if !from_root.exists() && !in_section {
                missing.push(format!("{name} (under {section:?})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names files that don't exist: {missing:#?}"
    );
}

#[test]
fn every_crate_has_its_place_on_the_architecture_map() {
    let root = repository();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let headed: Vec<String> = map
        .lines()
        .filter(|line| line.starts_with("### "))
        .flat_map(crates_of_heading)
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let folder = format!("crates/{name}");
        if !headed.contains(&folder) {
            missing.push(folder);
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "crates without a heading in ARCHITECTURE.md: {missing:?}"
    );
}

/// The crates of the code map's numbered list, in order: every `` `intentgate...` `` word of
/// the lines from the first `1. ` to the end of that list.
fn crates_in_order(map: &str) -> Vec<String> {
    let code_map = &map[map.find("## Code map").expect("a code map")..];
    let mut order = Vec::new();
    let mut in_list = false;
    for line in code_map.lines() {
        let numbered = line
            .split_once(". ")
            .is_some_and(|(number, _)| number.parse::<u32>().is_ok());
        if numbered {
            in_list = true;
        } else if in_list && !line.starts_with("   ") {
            break;
        }
        if in_list {
            order.extend(
                line.split('`')
                    .skip(1)
                    .step_by(2)
                    .filter(|word| word.starts_with("intentgate"))
                    .map(str::to_owned),
            );
        }
    }
    order
}

/// The workspace crates a crate's `[dependencies]` name (not its dev-dependencies).
fn workspace_dependencies(manifest: &str) -> Vec<String> {
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for line in manifest.lines() {
        if line.starts_with('[') {
            in_dependencies = line.trim() == "[dependencies]";
            continue;
        }
        if in_dependencies && line.starts_with("intentgate") {
            let name = line
                .split(|c: char| c == '.' || c == '=' || c.is_whitespace())
                .next()
                .unwrap();
            found.push(name.to_owned());
        }
    }
    found
}

#[test]
fn each_crate_depends_only_on_crates_the_map_lists_before_it() {
    let root = repository();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let order = crates_in_order(&map);
    assert!(order.len() > 10, "the code map's list of crates: {order:?}");
    let mut wrong = Vec::new();
    for (position, name) in order.iter().enumerate() {
        let manifest = std::fs::read_to_string(root.join("crates").join(name).join("Cargo.toml"))
            .unwrap_or_else(|error| panic!("the map lists {name}, which has no manifest: {error}"));
        for dependency in workspace_dependencies(&manifest) {
            if !order[..position].contains(&dependency) {
                wrong.push(format!("{name} depends on {dependency}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's code map lists crates before what they depend on: {wrong:?}"
    );
}
