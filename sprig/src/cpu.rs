//! Keeping a helper thread off the CPU of the thread that starts it.
//!
//! On the 2-vCPU machines `flotilla template` is measured on, Linux placed a freshly
//! spawned helper (or one woken by the thread it waited for) on the spawning thread's own
//! CPU about half the time, and the two then shared that CPU in 4 ms slices while the other
//! one idled: a key search meant to overlap the rendering stalled it instead
//! (`perf record -e sched:sched_switch,sched:sched_wakeup_new`). A helper kept off its
//! spawner's [`current_cpu`] ([`keep_off_cpu`] from the spawner, [`avoid_cpu`] from the
//! helper itself) runs on the others; the spawner itself stays free to move.

/// The CPU the calling thread runs on, where the platform tells.
pub fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu takes no argument and only reads the calling thread's CPU.
        #[allow(unsafe_code)]
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Restricts the calling thread to the CPUs it may use other than `cpu`, when there are
/// such; otherwise (or where the platform has no affinity) nothing changes.
pub fn avoid_cpu(cpu: usize) {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    // SAFETY: `others` returns a plain bit set; sched_setaffinity reads exactly
    // `size_of::<cpu_set_t>()` bytes of it, for the calling thread (pid 0).
    unsafe {
        if let Some(set) = others(cpu) {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
}

/// [`avoid_cpu`] for a thread just spawned, from its spawner: it moves before it first runs
/// (a new thread placed on its spawner's CPU otherwise waits up to a time slice to run at
/// all, ~2 ms measured, before it could move itself).
pub fn keep_off_cpu<T>(thread: &std::thread::JoinHandle<T>, cpu: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: the pthread_t comes from a JoinHandle, so the thread is not yet joined or
    // detached and the id is valid; pthread_setaffinity_np reads exactly
    // `size_of::<cpu_set_t>()` bytes of the bit set `others` returns.
    unsafe {
        use std::os::unix::thread::JoinHandleExt;
        if let Some(set) = others(cpu) {
            libc::pthread_setaffinity_np(
                thread.as_pthread_t(),
                std::mem::size_of::<libc::cpu_set_t>(),
                &set,
            );
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (thread, cpu);
}

/// Placing a helper started as a scoped thread (whose raw handle std does not give out, so
/// [`keep_off_cpu`] cannot be used): the spawner takes [`spawner_cpu`] before it starts the
/// helper and calls [`after_spawn`] right after; the helper calls [`leave_cpu`] with that
/// value first thing. Should Linux have queued the helper on the spawner's CPU, the spawner
/// yields it that CPU at once, and the helper moves to another (measured on the 2-vCPU
/// machines: queued so in more than half of the runs, a helper then waited 0.3-3.8 ms to
/// start, `perf record -e sched:sched_wakeup_new,sched:sched_switch`).
pub fn spawner_cpu() -> usize {
    current_cpu().unwrap_or(usize::MAX)
}

/// See [`spawner_cpu`]: the helper's first step (nothing when `cpu` is unknown).
pub fn leave_cpu(cpu: usize) {
    if cpu != usize::MAX {
        avoid_cpu(cpu);
    }
}

/// See [`spawner_cpu`]: the spawner's step once the helper is started.
pub fn after_spawn() {
    std::thread::yield_now();
}

/// `builder.spawn_scoped(scope, f)` with the helper placed off this thread's CPU
/// ([`spawner_cpu`], [`leave_cpu`], [`after_spawn`]).
pub fn spawn_scoped_elsewhere<'scope, 'env, T, F>(
    builder: std::thread::Builder,
    scope: &'scope std::thread::Scope<'scope, 'env>,
    f: F,
) -> std::io::Result<std::thread::ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    let cpu = spawner_cpu();
    let helper = builder.spawn_scoped(scope, move || {
        leave_cpu(cpu);
        f()
    });
    after_spawn();
    helper
}

/// The calling thread's allowed CPUs without `cpu`, when `cpu` is one of at least two.
#[cfg(target_os = "linux")]
fn others(cpu: usize) -> Option<libc::cpu_set_t> {
    #[allow(unsafe_code)]
    // SAFETY: `set` is a plain bit set owned by this frame, zeroed before use;
    // sched_getaffinity writes at most `size_of::<cpu_set_t>()` bytes of it, and the CPU_*
    // helpers index it only below CPU_SETSIZE (checked first).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize
            || libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0
            || !libc::CPU_ISSET(cpu, &set)
            || libc::CPU_COUNT(&set) < 2
        {
            return None;
        }
        libc::CPU_CLR(cpu, &mut set);
        Some(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_helper_leaves_its_spawners_cpu_when_it_can() {
        let Some(cpu) = current_cpu() else {
            return;
        };
        let others = std::thread::available_parallelism().map_or(1, |n| n.get()) > 1;
        let moved = std::thread::spawn(move || {
            avoid_cpu(cpu);
            // Let the scheduler act on the new affinity.
            std::thread::yield_now();
            current_cpu()
        })
        .join()
        .expect("no panic");
        if others {
            assert_ne!(moved, Some(cpu), "the helper still runs on CPU {cpu}");
        }
        if others {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let helper = std::thread::spawn(move || {
                let _ = rx.recv();
                current_cpu()
            });
            keep_off_cpu(&helper, cpu);
            drop(tx);
            assert_ne!(helper.join().expect("no panic"), Some(cpu));
        }
        if others {
            // A scoped helper placed with the spawner's steps.
            let cpu = spawner_cpu();
            let moved = std::thread::scope(|s| {
                spawn_scoped_elsewhere(std::thread::Builder::new(), s, || {
                    std::thread::yield_now();
                    current_cpu()
                })
                .expect("a thread")
                .join()
                .expect("no panic")
            });
            assert_ne!(moved, Some(cpu));
        }
        // An unknown CPU changes nothing.
        leave_cpu(usize::MAX);
        // Out-of-range CPUs change nothing.
        avoid_cpu(usize::MAX);
        assert!(current_cpu().is_some());
    }
}
