//! Handing freed heap memory back to the kernel when the agent goes idle.
//!
//! glibc's allocator keeps what the program frees: the main arena gives back only the free
//! space at its top, and the arenas of other threads (rendering runs on its own threads)
//! keep their free pages resident. Between reconciles the agent holds little live data, so
//! most of the heap it touched while rendering and applying is free but still counted in
//! its RSS. [`release_free_memory`] returns those free pages (`malloc_trim(0)`); live data
//! is not moved. On other C libraries it does nothing.
//!
//! [`use_one_arena`] keeps every thread on one arena: glibc otherwise gives threads their
//! own arenas (up to eight per core), and each keeps the high-water mark of what was
//! rendered on it. Measured with 200 releases (`cargo xtask bench-agent`): peak RSS 35.3 →
//! 25.3 MiB. An agent has little parallelism to lose on a lock (a few cores, renders are
//! short), and `MALLOC_ARENA_MAX` in the environment still wins.

/// Returns the allocator's free pages to the kernel; call it when no reconcile runs.
/// Returns whether any memory was released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn release_free_memory() -> bool {
    // SAFETY: malloc_trim only walks glibc's own arenas, under their locks, and gives
    // whole free pages back with madvise; it takes no pointer from us and leaves every
    // live allocation where it is, so no Rust value can be invalidated by it.
    unsafe { libc::malloc_trim(0) != 0 }
}

/// Limits glibc to one arena unless `MALLOC_ARENA_MAX` is set; call it first thing in
/// `main`, before any thread starts. Returns whether the limit was set.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn use_one_arena() -> bool {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return false;
    }
    // SAFETY: mallopt only stores a tuning value in glibc's allocator state under its
    // lock; it takes no pointer and changes no existing allocation.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) == 1 }
}

/// Limits the allocator to one arena (glibc only); returns whether the limit was set.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn use_one_arena() -> bool {
    false
}

/// Returns the allocator's free pages to the kernel; call it when no reconcile runs.
/// Returns whether any memory was released (never, outside glibc).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn free_pages_below_a_live_block_are_released_and_live_data_kept() {
        // 4 MiB in blocks below the mmap threshold, then one live block above them: the
        // freed blocks cannot be trimmed from the top of their arena by `free` itself.
        let blocks: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 64 * 1024]).collect();
        let live = vec![7u8; 256];
        drop(blocks);
        assert!(release_free_memory(), "4 MiB of free pages were released");
        assert!(live.iter().all(|&b| b == 7));
    }
}
