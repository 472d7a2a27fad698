//! How a result was made: the command line that ran (quoted so that a POSIX shell reads it
//! back as the same arguments) and the machine's load average, as every result file and
//! report header prints them. Linux only (`/proc/loadavg`), like the project. Not here:
//! per-process CPU accounting (the load generator's `cpu`).

use std::fs;

use anyhow::{bail, Context, Result};

/// This process's command line, quoted for the shell.
pub fn command_line() -> String {
    shell_line(&std::env::args().collect::<Vec<_>>())
}

/// The load average now, or why it is unknown.
pub fn load_average() -> String {
    read_load_average().unwrap_or_else(|e| format!("unknown ({e})"))
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` prints them.
pub fn read_load_average() -> Result<String> {
    let s = fs::read_to_string("/proc/loadavg").context("reading /proc/loadavg")?;
    parse_loadavg(&s)
}

/// The first three fields of a `/proc/loadavg` line.
pub fn parse_loadavg(s: &str) -> Result<String> {
    let fields: Vec<&str> = s.split_ascii_whitespace().take(3).collect();
    if fields.len() < 3 || fields.iter().any(|f| f.parse::<f64>().is_err()) {
        bail!("unexpected /proc/loadavg: {s:?}");
    }
    Ok(fields.join(" "))
}

/// `args` as one line a POSIX shell turns back into the same arguments.
pub fn shell_line<S: AsRef<str>>(args: &[S]) -> String {
    args.iter()
        .map(|a| shell_quote(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=,@%+".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadavg_parses() {
        assert_eq!(
            parse_loadavg("0.12 0.08 0.02 1/234 5678\n").unwrap(),
            "0.12 0.08 0.02"
        );
        assert!(parse_loadavg("garbage").is_err());
        assert!(read_load_average().is_ok());
    }

    #[test]
    fn command_lines_are_quoted_for_the_shell() {
        assert_eq!(
            shell_line(&["memfleet", "bench", "--target", "a=127.0.0.1:1,pid=2"]),
            "memfleet bench --target a=127.0.0.1:1,pid=2"
        );
        assert_eq!(
            shell_line(&["x", "--spawn", "m=srv -p {port}", "it's", ""]),
            r"x --spawn 'm=srv -p {port}' 'it'\''s' ''"
        );
    }
}
