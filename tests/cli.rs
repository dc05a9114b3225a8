//! The `backoffd` binary as users run it.

use std::process::Command;

fn backoffd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_backoffd"))
        .args(args)
        .output()
        .expect("run backoffd")
}

#[cfg(feature = "timer-bench")]
#[test]
fn unknown_flag_exits_2_with_one_line_naming_it() {
    let out = backoffd(&["timer-bench", "--frobnicate=3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--frobnicate"), "{err}");
}

#[cfg(feature = "timer-bench")]
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

/// A minimal build (`--no-default-features`) knows the cross-proxy's flags and refuses them
/// in one line, rather than calling them unknown or ignoring them.
#[test]
#[cfg(not(feature = "http"))]
fn a_build_without_the_cross_proxy_refuses_its_flags() {
    refused_for_lack_of(("--http-listen", "127.0.0.1:0"), "http");
}

/// A build without the `cache` feature knows `--cache-size` and refuses it in one line, like
/// the cross-proxy's flags without `http`, rather than run without the cache it was asked for.
#[test]
#[cfg(not(feature = "cache"))]
fn a_build_without_the_cache_refuses_cache_size() {
    refused_for_lack_of(("--cache-size", "100"), "cache");
}

/// Without the `tcp` feature, `--listen-tcp` is refused in one line naming the feature.
#[test]
#[cfg(not(feature = "tcp"))]
fn a_build_without_tcp_refuses_listen_tcp() {
    refused_for_lack_of(("--listen-tcp", "127.0.0.1:0"), "tcp");
}

/// The CoAP-over-TCP bounds are checked, and need the listener they bound.
#[test]
#[cfg(feature = "tcp")]
fn tcp_flags_are_checked_in_one_line() {
    let on = [
        "proxy",
        "--upstream",
        "127.0.0.1:5683",
        "--listen-tcp",
        "127.0.0.1:0",
    ];
    for (extra, says) in [
        (
            &["--tcp-max-connections", "0"][..],
            "--tcp-max-connections: must be at least 1",
        ),
        (
            &["--tcp-max-connections-per-source", "x"][..],
            "--tcp-max-connections-per-source",
        ),
        (
            &["--tcp-csm-timeout", "0s"][..],
            "--tcp-csm-timeout: must be more than 0",
        ),
        (&["--tcp-idle-timeout", "soon"][..], "--tcp-idle-timeout"),
    ] {
        let args: Vec<&str> = on.iter().chain(extra).copied().collect();
        let out = backoffd(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = backoffd(&[
        "proxy",
        "--upstream",
        "127.0.0.1:5683",
        "--tcp-csm-timeout",
        "5s",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--tcp-csm-timeout: needs --listen-tcp"),
        "{err}"
    );
}

/// `proxy` with `flag` exits 2 with one line naming the flag and the feature it needs.
#[cfg(not(all(feature = "http", feature = "cache", feature = "tcp")))]
fn refused_for_lack_of((flag, value): (&str, &str), feature: &str) {
    let out = backoffd(&["proxy", "--upstream", "127.0.0.1:5683", flag, value]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    let named = err.contains(flag) && err.contains(&format!("feature `{feature}`"));
    assert!(named, "{err}");
}

/// Commands a minimal build leaves out are known, and refused in one line naming their
/// feature.
#[test]
#[cfg(not(all(feature = "demo", feature = "timer-bench")))]
fn a_minimal_build_names_the_features_of_the_commands_it_left_out() {
    for (command, built) in [
        ("demo", cfg!(feature = "demo")),
        ("timer-bench", cfg!(feature = "timer-bench")),
    ] {
        if built {
            continue;
        }
        let out = backoffd(&[command]);
        assert_eq!(out.status.code(), Some(2), "{command}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&format!("cargo feature `{command}`")), "{err}");
    }
}

#[test]
fn unknown_command_exits_2() {
    assert_eq!(backoffd(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(backoffd(&[]).status.code(), Some(2));
}

#[test]
fn every_command_has_help() {
    let mut commands = vec![&["--help"][..]];
    if cfg!(feature = "timer-bench") {
        commands.push(&["timer-bench", "--help"][..]);
    }
    for args in commands {
        let out = backoffd(args);
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage"));
    }
}

#[cfg(feature = "timer-bench")]
#[test]
fn timer_bench_json_reports_every_source_beside_the_baseline_with_no_early_timers() {
    let plot = std::env::temp_dir().join(format!("timer-bench-{}.svg", std::process::id()));
    let out = backoffd(&[
        "timer-bench",
        "--timers=300",
        "--max=3ms",
        "--round=100",
        "--histogram=50",
        "--json",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let sources = json_sources(&stdout);
    // pwait2 is left out, with a warning, on kernels before 5.11.
    let expected: Vec<&str> = ["timerfd", "epoll", "pwait2", "nanosleep"]
        .into_iter()
        .filter(|s| *s != "pwait2" || !stderr.contains("pwait2 is not available"))
        .collect();
    assert_eq!(sources, expected, "{stdout}");
    for line in stdout.lines() {
        assert!(line.contains("\"samples\":300,\"early\":0,"), "{line}");
        for key in [
            "p50_us",
            "p99_us",
            "p999_us",
            "max_us",
            "histogram",
            "in_effect",
        ] {
            assert!(line.contains(&format!("\"{key}\":")), "{line}");
        }
        let reactor = !line.starts_with("{\"source\":\"nanosleep\"");
        for key in [
            "overhead_p50_us",
            "overhead_p99_us",
            "kernel_p50_us",
            "dispatch_p99_us",
        ] {
            assert_eq!(line.contains(&format!("\"{key}\":")), reactor, "{line}");
        }
    }
    let svg = std::fs::read_to_string(&plot).expect("--plot wrote its file");
    let _ = std::fs::remove_file(&plot);
    assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg.matches("<path").count(),
        sources.len(),
        "one series per source"
    );
}

#[cfg(feature = "timer-bench")]
/// The `source` of each `--json` line, in order (it is the first member).
fn json_sources(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .map(|l| l.split('"').nth(3).unwrap_or(""))
        .collect()
}

#[cfg(feature = "timer-bench")]
/// Without root, every host knob is a warning and the run goes on; `--json` says what held.
#[test]
fn timer_bench_without_privileges_warns_and_reports_what_was_in_effect() {
    let tools = ["setpriv", "prlimit"].iter().all(|t| {
        Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    // SAFETY: geteuid has no preconditions.
    if !tools || unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to drop from, and util-linux's setpriv and prlimit");
        return;
    }
    let out = Command::new("prlimit")
        .args(["--memlock=0:0", "setpriv", "--reuid=65534", "--regid=65534"])
        .args([
            "--clear-groups",
            env!("CARGO_BIN_EXE_backoffd"),
            "timer-bench",
        ])
        .args([
            "--timers=50",
            "--max=2ms",
            "--wake=timerfd,nanosleep",
            "--json",
        ])
        .args(["--fifo-priority=80", "--timerslack-ns=1"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for knob in ["SCHED_FIFO 80", "/dev/cpu_dma_latency", "mlockall"] {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains("warning: cannot") && l.contains(knob)),
            "{knob}: {stderr}"
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.lines().all(|l| l.ends_with(
        "\"in_effect\":{\"policy\":\"SCHED_OTHER\",\"priority\":null,\"mlockall\":false,\"affinity\":null,\"timerslack_ns\":1,\"cpu_dma_latency_us\":null}}"
    )), "{stdout}");
}

#[cfg(feature = "demo")]
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
    assert!(stdout.contains("(the bare-kernel baseline)"), "{stdout}");
    assert!(stdout.contains("over nanosleep p50"), "{stdout}");
    assert!(
        stdout.contains("requests executed twice upstream           0"),
        "{stdout}"
    );
}

#[cfg(feature = "timer-bench")]
/// A kernel without epoll_pwait2 (before 5.11), simulated by a seccomp filter that answers
/// ENOSYS for it: the reactor falls back to timerfd and timer-bench leaves pwait2 out with a
/// warning, measuring the rest.
#[test]
fn timer_bench_without_epoll_pwait2_leaves_it_out_with_a_warning() {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_backoffd"));
    command.args(["timer-bench", "--timers=50", "--max=2ms", "--json"]);
    command.args(["--wake=pwait2,timerfd,nanosleep"]);
    // SAFETY: between fork and exec the closure only makes two prctl calls on data it owns.
    unsafe { command.pre_exec(deny_epoll_pwait2) };
    let out = command.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: pwait2 is not available on this kernel; left out"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let sources = json_sources(&stdout);
    assert_eq!(sources, ["timerfd", "nanosleep"], "{stdout}");
}

#[cfg(feature = "timer-bench")]
/// Installs a seccomp filter on this (child) process: epoll_pwait2 fails with ENOSYS, every
/// other system call is allowed.
fn deny_epoll_pwait2() -> std::io::Result<()> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let nr = libc::SYS_epoll_pwait2 as u32;
    let mut program = [
        // Load the system call number, the first word of seccomp_data.
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr,
        },
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: prctl with integer arguments, then with a pointer to a program that outlives it.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog,
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
