//! The host settings a timer measurement runs under: cyclictest's knobs (`-m`, `-a`, `-p`, its
//! `/dev/cpu_dma_latency` hold) and the timer slack. Each one is asked for; one that this
//! process may not have (no root, no CAP_SYS_NICE, a low RLIMIT_MEMLOCK, a container without
//! the device) becomes a warning, and [`InEffect`] says what the run really had.

use std::fs::File;
use std::io::{self, Write};

/// What the command line asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// Lock all current and future memory (cyclictest `-m`), so no page fault lands in a sample.
    pub mlockall: bool,
    /// Pin the thread to this CPU (cyclictest `-a`).
    pub affinity: Option<usize>,
    /// Run under SCHED_FIFO at this priority, 1..=99 (cyclictest `-p`).
    pub fifo_priority: Option<i32>,
    /// Set PR_SET_TIMERSLACK, which pads nanosleep, epoll and epoll_pwait2 sleeps (not timerfd).
    pub timerslack_ns: Option<u64>,
    /// Hold `/dev/cpu_dma_latency` at 0 µs so idle CPUs stay out of deep C-states.
    pub dma_latency: bool,
}

impl Default for Wanted {
    fn default() -> Self {
        Wanted {
            mlockall: true,
            affinity: None,
            fifo_priority: None,
            timerslack_ns: None,
            dma_latency: true,
        }
    }
}

/// What the run actually had. Dropping it releases the `cpu_dma_latency` request.
#[derive(Debug)]
pub struct InEffect {
    /// `Some(p)`: SCHED_FIFO at priority p; `None`: the default policy (SCHED_OTHER).
    pub fifo_priority: Option<i32>,
    /// Whether all memory is locked.
    pub mlockall: bool,
    /// The CPU the thread is pinned to, if any.
    pub affinity: Option<usize>,
    /// The thread's timer slack, read back from the kernel.
    pub timerslack_ns: u64,
    /// The open request that keeps the CPUs' exit latency at 0 µs, while it is held.
    dma_latency: Option<File>,
}

impl InEffect {
    /// Whether `/dev/cpu_dma_latency` is held at 0 µs.
    pub fn holds_dma_latency(&self) -> bool {
        self.dma_latency.is_some()
    }

    /// One line for the report, e.g. "SCHED_FIFO 80, memory locked, CPU 1, ...".
    pub fn describe(&self) -> String {
        let policy = self
            .fifo_priority
            .map_or("SCHED_OTHER".to_string(), |p| format!("SCHED_FIFO {p}"));
        let memory = match self.mlockall {
            true => "memory locked",
            false => "memory not locked",
        };
        let cpu = self
            .affinity
            .map_or("any CPU".to_string(), |c| format!("CPU {c}"));
        let dma = match self.holds_dma_latency() {
            true => "/dev/cpu_dma_latency held at 0 us",
            false => "/dev/cpu_dma_latency not held",
        };
        format!(
            "{policy}, {memory}, {cpu}, timer slack {} ns, {dma}",
            self.timerslack_ns
        )
    }

    /// The same as a JSON object, for every `--json` line.
    pub fn json(&self) -> String {
        let or_null = |v: Option<String>| v.unwrap_or_else(|| "null".into());
        format!(
            "{{\"policy\":\"{}\",\"priority\":{},\"mlockall\":{},\"affinity\":{},\"timerslack_ns\":{},\"cpu_dma_latency_us\":{}}}",
            match self.fifo_priority {
                Some(_) => "SCHED_FIFO",
                None => "SCHED_OTHER",
            },
            or_null(self.fifo_priority.map(|p| p.to_string())),
            self.mlockall,
            or_null(self.affinity.map(|c| c.to_string())),
            self.timerslack_ns,
            match self.holds_dma_latency() {
                true => "0",
                false => "null",
            }
        )
    }
}

/// Applies what is wanted, as far as this process may; a warning line for each thing it may not.
pub fn apply(wanted: &Wanted) -> (InEffect, Vec<String>) {
    let mut warnings = Vec::new();
    let mut warn = |what: String, e: io::Error| warnings.push(format!("cannot {what}: {e}"));
    let affinity = wanted.affinity.filter(|&cpu| {
        pin_to_cpu(cpu)
            .map_err(|e| warn(format!("pin to CPU {cpu}"), e))
            .is_ok()
    });
    let fifo_priority = wanted.fifo_priority.filter(|&p| {
        set_fifo_priority(p)
            .map_err(|e| {
                warn(
                    format!("switch to SCHED_FIFO {p}; staying on SCHED_OTHER"),
                    e,
                )
            })
            .is_ok()
    });
    if let Some(ns) = wanted.timerslack_ns {
        if let Err(e) = set_timer_slack(ns) {
            warn(format!("set the timer slack to {ns} ns"), e);
        }
    }
    let dma_latency = match wanted.dma_latency {
        true => hold_dma_latency()
            .map_err(|e| warn("hold /dev/cpu_dma_latency at 0".into(), e))
            .ok(),
        false => None,
    };
    // Last, so that what the settings above allocated is locked too.
    let mlockall = wanted.mlockall
        && lock_memory()
            .map_err(|e| warn("lock memory (mlockall)".into(), e))
            .is_ok();
    let effect = InEffect {
        fifo_priority,
        mlockall,
        affinity,
        timerslack_ns: timer_slack(),
        dma_latency,
    };
    (effect, warnings)
}

/// Sets this thread's timer slack (`PR_SET_TIMERSLACK`), which pads `epoll_wait`'s and
/// `clock_nanosleep`'s sleeps under SCHED_OTHER (50 µs by default; real-time threads get none).
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_TIMERSLACK takes an unsigned long and no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This thread's timer slack in nanoseconds.
pub fn timer_slack() -> u64 {
    // SAFETY: prctl with PR_GET_TIMERSLACK takes no pointers; it returns the slack.
    let rc = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    rc.max(0) as u64
}

/// Runs this thread under `SCHED_FIFO` at `priority` (1..=99), as cyclictest's `-p` does, so
/// the measurement is not queued behind other runnable processes. Needs CAP_SYS_NICE.
pub fn set_fifo_priority(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is this thread; `param` is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pins this thread to one CPU, so that no migration lands in a sample.
fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET stays within it (checked above).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Locks current and future pages (cyclictest `-m`): no page fault inside a measurement.
fn lock_memory() -> io::Result<()> {
    // SAFETY: plain syscall with flags only.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel's PM QoS to keep every CPU's wake-up latency at 0 µs for as long as the file
/// stays open, as cyclictest does by default: a deep C-state exit can cost 100 µs and more.
fn hold_dma_latency() -> io::Result<File> {
    let mut file = File::options().write(true).open("/dev/cpu_dma_latency")?;
    file.write_all(&0i32.to_ne_bytes())?;
    Ok(file)
}
