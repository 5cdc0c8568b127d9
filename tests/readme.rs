//! The client guide's "Using the library" section (docs/guide/client.md) and examples/ stay in
//! step: every ```rust block of that section opens with `// examples/NAME.rs`, and its lines are
//! in that file verbatim (up to a common indentation; a `// ...` line stands for lines left
//! out). The examples compile with `cargo build --examples` and run against a broker in
//! protocol-tests/examples.rs (the consume-transform-produce example in
//! protocol-tests/pipeline.rs), so every snippet in the guide compiles and runs in CI. The
//! README's quick-start snippet is held to the same rule.

use std::path::Path;

/// Where the snippets live.
const GUIDE: &str = "docs/guide/client.md";

/// The section's text, up to the next `## ` heading.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("{GUIDE} has no '{heading}' section"));
    let rest = &doc[start + 1 + heading.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    &rest[..end]
}

/// The ```rust blocks of a text, as lines.
fn rust_blocks(text: &str) -> Vec<Vec<&str>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```rust") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), l) => block.push(l),
            (None, _) => {}
        }
    }
    blocks
}

/// Where `segment` occurs in `file` from line `from` on, each line with the same extra
/// indentation (blank lines match blank lines): the index after its last line.
fn find_segment(file: &[&str], segment: &[&str], from: usize) -> Option<usize> {
    let first = segment.first()?;
    (from..file.len()).find_map(|i| {
        let indent = file[i].strip_suffix(first)?;
        if !indent.chars().all(|c| c == ' ') || i + segment.len() > file.len() {
            return None;
        }
        let all = segment.iter().zip(&file[i..]).all(|(s, f)| {
            f.trim_end() == format!("{indent}{s}").trim_end()
                || (s.is_empty() && f.trim().is_empty())
        });
        all.then_some(i + segment.len())
    })
}

/// A file of the repository, read.
fn read(p: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("read {p}: {e}"))
}

/// Checks each block against the example its first line names, and that a protocol test runs
/// that example; `doc` names the document in messages.
fn check_blocks(doc: &str, blocks: Vec<Vec<&str>>) {
    let runners = read("protocol-tests/examples.rs") + &read("protocol-tests/pipeline.rs");
    for block in blocks {
        let (head, body) = block.split_first().expect("an empty rust block");
        let path = head
            .strip_prefix("// ")
            .filter(|p| p.starts_with("examples/") && p.ends_with(".rs"))
            .unwrap_or_else(|| panic!("a block opens with '{head}', not '// examples/NAME.rs'"));
        let source = read(path);
        let file: Vec<&str> = source.lines().collect();
        let mut at = 0;
        for segment in body.split(|l| l.trim() == "// ...") {
            let segment: Vec<&str> = segment.to_vec();
            if segment.is_empty() {
                continue;
            }
            at = find_segment(&file, &segment, at).unwrap_or_else(|| {
                panic!(
                    "{doc}'s block for {path} is not in {path} verbatim (in this order); \
                     this part differs:\n{}",
                    segment.join("\n")
                )
            });
        }
        let name = path.trim_start_matches("examples/").trim_end_matches(".rs");
        assert!(
            runners.contains(&format!("\"{name}\""))
                || runners.contains(&format!("examples/{name}\"")),
            "{path} is in {doc} but no protocol test runs it"
        );
    }
}

#[test]
fn every_snippet_of_using_the_library_is_in_its_example_verbatim_and_runs_in_ci() {
    let guide = read(GUIDE);
    let blocks = rust_blocks(section(&guide, "## Using the library"));
    assert!(blocks.len() >= 10, "only {} rust blocks", blocks.len());
    check_blocks(GUIDE, blocks);
}

#[test]
fn the_readme_quick_start_snippets_are_in_their_examples_verbatim_and_run_in_ci() {
    let readme = read("README.md");
    check_blocks("README.md", rust_blocks(&readme));
}

#[test]
fn the_checker_finds_indented_segments_and_refuses_changed_ones() {
    let file = ["fn main() {", "    let a = 1;", "", "    let b = a;", "}"];
    assert_eq!(
        find_segment(&file, &["let a = 1;", "", "let b = a;"], 0),
        Some(4)
    );
    assert_eq!(find_segment(&file, &["let a = 2;"], 0), None);
    assert_eq!(find_segment(&file, &["let b = a;"], 4), None);
}
