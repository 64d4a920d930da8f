//! Heap set-up for `flotilla template`, a short process whose time is to a large part the
//! kernel's first touch of fresh heap pages (one page fault per 4 KiB page).
//!
//! [`prepare_heap`] makes glibc's allocator keep the main thread's allocations in one heap
//! that only grows (`mallopt`: no trimming, no `mmap` for big blocks; a second thread gets
//! one arena of its own), and puts the first [`HUGE_BYTES`] of that heap on transparent
//! huge pages (`madvise(MADV_HUGEPAGE)`), so that each 2 MiB of it costs one fault instead
//! of 512. Huge pages count whole in the peak RSS,
//! so only a fixed, small part is advised and the rest of the heap stays on 4 KiB pages
//! (see the README's "Rendering speed"). Where transparent huge pages are off the advice
//! does nothing and the process runs as before; on other C libraries nothing is done.
//!
//! glibc reads its own huge-page setting (`glibc.malloc.hugetlb`) only from the environment
//! at start-up, so the same effect is obtained in-process: the heap's break is moved to just
//! below a 2 MiB boundary before glibc grows its heap, glibc is made to grow it in one step
//! past `boundary + HUGE_BYTES` (its headers land below the boundary), and the range from the
//! boundary is advised before anything touches it. A range whose first page was touched
//! before the advice gets no huge page, which is why the order matters.

/// The part of the heap advised for huge pages: four 2 MiB pages, right where the heap
/// starts growing after start-up. A huge page is only made (and counted in the RSS) when
/// the heap first reaches its 2 MiB range, so a heap uses as many as it reaches: the pages
/// it fills cost no more RSS than their 4 KiB pages would, and only the last one it reaches
/// is rounded up, by less than 2 MiB. The biggest heaps of the corpus (argo-cd, ~8-10 MiB)
/// lose most of their faults (ha-redis-ha 1486 -> 213, ~3 ms of ~19); measured over the
/// whole corpus, every case stays within a quarter of helm's peak RSS with at least 1 MiB to
/// spare (README, "Rendering speed"), which a fifth page would no longer leave some of them.
pub const HUGE_BYTES: usize = 8 << 20;

/// Size of a transparent huge page on x86-64 and aarch64 with 4 KiB base pages.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const HUGE_PAGE: usize = 2 << 20;

/// What [`prepare_heap`] did, for tests and measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapSetup {
    /// Start of the range advised for huge pages (0 when none was).
    pub huge_start: usize,
    /// Length of that range in bytes.
    pub huge_len: usize,
}

/// Sets glibc's allocator up for a short process and puts the first [`HUGE_BYTES`] of the
/// heap on transparent huge pages. Call it once, first thing in `main`, before other threads
/// exist; never in a long-running process (the agent), which must give memory back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn prepare_heap() -> HeapSetup {
    const NONE: HeapSetup = HeapSetup {
        huge_start: 0,
        huge_len: 0,
    };
    // SAFETY: mallopt only changes glibc's allocator parameters; it takes no pointer and
    // leaves every live allocation where it is.
    unsafe {
        // This thread allocates from the main (brk) heap, the one advised below; a second
        // thread (the render's worker on big charts) gets an arena of its own, since sharing
        // one arena's lock costs far more than the worker's fresh pages.
        libc::mallopt(libc::M_ARENA_MAX, 2);
        // Big blocks come from the heap too, instead of a fresh mapping (fresh pages)
        // each time; 32 MiB is the largest value glibc accepts.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        // Freed memory at the top of the heap is kept: giving it back would only make the
        // next growth fault it in again. The process is short.
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
    // SAFETY: mallinfo2 only reads glibc's own counters under its lock.
    let top = unsafe { libc::mallinfo2() }.keepcost;
    // A request one byte over the free space at the top of the heap makes glibc grow it.
    let request = top + 1;
    // SAFETY: sbrk(0) only reads the current program break.
    let brk = unsafe { libc::sbrk(0) } as usize;
    if brk == usize::MAX || brk == 0 {
        return NONE;
    }
    // glibc's new top starts at the break we leave (`start`); the block requested below
    // and the header after it lie in `[start, boundary)`, which is all glibc writes then.
    let headers = (request + 2 * 4096).next_multiple_of(4096);
    let boundary = (brk + headers).next_multiple_of(HUGE_PAGE);
    let start = boundary - headers;
    // SAFETY: moving the break up only maps fresh memory that nothing owns; glibc treats
    // the gap between its old top and the new break as someone else's ("foreign sbrk"),
    // fences its old top off and frees it into its bins.
    if unsafe { libc::sbrk((start - brk) as libc::intptr_t) } as usize == usize::MAX {
        return NONE;
    }
    // The growth glibc makes for `request`: padded so that it reaches past the advised range.
    let pad = (boundary + HUGE_BYTES + HUGE_PAGE) - start;
    // SAFETY: as above, a parameter change.
    unsafe {
        libc::mallopt(libc::M_TOP_PAD, pad as i32);
    }
    // SAFETY: a plain allocation, freed below; glibc writes only its chunk headers, at
    // `start` and `start + request` (rounded), both below `boundary`.
    // (`black_box`: the compiler would otherwise drop a malloc whose block is only freed.)
    let block = std::hint::black_box(unsafe { libc::malloc(request) });
    // SAFETY: sbrk(0) only reads the break.
    let end = unsafe { libc::sbrk(0) } as usize;
    let huge_len = HUGE_BYTES.min(end.saturating_sub(boundary) / HUGE_PAGE * HUGE_PAGE);
    let advised = huge_len > 0
        // SAFETY: the range lies inside the heap mapping (below the break just read) and
        // madvise(MADV_HUGEPAGE) only sets a flag on it: no content changes, nothing is
        // unmapped, so no Rust value can be affected. It fails harmlessly (EINVAL) where
        // the kernel has no transparent huge pages.
        && unsafe { libc::madvise(boundary as *mut libc::c_void, huge_len, libc::MADV_HUGEPAGE) }
            == 0;
    // SAFETY: `block` came from malloc above and is freed once; freeing it merges it back
    // into the top of the heap.
    unsafe {
        libc::free(block);
        // Later growth in 1 MiB steps: fewer brk calls; untouched pages cost nothing.
        libc::mallopt(libc::M_TOP_PAD, 1 << 20);
    }
    if advised {
        HeapSetup {
            huge_start: boundary,
            huge_len,
        }
    } else {
        NONE
    }
}

/// Does nothing outside glibc on Linux.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn prepare_heap() -> HeapSetup {
    HeapSetup {
        huge_start: 0,
        huge_len: 0,
    }
}
