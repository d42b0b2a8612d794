//! Size limits on the workspace's source: no function over 120 lines and no file over 900 lines
//! of code that is compiled outside tests, under src/, benches/ and crates/*/src.
//!
//! Test code does not count: items under `#[cfg(test)]` (the `mod tests { ... }` blocks), the
//! files of out-of-line `#[cfg(test)] mod name;` declarations, and files under a `tests/`
//! directory. A function's length runs from its `fn` line to the line of its closing brace.
//!
//! The source is read by a small lexer that knows comments (nested block comments included),
//! string, raw string, byte and char literals and lifetimes, so a brace inside any of them does
//! not count; braces are then matched to find each body.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FN_LINES: usize = 120;
const MAX_FILE_LINES: usize = 900;

/// Offenders allowed for a while, as (file, item, its size when listed), the item being `file`
/// for the whole file or `fn NAME`. An entry may not grow, and an entry that is no longer over
/// its limit fails the test until it is deleted, so this list only shrinks. It is empty: keep
/// it so.
const ALLOWED: &[(&str, &str, usize)] = &[];

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
    /// A string, char or number literal; its contents never matter here.
    Lit,
    Lifetime,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

/// Splits Rust source into tokens, dropping comments and whitespace. Lines are 1-based.
fn lex(src: &str) -> Result<Vec<Token>, String> {
    let s: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| s.get(i).copied().unwrap_or('\0');
    while i < s.len() {
        let c = s[i];
        let start_line = line;
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            i = skip_block_comment(&s, i, &mut line)?;
        } else if c.is_alphabetic() || c == '_' {
            i = lex_word(&s, i, &mut line, &mut toks)?;
        } else if c.is_ascii_digit() {
            // Digits, suffixes, hex and exponents; a `.` is left as punctuation, which is
            // harmless for `1.5` and right for `0..n` and `t.0`.
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            toks.push(Token {
                tok: Tok::Lit,
                line,
            });
        } else if c == '"' {
            i = skip_quoted(&s, i, '"', &mut line)?;
            toks.push(Token {
                tok: Tok::Lit,
                line: start_line,
            });
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{7f}', '{') or a lifetime or label ('a, 'static).
            if at(i + 1) == '\\' || at(i + 2) == '\'' {
                i = skip_quoted(&s, i, '\'', &mut line)?;
                toks.push(Token {
                    tok: Tok::Lit,
                    line,
                });
            } else {
                i += 1;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
                toks.push(Token {
                    tok: Tok::Lifetime,
                    line,
                });
            }
        } else {
            toks.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        }
    }
    Ok(toks)
}

/// Skips a block comment (nested ones included) that starts at `s[i]`; returns the index past
/// it.
fn skip_block_comment(s: &[char], mut i: usize, line: &mut usize) -> Result<usize, String> {
    let start = *line;
    let at = |i: usize| s.get(i).copied().unwrap_or('\0');
    let mut depth = 0;
    loop {
        match (at(i), at(i + 1)) {
            _ if i >= s.len() => return Err(format!("line {start}: unterminated comment")),
            ('/', '*') => (depth, i) = (depth + 1, i + 2),
            ('*', '/') => {
                (depth, i) = (depth - 1, i + 2);
                if depth == 0 {
                    return Ok(i);
                }
            }
            ('\n', _) => (*line, i) = (*line + 1, i + 1),
            _ => i += 1,
        }
    }
}

/// Lexes the word at `s[i]`: an identifier, or the prefix of a raw, byte or C string or a
/// byte char, which is then skipped as a whole. Returns the index past it.
fn lex_word(
    s: &[char],
    mut i: usize,
    line: &mut usize,
    toks: &mut Vec<Token>,
) -> Result<usize, String> {
    let start_line = *line;
    let at = |i: usize| s.get(i).copied().unwrap_or('\0');
    let begin = i;
    while at(i).is_alphanumeric() || at(i) == '_' {
        i += 1;
    }
    let word: String = s[begin..i].iter().collect();
    let hashes = (i..).take_while(|&j| at(j) == '#').count();
    if matches!(word.as_str(), "r" | "br" | "cr") && at(i + hashes) == '"' {
        // A raw string: no escapes, ends at `"` and as many `#`.
        i += hashes + 1;
        loop {
            if i >= s.len() {
                return Err(format!("line {start_line}: unterminated raw string"));
            }
            if s[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                i += hashes + 1;
                break;
            }
            if s[i] == '\n' {
                *line += 1;
            }
            i += 1;
        }
        toks.push(Token {
            tok: Tok::Lit,
            line: start_line,
        });
    } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
        i = skip_quoted(s, i, '"', line)?;
        toks.push(Token {
            tok: Tok::Lit,
            line: start_line,
        });
    } else if word == "b" && at(i) == '\'' {
        i = skip_quoted(s, i, '\'', line)?;
        toks.push(Token {
            tok: Tok::Lit,
            line: start_line,
        });
    } else if word == "r" && hashes == 1 {
        // A raw identifier, `r#match`: the word after the `#`.
        i += 1;
    } else {
        toks.push(Token {
            tok: Tok::Ident(word),
            line: *line,
        });
    }
    Ok(i)
}

/// Skips a literal opened by `quote` at `s[i]`, with backslash escapes; returns the index past
/// its closing quote.
fn skip_quoted(s: &[char], mut i: usize, quote: char, line: &mut usize) -> Result<usize, String> {
    let start = *line;
    i += 1;
    while i < s.len() {
        match s[i] {
            '\\' => {
                if s.get(i + 1) == Some(&'\n') {
                    *line += 1;
                }
                i += 2;
            }
            '\n' => {
                *line += 1;
                i += 1;
            }
            c if c == quote => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err(format!("line {start}: unterminated literal"))
}

/// What one file holds, outside test code.
#[derive(Debug, Default)]
struct Layout {
    /// Lines of the file outside `#[cfg(test)]` items.
    code_lines: usize,
    /// (name, lines) of every function with a body outside test code.
    fns: Vec<(String, usize)>,
    /// Out-of-line `#[cfg(test)] mod name;` declarations: their files are test code.
    test_mods: Vec<String>,
}

fn is_punct(t: Option<&Token>, c: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(p), .. }) if *p == c)
}

fn is_ident(t: Option<&Token>, word: &str) -> bool {
    matches!(t, Some(Token { tok: Tok::Ident(w), .. }) if w == word)
}

/// Index of the first `{` or `;` from `i` on that is not inside parentheses or brackets.
fn body_or_end(toks: &[Token], mut i: usize) -> Option<usize> {
    let mut depth = 0i32;
    while let Some(t) = toks.get(i) {
        match t.tok {
            Tok::Punct('(' | '[') => depth += 1,
            Tok::Punct(')' | ']') => depth -= 1,
            Tok::Punct('{' | ';') if depth == 0 => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Index of the `]` closing the attribute whose `[` is at `i`.
fn attribute_end(toks: &[Token], mut i: usize) -> Option<usize> {
    let mut depth = 0;
    while let Some(t) = toks.get(i) {
        match t.tok {
            Tok::Punct('[') => depth += 1,
            Tok::Punct(']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn analyze(src: &str) -> Result<Layout, String> {
    let toks = lex(src)?;
    let mut closing = BTreeMap::new();
    let mut open = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        match t.tok {
            Tok::Punct('{') => open.push(i),
            Tok::Punct('}') => {
                let o = open
                    .pop()
                    .ok_or_else(|| format!("line {}: unmatched }}", t.line))?;
                closing.insert(o, i);
            }
            _ => {}
        }
    }
    if let Some(&o) = open.last() {
        return Err(format!("line {}: unclosed {{", toks[o].line));
    }
    let total_lines = src.lines().count();
    let mut layout = Layout::default();
    let mut test_lines = 0;
    let mut i = 0;
    while i < toks.len() {
        if is_punct(toks.get(i), '#') && is_punct(toks.get(i + 1), '[') {
            let end = attribute_end(&toks, i + 1).ok_or("unclosed attribute")?;
            let cfg_test = end == i + 6
                && is_ident(toks.get(i + 2), "cfg")
                && is_punct(toks.get(i + 3), '(')
                && is_ident(toks.get(i + 4), "test")
                && is_punct(toks.get(i + 5), ')');
            if !cfg_test {
                i = end + 1;
                continue;
            }
            // A `#[cfg(test)]` item: it runs to its body's closing brace or to its `;`.
            let item_end = body_or_end(&toks, end + 1).ok_or("item without an end")?;
            let last = if is_punct(toks.get(item_end), '{') {
                closing[&item_end]
            } else {
                if let Some(m) = (end + 1..item_end).find(|&k| is_ident(toks.get(k), "mod"))
                    && let Some(Tok::Ident(name)) = toks.get(m + 1).map(|t| &t.tok)
                {
                    layout.test_mods.push(name.clone());
                }
                item_end
            };
            test_lines += toks[last].line - toks[i].line + 1;
            i = last + 1;
            continue;
        }
        if is_ident(toks.get(i), "fn")
            && let Some(Tok::Ident(name)) = toks.get(i + 1).map(|t| &t.tok)
        {
            let end = body_or_end(&toks, i + 2).ok_or("fn without an end")?;
            if is_punct(toks.get(end), '{') {
                let lines = toks[closing[&end]].line - toks[i].line + 1;
                layout.fns.push((name.clone(), lines));
            }
        }
        i += 1;
    }
    layout.code_lines = total_lines - test_lines;
    Ok(layout)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The file (and directory) an out-of-line `mod name;` in `file` refers to.
fn module_paths(file: &Path, name: &str) -> [PathBuf; 2] {
    let stem = file.file_stem().unwrap();
    let dir = if stem == "mod" || stem == "lib" || stem == "main" {
        file.parent().unwrap().to_path_buf()
    } else {
        file.with_extension("")
    };
    [dir.join(format!("{name}.rs")), dir.join(name)]
}

/// Every offence under `root` as (file relative to the crate, item, size).
fn offences(crate_root: &Path, root: &Path) -> Vec<(String, String, usize)> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let mut layouts = BTreeMap::new();
    let mut test_paths = BTreeSet::new();
    for file in &files {
        let src = std::fs::read_to_string(file).unwrap();
        let layout = analyze(&src).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for name in &layout.test_mods {
            test_paths.extend(module_paths(file, name));
        }
        layouts.insert(file.clone(), layout);
    }
    let mut found = Vec::new();
    for (file, layout) in &layouts {
        let rel = file.strip_prefix(crate_root).unwrap();
        let in_tests_dir = rel
            .parent()
            .unwrap()
            .components()
            .any(|c| c.as_os_str() == "tests");
        if in_tests_dir || test_paths.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        let rel = rel.to_string_lossy().into_owned();
        if layout.code_lines > MAX_FILE_LINES {
            found.push((rel.clone(), "file".to_string(), layout.code_lines));
        }
        for (name, lines) in &layout.fns {
            if *lines > MAX_FN_LINES {
                found.push((rel.clone(), format!("fn {name}"), *lines));
            }
        }
    }
    found
}

#[test]
fn no_function_over_120_lines_and_no_file_over_900_outside_tests() {
    let crate_root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The daemon (src/), its benches, and every tool crate's source (crates/*/src).
    let mut roots = vec![crate_root.join("src"), crate_root.join("benches")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(crate_root.join("crates"))
        .expect("crates/")
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    roots.extend(crates);
    let found: Vec<_> = roots
        .iter()
        .flat_map(|root| offences(crate_root, root))
        .collect();
    let mut failures = Vec::new();
    for (file, item, size) in &found {
        let limit = if item == "file" {
            MAX_FILE_LINES
        } else {
            MAX_FN_LINES
        };
        match ALLOWED.iter().find(|(f, i, _)| f == file && i == item) {
            None => failures.push(format!("{file}: {item} has {size} lines (limit {limit})")),
            Some((_, _, allowed)) if size > allowed => failures.push(format!(
                "{file}: {item} grew to {size} lines (allowed {allowed} while it is being \
                 split, limit {limit})"
            )),
            Some(_) => {}
        }
    }
    for (file, item, _) in ALLOWED {
        if !found.iter().any(|(f, i, _)| f == file && i == item) {
            failures.push(format!(
                "{file}: {item} is within its limit now: remove it from ALLOWED in tests/layout.rs"
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn braces_in_literals_and_comments_do_not_count() {
    let src = r####"
fn a() {
    let s = "}}}";
    let r = r#"}" {"#;
    let c = '}';
    let e = '\'';
    let b = b'{';
    let bs = b"{{";
    // }
    /* } /* nested } */ } */
    let l: &'static str = s;
    'outer: loop { break 'outer; }
}

fn b() -> [u8; 2] {
    [0; 2]
}

trait T {
    fn declared(&self);
}

#[cfg(test)]
mod tests {
    fn inside_tests() {
    }
}

#[cfg(test)]
mod elsewhere;
"####;
    let layout = analyze(src).unwrap();
    assert_eq!(
        layout.fns,
        vec![("a".to_string(), 12), ("b".to_string(), 3)]
    );
    assert_eq!(layout.test_mods, vec!["elsewhere".to_string()]);
    // 30 lines in all (the first is empty); the two test items take 7.
    assert_eq!(src.lines().count(), 30);
    assert_eq!(layout.code_lines, 23);
}

#[test]
fn unbalanced_braces_are_an_error_not_a_pass() {
    assert!(analyze("fn a() {").is_err());
    assert!(analyze("fn a() { \"}\" }}").is_err());
    assert!(analyze("fn a() { /* } */").is_err());
}
