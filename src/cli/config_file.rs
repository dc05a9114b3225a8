//! The `backoffd serve --config FILE` format: sections of `key = value` lines whose keys are
//! exactly the command-line flags of that part, so a file and a command line mean the same
//! thing and are validated by the same code.
//!
//! ```text
//! # comments start with '#'
//! [proxy]                      # one section per CoAP listener (route)
//! listen = 0.0.0.0:5683
//! upstream = 127.0.0.1:5684
//! preset = lan
//! cache-size = 4MiB            # sizes: bytes, KiB or MiB
//! [reconnect]
//! control_port = 8080
//! retry_port = 8081
//! [metrics]
//! listen = 127.0.0.1:9102
//! ```
//! A switch is written `forward = true`; a repeatable flag is repeated (`allow = ...`).

use std::fmt;

/// One `[kind]` section.
#[derive(Debug, PartialEq, Eq)]
pub struct Section {
    /// The name between the brackets, one of the `known` kinds given to [`parse`].
    pub kind: String,
    /// 1-based line of the `[kind]` header.
    pub line: usize,
    /// The section's `key = value` lines, in file order.
    pub entries: Vec<Entry>,
}

/// One `key = value` line.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    /// 1-based line number, for error messages.
    pub line: usize,
    /// The flag name, without dashes, trimmed.
    pub key: String,
    /// Everything after the `=`, trimmed, comment removed.
    pub value: String,
}

/// A mistake in the file, with its line.
#[derive(Debug, PartialEq, Eq)]
pub struct FileError {
    /// 1-based line the mistake is on.
    pub line: usize,
    /// What is wrong, in one line.
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Parses the whole file; sections must be one of `known`.
pub fn parse(text: &str, known: &[&str]) -> Result<Vec<Section>, FileError> {
    let mut sections: Vec<Section> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split_once('#').map_or(raw, |(c, _)| c).trim();
        if content.is_empty() {
            continue;
        }
        if let Some(kind) = content.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let kind = kind.trim();
            if !known.contains(&kind) {
                return Err(FileError {
                    line,
                    message: format!(
                        "unknown section [{kind}] (expected one of: {})",
                        known.join(", ")
                    ),
                });
            }
            sections.push(Section {
                kind: kind.to_string(),
                line,
                entries: Vec::new(),
            });
            continue;
        }
        let Some((key, value)) = content.split_once('=') else {
            return Err(FileError {
                line,
                message: format!("expected `key = value` or `[section]`, found {content:?}"),
            });
        };
        let Some(section) = sections.last_mut() else {
            return Err(FileError {
                line,
                message: "a setting before the first [section]".into(),
            });
        };
        section.entries.push(Entry {
            line,
            key: key.trim().to_string(),
            value: value.trim().to_string(),
        });
    }
    Ok(sections)
}

impl Section {
    /// The section as command-line arguments (`--key=value`; `key = true` is a bare switch,
    /// `key = false` is omitted), for the same parser the flags use.
    pub fn to_args(&self, switches: &[&str]) -> Result<Vec<String>, FileError> {
        let mut args = Vec::new();
        for e in &self.entries {
            if switches.contains(&e.key.as_str()) {
                match e.value.as_str() {
                    "true" => args.push(format!("--{}", e.key)),
                    "false" => {}
                    other => {
                        return Err(FileError {
                            line: e.line,
                            message: format!("{}: expected true or false, found {other:?}", e.key),
                        })
                    }
                }
            } else {
                args.push(format!("--{}={}", e.key, e.value));
            }
        }
        Ok(args)
    }

    /// The line of the last entry for `key`, to point a validation error at it.
    pub fn line_of(&self, key: &str) -> usize {
        self.entries
            .iter()
            .rev()
            .find(|e| e.key == key)
            .map_or(self.line, |e| e.line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["proxy", "reconnect", "metrics"];

    #[test]
    fn sections_entries_and_comments() {
        let text = "# top\n[proxy]\nlisten = 0.0.0.0:5683 # inline\nallow = a:1\nallow = b:2\nforward = true\n\n[metrics]\nlisten=127.0.0.1:9102\n";
        let s = parse(text, KNOWN).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].entries.len(), 4);
        assert_eq!(s[0].entries[0].value, "0.0.0.0:5683");
        assert_eq!(
            s[0].to_args(&["forward"]).unwrap(),
            [
                "--listen=0.0.0.0:5683",
                "--allow=a:1",
                "--allow=b:2",
                "--forward"
            ]
        );
        assert_eq!(s[0].line_of("allow"), 5);
        assert_eq!(s[1].line, 8);
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(parse("[proxy]\nlisten\n", KNOWN).unwrap_err().line, 2);
        assert_eq!(parse("listen = x\n", KNOWN).unwrap_err().line, 1);
        let e = parse("\n[bogus]\n", KNOWN).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("bogus"));
        let s = parse("[proxy]\nforward = yes\n", KNOWN).unwrap();
        assert_eq!(s[0].to_args(&["forward"]).unwrap_err().line, 2);
    }
}
