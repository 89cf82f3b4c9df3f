//! The audit's findings as text (for a person), JSON (for a program) or SARIF 2.1.0 (for
//! code-scanning tools: GitHub, GitLab, Azure DevOps annotate the lines it points at).

use std::fmt::Write as _;

use intentgate_core::text::printable;

use serde_json::{Value, json};

use super::{Finding, RULES, Severity};

/// The counts of each severity.
fn counts(findings: &[Finding]) -> (usize, usize, usize) {
    let count = |severity| {
        findings
            .iter()
            .filter(|finding| finding.severity == severity)
            .count()
    };
    (
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Note),
    )
}

/// `path:line:col: severity[rule] message`, an indented `fix:` line, a blank line between
/// files, then the counts.
pub fn text(findings: &[Finding]) -> String {
    let mut out = String::new();
    let mut file: Option<&str> = None;
    for finding in findings {
        if file.is_some_and(|previous| previous != finding.file) {
            out.push('\n');
        }
        file = Some(&finding.file);
        let at = match (finding.line, finding.column) {
            (0, _) => finding.file.clone(),
            (line, 0) => format!("{}:{line}", finding.file),
            (line, column) => format!("{}:{line}:{column}", finding.file),
        };
        let _ = writeln!(
            out,
            "{at}: {}[{}] {}",
            finding.severity.as_str(),
            finding.rule,
            printable(&finding.message)
        );
        if let Some(fix) = &finding.fix {
            let _ = writeln!(out, "  fix: {}", printable(fix));
        }
    }
    let (errors, warnings, notes) = counts(findings);
    if !findings.is_empty() {
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "audit: {errors} error(s), {warnings} warning(s), {notes} note(s)"
    );
    out
}

/// One JSON object: `{"findings": [...], "summary": {"errors", "warnings", "notes"}}`.
pub fn json(findings: &[Finding]) -> String {
    let (errors, warnings, notes) = counts(findings);
    let report = json!({
        "findings": findings,
        "summary": {"errors": errors, "warnings": warnings, "notes": notes},
    });
    format!(
        "{}\n",
        serde_json::to_string_pretty(&report).expect("findings serialise")
    )
}

/// SARIF 2.1.0, one run: every rule in `tool.driver.rules`, one result per finding.
pub fn sarif(findings: &[Finding]) -> String {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|rule| {
            json!({
                "id": rule.id,
                "shortDescription": {"text": rule.short},
                "help": {"text": rule.help},
                "defaultConfiguration": {"level": rule.severity.as_str()},
            })
        })
        .collect();
    let results: Vec<Value> = findings
        .iter()
        .map(|finding| {
            let mut text = finding.message.clone();
            if let Some(fix) = &finding.fix {
                text.push_str("\nFix: ");
                text.push_str(fix);
            }
            let mut result = json!({
                "ruleId": finding.rule,
                "ruleIndex": RULES.iter().position(|rule| rule.id == finding.rule),
                "level": finding.severity.as_str(),
                "message": {"text": text},
            });
            let mut physical = json!({"artifactLocation": {"uri": uri(&finding.file)}});
            if finding.line > 0 {
                let mut region = json!({"startLine": finding.line});
                if finding.column > 0 {
                    region["startColumn"] = json!(finding.column);
                }
                physical["region"] = region;
            }
            result["locations"] = json!([{"physicalLocation": physical}]);
            if let Some(tool) = &finding.tool {
                result["properties"] = json!({"tool": tool});
            }
            result
        })
        .collect();
    let report = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "intentgate",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    });
    format!(
        "{}\n",
        serde_json::to_string_pretty(&report).expect("SARIF serialises")
    )
}

/// A relative path with `/` separators and spaces escaped, as SARIF's `uri` wants; a URL as
/// it is.
fn uri(file: &str) -> String {
    if file.contains("://") {
        return file.to_owned();
    }
    let path = file.replace('\\', "/").replace(' ', "%20");
    if path.starts_with('/') {
        format!("file://{path}")
    } else {
        path
    }
}
