//! The `backoffd` binary as users run it.

use std::process::Command;

fn backoffd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_backoffd"))
        .args(args)
        .output()
        .expect("run backoffd")
}

#[test]
fn unknown_flag_exits_2_with_one_line_naming_it() {
    let out = backoffd(&["timer-bench", "--frobnicate=3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--frobnicate"), "{err}");
}

#[test]
fn bad_values_exit_2_naming_the_flag() {
    for (args, flag) in [
        (&["timer-bench", "--timers", "lots"][..], "--timers"),
        (&["timer-bench", "--max=5"][..], "--max"),
        (&["timer-bench", "--wake=poll"][..], "--wake"),
        (&["timer-bench", "--timers=0"][..], "--timers"),
        (&["timer-bench", "--min=9ms", "--max=1ms"][..], "--min"),
    ] {
        let out = backoffd(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(flag),
            "{args:?}"
        );
    }
}

#[test]
fn unknown_command_exits_2() {
    assert_eq!(backoffd(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(backoffd(&[]).status.code(), Some(2));
}

#[test]
fn every_command_has_help() {
    for args in [&["--help"][..], &["timer-bench", "--help"][..]] {
        let out = backoffd(args);
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage"));
    }
}

#[test]
fn timer_bench_json_reports_both_sources_with_no_early_timers() {
    let out = backoffd(&[
        "timer-bench",
        "--timers=300",
        "--max=3ms",
        "--round=100",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2);
    for (line, source) in lines.iter().zip(["timerfd", "epoll"]) {
        assert!(
            line.starts_with(&format!(
                "{{\"source\":\"{source}\",\"samples\":300,\"early\":0,"
            )),
            "{line}"
        );
        for key in ["p50_us", "p99_us", "p999_us", "max_us"] {
            assert!(line.contains(&format!("\"{key}\":")), "{line}");
        }
    }
}

#[test]
fn demo_runs_everything_on_loopback_and_passes() {
    let out = backoffd(&["demo", "--requests", "120"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Result: PASSED"), "{stdout}");
    assert!(
        stdout.contains("requests executed twice upstream           0"),
        "{stdout}"
    );
}
