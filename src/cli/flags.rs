//! A small command-line flag parser: no dependency, exact error messages.
//!
//! Accepts the four spellings gRPC's interop tools are driven with: `--name=V`, `--name V`,
//! `-name=V` and `-name V`. Unknown flags, missing values and bad values are a [`UsageError`]
//! naming the flag, which the binary prints as one line before exiting with status 2.

use std::fmt;
use std::str::FromStr;

/// One accepted flag.
#[derive(Clone, Copy)]
pub struct Spec {
    /// The flag's name without leading dashes.
    pub name: &'static str,
    /// Whether the flag takes a value (otherwise it is a switch).
    pub takes_value: bool,
}

/// Shorthand for a flag that takes a value.
pub const fn value(name: &'static str) -> Spec {
    Spec {
        name,
        takes_value: true,
    }
}

/// Shorthand for a switch.
pub const fn switch(name: &'static str) -> Spec {
    Spec {
        name,
        takes_value: false,
    }
}

/// A command-line mistake; the message names the flag and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Parsed flags, in command-line order.
#[derive(Debug, Default)]
pub struct Flags {
    given: Vec<(&'static str, Option<String>)>,
    /// `--help` or `-h` was given.
    pub help: bool,
}

impl Flags {
    /// Parses `args` (without the program and subcommand names) against `spec`.
    pub fn parse(args: &[String], spec: &[Spec]) -> Result<Flags, UsageError> {
        let mut flags = Flags::default();
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if arg == "--help" || arg == "-h" {
                flags.help = true;
                continue;
            }
            let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
                return Err(UsageError(format!("unexpected argument {arg:?}")));
            };
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let Some(s) = spec.iter().find(|s| s.name == name) else {
                return Err(UsageError(format!("unknown flag --{name} (see --help)")));
            };
            let value = match (s.takes_value, inline) {
                (true, Some(v)) => Some(v),
                (true, None) => Some(
                    rest.next()
                        .ok_or_else(|| UsageError(format!("--{name} needs a value")))?
                        .clone(),
                ),
                (false, None) => None,
                (false, Some(_)) => {
                    return Err(UsageError(format!(
                        "--{name} is a switch and takes no value"
                    )))
                }
            };
            flags.given.push((s.name, value));
        }
        Ok(flags)
    }

    /// Whether a switch (or any flag) was given.
    pub fn has(&self, name: &str) -> bool {
        self.given.iter().any(|(n, _)| *n == name)
    }

    /// The last value given for `name`, parsed; the error names the flag.
    pub fn get<T: FromStr>(&self, name: &str) -> Result<Option<T>, UsageError>
    where
        T::Err: fmt::Display,
    {
        self.values(name)
            .last()
            .map(|v| parse_value(name, v))
            .transpose()
    }

    /// Like [`get`](Self::get) with a default.
    pub fn get_or<T: FromStr>(&self, name: &str, default: T) -> Result<T, UsageError>
    where
        T::Err: fmt::Display,
    {
        Ok(self.get(name)?.unwrap_or(default))
    }

    /// A port that must be given and non-zero.
    pub fn required_port(&self, name: &str) -> Result<u16, UsageError> {
        match self.get::<u16>(name)? {
            None | Some(0) => Err(UsageError(format!(
                "--{name} is required and must be non-zero"
            ))),
            Some(port) => Ok(port),
        }
    }

    /// Every value of a repeatable flag, parsed, in order.
    pub fn get_all<T: FromStr>(&self, name: &str) -> Result<Vec<T>, UsageError>
    where
        T::Err: fmt::Display,
    {
        self.values(name).map(|v| parse_value(name, v)).collect()
    }

    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.given
            .iter()
            .filter(move |(n, _)| *n == name)
            .filter_map(|(_, v)| v.as_deref())
    }
}

fn parse_value<T: FromStr>(name: &str, v: &str) -> Result<T, UsageError>
where
    T::Err: fmt::Display,
{
    v.parse()
        .map_err(|e| UsageError(format!("--{name}: invalid value {v:?}: {e}")))
}

/// What a subcommand's command line asks for: its help text, or a run with parsed arguments.
#[derive(Debug)]
pub enum Parsed<T> {
    /// `--help` or `-h` was given.
    Help,
    /// Everything parsed and validated; nothing bound or started yet.
    Run(T),
}

impl<T> Parsed<T> {
    /// The arguments to run with; for `Help`, prints `help` to stdout and gives `None`.
    pub fn or_print_help(self, help: &str) -> Option<T> {
        match self {
            Parsed::Help => {
                print!("{help}");
                None
            }
            Parsed::Run(args) => Some(args),
        }
    }
}

/// A flag value that must be a duration like `500ms` or `1.5s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationArg(pub std::time::Duration);

impl FromStr for DurationArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        backoffd::time::parse_duration(s).map(DurationArg)
    }
}

/// A flag value that is a size in bytes: a whole number of bytes, `KiB` or `MiB` (1024-based,
/// written as here), e.g. `65536`, `64KiB`, `4MiB`. Bare `K`/`M` and `kB`/`MB` are refused
/// rather than guessed: some read them as 1000, some as 1024.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeArg(pub usize);

/// The units a [`SizeArg`] may carry, largest first.
const SIZE_UNITS: [(&str, usize); 2] = [("MiB", 1 << 20), ("KiB", 1 << 10)];

impl FromStr for SizeArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (digits, unit) = SIZE_UNITS
            .iter()
            .find_map(|&(suffix, unit)| Some((s.strip_suffix(suffix)?, unit)))
            .unwrap_or((s, 1));
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err("expected a whole number of bytes, KiB or MiB: 65536, 64KiB, 4MiB".into());
        }
        digits
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_mul(unit))
            .map(SizeArg)
            .ok_or_else(|| format!("more than {} bytes", usize::MAX))
    }
}

impl fmt::Display for SizeArg {
    /// The shortest exact spelling that [`SizeArg::from_str`] reads back: `4MiB`, `64KiB`,
    /// `1000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        match SIZE_UNITS
            .iter()
            .find(|&&(_, unit)| bytes != 0 && bytes % unit == 0)
        {
            Some((suffix, unit)) => write!(f, "{}{suffix}", bytes / unit),
            None => write!(f, "{bytes}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(s: &str) -> Result<usize, String> {
        s.parse::<SizeArg>().map(|SizeArg(bytes)| bytes)
    }

    #[test]
    fn size_accepts_plain_bytes_kib_and_mib() {
        assert_eq!(size("0"), Ok(0));
        assert_eq!(size("1000"), Ok(1000));
        assert_eq!(size("64KiB"), Ok(64 * 1024));
        assert_eq!(size("4MiB"), Ok(4 << 20));
        assert_eq!(size("0MiB"), Ok(0));
        assert_eq!(size("007KiB"), Ok(7 * 1024));
    }

    #[test]
    fn size_refuses_decimal_and_ambiguous_units() {
        for s in [
            "64K", "64k", "4M", "64kB", "64KB", "4MB", "4mib", "4MIB", "1GiB", "4 MiB",
        ] {
            let e = size(s).unwrap_err();
            assert!(e.contains("64KiB") && e.contains("4MiB"), "{s}: {e}");
        }
    }

    #[test]
    fn size_refuses_what_is_not_a_whole_number() {
        for s in ["", "MiB", "KiB", "-1", "+1", "1.5MiB", "1e6", " 1", "0x10"] {
            assert!(size(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn size_past_the_address_space_is_an_error_not_a_wrap() {
        assert!(size(&format!("{}", usize::MAX)).is_ok());
        assert!(size(&format!("{}0", usize::MAX))
            .unwrap_err()
            .contains("more than"));
        assert!(size(&format!("{}MiB", usize::MAX >> 19))
            .unwrap_err()
            .contains("more than"));
    }

    #[test]
    fn size_displays_as_the_shortest_spelling_it_reads_back() {
        for (bytes, shown) in [
            (0, "0"),
            (1000, "1000"),
            (65536, "64KiB"),
            (4 << 20, "4MiB"),
        ] {
            assert_eq!(SizeArg(bytes).to_string(), shown);
            assert_eq!(size(shown), Ok(bytes));
        }
        assert_eq!(SizeArg(1536 * 1024).to_string(), "1536KiB");
    }

    #[test]
    fn bad_size_names_the_flag_and_the_accepted_forms() {
        let f = Flags::parse(&args(&["--retry_port=64kB"]), SPEC).unwrap();
        let e = f.get::<SizeArg>("retry_port").unwrap_err();
        assert_eq!(
            e.0,
            "--retry_port: invalid value \"64kB\": expected a whole number of bytes, KiB or MiB: \
             65536, 64KiB, 4MiB"
        );
    }

    const SPEC: &[Spec] = &[value("control_port"), value("retry_port"), switch("json")];

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn accepts_all_four_spellings() {
        for a in [
            args(&["--control_port=8080"]),
            args(&["--control_port", "8080"]),
            args(&["-control_port=8080"]),
            args(&["-control_port", "8080"]),
        ] {
            let f = Flags::parse(&a, SPEC).unwrap();
            assert_eq!(f.get::<u16>("control_port"), Ok(Some(8080)));
        }
    }

    #[test]
    fn unknown_flag_is_named() {
        let e = Flags::parse(&args(&["--bogus=1"]), SPEC).unwrap_err();
        assert!(e.0.contains("--bogus"), "{e}");
    }

    #[test]
    fn bad_value_names_flag_and_value() {
        let f = Flags::parse(&args(&["--retry_port", "eighty"]), SPEC).unwrap();
        let e = f.get::<u16>("retry_port").unwrap_err();
        assert!(
            e.0.contains("--retry_port") && e.0.contains("eighty"),
            "{e}"
        );
    }

    #[test]
    fn missing_value_and_valued_switch_are_errors() {
        assert!(Flags::parse(&args(&["--retry_port"]), SPEC).is_err());
        assert!(Flags::parse(&args(&["--json=yes"]), SPEC).is_err());
        assert!(Flags::parse(&args(&["stray"]), SPEC).is_err());
    }

    #[test]
    fn switches_and_help() {
        let f = Flags::parse(&args(&["--json", "-h"]), SPEC).unwrap();
        assert!(f.has("json") && f.help);
    }
}
